// Launching the Ampere-class backward: tile shapes per head dim, workspace layout, the three kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "common/params.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/sm80/bwd_kernel.cuh"
#include "kernels/sm80/bwd_plan.h"
#include "kernels/sm80/bwd_pre_post.cuh"

namespace flashattn::kernels {

// (kBlockM query rows per step, kBlockN keys per block, kSplitD warps per 16-key group) per head dim bucket: dK and
// dV accumulators of a warp are 16 x (head dim / kSplitD) each, so head dims above 128 split across two warps;
// shared memory (K, V, two stages of Q and dO, P^T, dS^T) stays within the 163 KB an A100 block can have.
template <typename Elem, int kHeadDim> struct BwdTileShape;
template <typename Elem> struct BwdTileShape<Elem, 64> { using Traits = BwdTraits<Elem, 64, 64, 128, 1>; };
template <typename Elem> struct BwdTileShape<Elem, 96> { using Traits = BwdTraits<Elem, 96, 64, 128, 1>; };
template <typename Elem> struct BwdTileShape<Elem, 128> { using Traits = BwdTraits<Elem, 128, 32, 128, 1>; };
template <typename Elem> struct BwdTileShape<Elem, 192> { using Traits = BwdTraits<Elem, 192, 32, 64, 2>; };
template <typename Elem> struct BwdTileShape<Elem, 256> { using Traits = BwdTraits<Elem, 256, 32, 64, 2>; };

constexpr int kPrePostThreads = 256;
constexpr int kMaxGrid = 65535 * 8;  // grid-stride loops cover the rest

template <ElemType kElem, int kHeadDim>
void launch_bwd_sm80(const AttnParams& p, const BwdPlan& plan) {
    using Elem = ElemOf<kElem>;
    using T = typename BwdTileShape<Elem, kHeadDim>::Traits;
    const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
    float* dq_accum = plan.dq_accum;
    float* softmax_d = plan.softmax_d;

    const int64_t row_heads = accum_rows(p) * p.nheads;
    const int64_t pre_blocks = (row_heads * 32 + kPrePostThreads - 1) / kPrePostThreads;
    if (pre_blocks > 0) {
        bwd_preprocess_kernel<Elem><<<static_cast<unsigned>(pre_blocks), kPrePostThreads, 0, stream>>>(
            p, softmax_d, dq_accum, plan.split_stride, plan.n_splits, kHeadDim);
        check_cuda(cudaGetLastError(), "backward pre-pass launch");
    }

    const auto kernel = bwd_kernel<T>;
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
               "cudaFuncSetAttribute(backward shared memory)");
    const int n_blocks = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
    if (n_blocks > 0) {
        const dim3 grid(p.deterministic ? std::min(plan.n_splits, n_blocks) : n_blocks, p.batch, p.nheads_k);
        AttnParams run = p;
        run.softmax_d = softmax_d;
        kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(run, dq_accum, plan.split_stride, softmax_d);
        check_cuda(cudaGetLastError(), "backward kernel launch");
    }

    const int64_t total = row_heads * p.head_dim;
    const int64_t post_blocks = std::min<int64_t>((total + kPrePostThreads - 1) / kPrePostThreads, kMaxGrid);
    if (post_blocks > 0) {
        bwd_postprocess_kernel<Elem><<<static_cast<unsigned>(post_blocks), kPrePostThreads, 0, stream>>>(
            p, dq_accum, plan.split_stride, plan.n_splits, kHeadDim);
        check_cuda(cudaGetLastError(), "backward post-pass launch");
    }
}

}  // namespace flashattn::kernels

#define FLASHATTN_INSTANTIATE_SM80_BWD(ELEM, HDIM) \
    template void launch_bwd_sm80<ElemType::ELEM, HDIM>(const AttnParams&, const BwdPlan&);
