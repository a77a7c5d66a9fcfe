// Launching the kv-cache forward: append (and rotate), attention over the splits, combine.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/params.h"
#include "flashattn/flashattn.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_props.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/common/func_attributes.h"
#include "kernels/sm80/kvcache_append.cuh"
#include "kernels/sm80/kvcache_combine.cuh"
#include "kernels/sm80/kvcache_kernel.cuh"

namespace flashattn::kernels {

// 64 packed query rows (4 warps of 16): decode has few rows, so one m16 tile per warp. 64-key tiles, 32 above head
// dim 128, where the O accumulators take 128 registers (ptxas -v: hd192 fits, hd256 spills 88 bytes). Not tuned on
// a GPU.
constexpr int kKvcWideHeadDim = 128;
template <typename Elem, int kHeadDim>
using KvcTileShape = KvcTraits<Elem, kHeadDim, 64, (kHeadDim > kKvcWideHeadDim ? 32 : 64), 4>;
// Up to 16 packed rows (decode: seqlen_q x query heads per kv head <= 16) and head dim 128: one m16 tile of rows,
// the 4 warps along the keys of 64-key tiles (16 each), so that none computes padding rows alone. (Above 128 the
// fp32 O of 16 rows spills: ptxas -v, 56 bytes at 192, 372 at 256.)
constexpr int kKvcNarrowRows = 16;
template <typename Elem, int kHeadDim>
using KvcNarrowShape = KvcTraits<Elem, kHeadDim, kKvcNarrowRows, 64, 4, true>;
// Calls f with the traits (a value of that type) of the shape that runs p: the launch and the split heuristic's
// occupancy both go through here, so they cannot disagree.
template <ElemType kElem, int kHeadDim, class F>
auto with_kvc_shape(const AttnParams& p, F f) {
    using Elem = ElemOf<kElem>;
    if constexpr (kHeadDim <= kKvcWideHeadDim)
        if (kvc_kv_rows(p.seqlen_q, p.nheads, p.nheads_k) <= kKvcNarrowRows) return f(KvcNarrowShape<Elem, kHeadDim>{});
    return f(KvcTileShape<Elem, kHeadDim>{});
}

// The attention kernel with its shared-memory limit raised (once per kernel and context: func_attributes.h).
template <class T>
auto prepared_kvcache_kernel() {
    const auto kernel = kvcache_kernel<T>;
    ensure_func_attributes(kernel, T::kSmemBytes, /*non_portable_clusters=*/false, "kv-cache");
    return kernel;
}

// Asked once per process and shape (the first device's answer serves all: only the split heuristic reads it).
template <class T>
int kvc_shape_blocks_per_sm() {
    static const int cached = [] {
        const auto kernel = prepared_kvcache_kernel<T>();
        int blocks = 0;
        check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, T::kThreads, T::kSmemBytes),
                   "cudaOccupancyMaxActiveBlocksPerMultiprocessor(kv-cache)");
        return blocks > 0 ? blocks : 1;
    }();
    return cached;
}
template <ElemType kElem, int kHeadDim>
int kvc_blocks_per_sm_sm80(const AttnParams& p) {
    return with_kvc_shape<kElem, kHeadDim>(p, [](auto shape) { return kvc_shape_blocks_per_sm<decltype(shape)>(); });
}

// Whether the current device can launch a kernel as a programmatic dependent of the previous one.
inline bool programmatic_launch_supported() {
    constexpr int kHopperMajor = 9;
    return current_device_props().cc_major >= kHopperMajor;
}

// The steps around the attention kernel, shared with the Hopper one (sm90/kvcache_sm90.cu): the append (and rotation)
// before it, and the split-KV combine after it as its programmatic dependent where the GPU allows (its launch overlaps
// the attention kernel's tail).
template <typename Elem>
void launch_kvc_append(const AttnParams& p, const KvcPlan& plan, cudaStream_t stream) {
    const int append_rows = p.seqlen_new > p.seqlen_q ? p.seqlen_new : p.seqlen_q;
    if (p.seqlen_new > 0 || plan.q_rot) {
        kvcache_append_kernel<Elem><<<dim3(append_rows, p.batch), kAppendThreads, 0, stream>>>(
            p, static_cast<Elem*>(plan.q_rot));
        check_cuda(cudaGetLastError(), "kv-cache append kernel launch");
    }
}
template <typename Elem>
void launch_kvc_combine(const AttnParams& p, const KvcPlan& plan, cudaStream_t stream) {
    if (plan.num_splits <= 1 || plan.merge_in_cluster || plan.merge_by_last) return;  // merged in the attention kernel
    const int64_t rows = int64_t(p.batch) * p.nheads * p.seqlen_q;
    const int blocks = static_cast<int>((rows + kCombineWarps - 1) / kCombineWarps);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(blocks));
    config.blockDim = dim3(kCombineWarps * 32);
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = programmatic_launch_supported() ? 1 : 0;
    check_cuda(cudaLaunchKernelEx(&config, kvcache_combine_kernel<Elem>, p, plan), "kv-cache combine kernel launch");
}

// The attention kernels' grids have one block row per sequence and kv head.
inline void require_kvc_grid_rows(const AttnParams& p) {
    constexpr int kMaxGridY = 65535;  // CUDA's limit on gridDim.y
    if (int64_t(p.batch) * p.nheads_k > kMaxGridY)
        throw Error(Status::unsupported, "kvcache_forward: batch * nheads_k = " +
                                             std::to_string(int64_t(p.batch) * p.nheads_k) + " exceeds " +
                                             std::to_string(kMaxGridY) + " (one block row per sequence and kv head)");
}

// A kv-cache call's launches, for both attention kernels: the append, then (where there are queries) the attention
// kernel by `attend(grid)` on its grid of (packed row blocks of block_m, batch x kv head groups of plan.head_group,
// splits), which KvcBlock reads back, then the combine. Whatever can fail goes before this: the append writes the
// cache.
template <typename Elem, class Attend>
void launch_kvc_steps(const AttnParams& p, const KvcPlan& plan, cudaStream_t stream, int block_m, Attend&& attend) {
    launch_kvc_append<Elem>(p, plan, stream);
    if (p.seqlen_q == 0) return;
    const KvcGrid grid = kvc_grid(p.batch, p.seqlen_q, p.nheads, p.nheads_k, plan.head_group, block_m);
    attend(dim3(static_cast<unsigned>(grid.row_blocks), static_cast<unsigned>(grid.kv_groups), plan.num_splits));
    launch_kvc_combine<Elem>(p, plan, stream);
}

template <class T>
void launch_kvc_shape(const AttnParams& p, const KvcPlan& plan) {
    const auto stream = static_cast<cudaStream_t>(p.stream);
    require_kvc_grid_rows(p);
    // Everything that can fail before the append writes the cache: nothing is written on error.
    const auto kernel = prepared_kvcache_kernel<T>();
    if (plan.merge_by_last)  // the Hopper kernel's alone; here the splits would stay unmerged
        throw Error(Status::internal, "kv-cache forward: a last-block merge planned for the Ampere-class kernel");
    launch_kvc_steps<typename T::Elem>(p, plan, stream, T::kBlockM, [&](dim3 grid) {
        kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, plan);
        check_cuda(cudaGetLastError(), "kv-cache attention kernel launch");
    });
}

template <ElemType kElem, int kHeadDim>
void launch_kvc_sm80(const AttnParams& p, const KvcPlan& plan) {
    with_kvc_shape<kElem, kHeadDim>(p, [&](auto shape) { launch_kvc_shape<decltype(shape)>(p, plan); });
}

}  // namespace flashattn::kernels

#define FLASHATTN_INSTANTIATE_SM80_KVCACHE(ELEM, HDIM) \
    template void launch_kvc_sm80<ElemType::ELEM, HDIM>(const AttnParams&, const KvcPlan&); \
    template int kvc_blocks_per_sm_sm80<ElemType::ELEM, HDIM>(const AttnParams&);
