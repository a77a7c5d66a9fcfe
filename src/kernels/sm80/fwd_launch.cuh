// Launching the Ampere-class forward: tile shapes per head dim, shared-memory limits, the grid.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/common/func_attributes.h"
#include "kernels/sm80/fwd_kernel.cuh"

namespace flashattn::kernels {

// Tile shapes (kBlockM query rows x kBlockN keys, warps) per head dim bucket, chosen by measurement on an H100
// (bench/NOTES.md, sm80 v2): 32 rows per warp where the S and O accumulators fit the 255 registers (each K/V
// fragment read from shared memory then feeds two m16 tiles), 16 rows and two blocks per SM above hd128. Q stays
// in registers only at hd64: at hd128 and hd256 it spills and costs 20-30% (bench/NOTES.md, sm80 v3). hd128 takes
// 64-key tiles since the loop's copies and masks got leaner: 56 bytes of spills at sm_90a, yet 7.7% ahead of 32-key
// tiles over the sweep (interleaved A/B on an H100, bench/NOTES.md). The last argument, true, puts the tiles in the
// swizzled shared-memory layout: +3-4% at hd128 and +12-15% at hd192, measured the same way, and then +6-11% and
// +1-3% more once their partial tiles took the compact copy (FullTileCopy::copy_partial). hd64 lost 1-8% with it;
// hd256 lost 7-12%, and with the compact partial copy reads 0.93-1.01x the padded layout: both stay padded.
template <typename Elem, int kHeadDim> struct FwdTileShape;
template <typename Elem> struct FwdTileShape<Elem, 64> { using Traits = FwdTraits<Elem, 64, 128, 64, 4, true>; };
template <typename Elem> struct FwdTileShape<Elem, 96> { using Traits = FwdTraits<Elem, 96, 64, 64, 4, false>; };
template <typename Elem> struct FwdTileShape<Elem, 128> {
    using Traits = FwdTraits<Elem, 128, 128, 64, 4, false, true>;
};
template <typename Elem> struct FwdTileShape<Elem, 192> {
    using Traits = FwdTraits<Elem, 192, 64, 64, 4, false, true>;
};
template <typename Elem> struct FwdTileShape<Elem, 256> { using Traits = FwdTraits<Elem, 256, 64, 64, 4, false>; };

template <ElemType kElem, int kHeadDim>
void launch_fwd_sm80(const AttnParams& p) {
    using T = typename FwdTileShape<ElemOf<kElem>, kHeadDim>::Traits;
    const auto kernel = fwd_kernel<T>;
    ensure_func_attributes(kernel, T::kSmemBytes, /*non_portable_clusters=*/false, "forward");
    const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
    const dim3 grid(m_blocks, p.batch, p.nheads);
    kernel<<<grid, T::kThreads, T::kSmemBytes, static_cast<cudaStream_t>(p.stream)>>>(p);
    check_cuda(cudaGetLastError(), "forward kernel launch");
}

}  // namespace flashattn::kernels

#define FLASHATTN_INSTANTIATE_SM80_FWD(ELEM, HDIM) \
    template void launch_fwd_sm80<ElemType::ELEM, HDIM>(const AttnParams&);
