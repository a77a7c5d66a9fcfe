// Host-side declarations of the compiled Ampere-class launchers (defined in generated translation units, one per
// direction x dtype x head dim bucket).
#pragma once

#include "common/params.h"
#include "kernels/sm80/bwd_plan.h"
#include "kernels/sm80/kvcache_plan.h"

namespace flashattn::kernels {

template <ElemType kElem, int kHeadDim>
void launch_fwd_sm80(const AttnParams& p);

template <ElemType kElem, int kHeadDim>
void launch_bwd_sm80(const AttnParams& p, const BwdPlan& plan);

template <ElemType kElem, int kHeadDim>
void launch_kvc_sm80(const AttnParams& p, const KvcPlan& plan);

// How many blocks of the kv-cache attention kernel fit on one SM of the current device (its split heuristic's input).
template <ElemType kElem, int kHeadDim>
int kvc_blocks_per_sm_sm80(const AttnParams& p);

#define FLASHATTN_DECLARE_SM80(ELEM, HDIM)                                                   \
    extern template void launch_fwd_sm80<ElemType::ELEM, HDIM>(const AttnParams&);           \
    extern template void launch_bwd_sm80<ElemType::ELEM, HDIM>(const AttnParams&, const BwdPlan&); \
    extern template void launch_kvc_sm80<ElemType::ELEM, HDIM>(const AttnParams&, const KvcPlan&); \
    extern template int kvc_blocks_per_sm_sm80<ElemType::ELEM, HDIM>(const AttnParams&);
#define FLASHATTN_DECLARE_SM80_ALL_DIMS(ELEM) \
    FLASHATTN_DECLARE_SM80(ELEM, 64)          \
    FLASHATTN_DECLARE_SM80(ELEM, 96)          \
    FLASHATTN_DECLARE_SM80(ELEM, 128)         \
    FLASHATTN_DECLARE_SM80(ELEM, 192)         \
    FLASHATTN_DECLARE_SM80(ELEM, 256)
FLASHATTN_DECLARE_SM80_ALL_DIMS(f16)
FLASHATTN_DECLARE_SM80_ALL_DIMS(bf16)
#undef FLASHATTN_DECLARE_SM80_ALL_DIMS
#undef FLASHATTN_DECLARE_SM80

}  // namespace flashattn::kernels
