// Launching the Ampere-class backward: tile shapes per head dim, workspace layout, the three kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "common/params.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/common/func_attributes.h"
#include "kernels/sm80/bwd_kernel.cuh"
#include "kernels/sm80/bwd_plan.h"
#include "kernels/sm80/bwd_pre_post.cuh"

namespace flashattn::kernels {

// Per head dim bucket: (kBlockM query rows per step, kBlockN keys per block, then the warps along the key side of
// phase S, of phase KV and along the query side of phase Q; BwdTraits). The dK and dV accumulators of a block are
// kBlockN x head dim each and live in registers for the whole block, so head dims above 128 take 64-key tiles.
// With one stage of Q and dO, every shape fits in the 163 KB of shared memory an A100 block can have. hd64 takes
// 128 x 128 (64 scores a thread): +8.9% over 64 x 128 in an interleaved A/B on an H100. ptxas (bf16): no spills at
// sm_90a at hd64, hd128 and hd192, 28 and 24 bytes stored at hd96 and hd256; at sm_80 (where each 16-byte dQ
// reduction is four scalar atomics) 0 to 56 bytes, not measured there (no A100 to measure on).
template <typename Elem, int kHeadDim> struct BwdTileShape;
template <typename Elem> struct BwdTileShape<Elem, 64> { using Traits = BwdTraits<Elem, 64, 128, 128, 2, 4, 4>; };
template <typename Elem> struct BwdTileShape<Elem, 96> { using Traits = BwdTraits<Elem, 96, 64, 128, 4, 4, 4>; };
template <typename Elem> struct BwdTileShape<Elem, 128> { using Traits = BwdTraits<Elem, 128, 64, 128, 4, 4, 2>; };
template <typename Elem> struct BwdTileShape<Elem, 192> { using Traits = BwdTraits<Elem, 192, 64, 64, 4, 2, 2>; };
template <typename Elem> struct BwdTileShape<Elem, 256> { using Traits = BwdTraits<Elem, 256, 64, 64, 4, 2, 2>; };

// Two stages of (Q, dO) where the device's per-block shared memory allows, else one.
template <class T>
int bwd_query_stages(int device) {
    int max_smem = 0;
    check_cuda(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "cudaDeviceGetAttribute(max shared memory per block)");
    return T::smem_bytes(2) <= max_smem ? 2 : 1;
}

constexpr int kPrePostThreads = 256;
constexpr int kMaxGrid = 65535 * 8;  // grid-stride loops cover the rest

template <ElemType kElem, int kHeadDim>
void launch_bwd_sm80(const AttnParams& p, const BwdPlan& plan) {
    using Elem = ElemOf<kElem>;
    using T = typename BwdTileShape<Elem, kHeadDim>::Traits;
    static_assert(T::kBlockM <= kDqAccumPadRows, "a query tile past a sequence's end stays inside its padding");
    const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
    float* dq_accum = plan.dq_accum;
    float* softmax_d = plan.softmax_d;

    const int64_t row_heads = q_rows(p) * p.nheads;
    const int pre_lanes = bwd_preprocess_lanes(p.head_dim_v);
    const int64_t pre_blocks = (row_heads * pre_lanes + kPrePostThreads - 1) / kPrePostThreads;
    if (pre_blocks > 0) {
        bwd_preprocess_kernel<Elem><<<static_cast<unsigned>(pre_blocks), kPrePostThreads, 0, stream>>>(
            p, softmax_d, dq_accum, plan.split_stride, plan.n_splits, kHeadDim, pre_lanes);
        check_cuda(cudaGetLastError(), "backward pre-pass launch");
    }

    const auto kernel = bwd_kernel<T>;
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    const int stages = bwd_query_stages<T>(device);
    const int smem_bytes = T::smem_bytes(stages);
    ensure_func_attributes(kernel, smem_bytes, /*non_portable_clusters=*/false, "backward");
    const int n_blocks = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
    if (n_blocks > 0) {
        const dim3 grid(p.deterministic ? std::min(plan.n_splits, n_blocks) : n_blocks, p.batch, p.nheads_k);
        AttnParams run = p;
        run.softmax_d = softmax_d;
        kernel<<<grid, T::kThreads, smem_bytes, stream>>>(run, dq_accum, plan.split_stride, softmax_d, stages);
        check_cuda(cudaGetLastError(), "backward kernel launch");
    }

    const int64_t total = row_heads * (p.head_dim / kElemsPerChunk);  // one thread per 16-byte chunk of dQ
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
