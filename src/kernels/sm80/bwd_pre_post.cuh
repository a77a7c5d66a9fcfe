// The backward's pre-pass (D = rowsum(dO * O), zero the dQ accumulator) and post-pass (dQ = scale * sum of the
// accumulator copies, converted to the element type). Memory-bound and shape-agnostic: not templated on head dim.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "kernels/sm80/bwd_plan.h"

namespace flashattn::kernels {

// (batch, row within the sequence) of accumulator row r: varlen rows are absolute, with batch strides 0.
__device__ __forceinline__ void split_row(const AttnParams& p, int64_t r, int64_t& b, int64_t& i) {
    if (p.is_varlen) {
        b = 0;
        i = r;
    } else {
        b = r / p.seqlen_q;
        i = r % p.seqlen_q;
    }
}

// One warp per (row, head).
template <typename Elem>
__global__ void bwd_preprocess_kernel(const AttnParams p, float* softmax_d, float* dq_accum, int64_t split_stride,
                                      int n_splits, int acc_hdim) {
    const int64_t warp_id = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    const int64_t rows = accum_rows(p);
    if (warp_id >= rows * p.nheads) return;
    const int64_t r = warp_id / p.nheads;
    const int h = static_cast<int>(warp_id % p.nheads);
    int64_t b, i;
    split_row(p, r, b, i);
    const Elem* dout = static_cast<const Elem*>(p.dout) + b * p.dout_batch_stride + i * p.dout_row_stride +
                       h * p.dout_head_stride;
    const Elem* out = static_cast<const Elem*>(p.out) + b * p.out_batch_stride + i * p.out_row_stride +
                      h * p.out_head_stride;
    float dot = 0.f;
    for (int d = lane; d < p.head_dim_v; d += 32) dot += static_cast<float>(dout[d]) * static_cast<float>(out[d]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) softmax_d[b * p.lse_batch_stride + h * p.lse_head_stride + i] = dot;
    for (int s = 0; s < n_splits; ++s) {
        float* acc = dq_accum + s * split_stride + (r * p.nheads + h) * acc_hdim;
        for (int d = lane; d < acc_hdim; d += 32) acc[d] = 0.f;
    }
}

// One thread per dQ element.
template <typename Elem>
__global__ void bwd_postprocess_kernel(const AttnParams p, const float* dq_accum, int64_t split_stride, int n_splits,
                                       int acc_hdim) {
    const int64_t total = accum_rows(p) * p.nheads * p.head_dim;
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int d = static_cast<int>(idx % p.head_dim);
        const int h = static_cast<int>((idx / p.head_dim) % p.nheads);
        const int64_t r = idx / (int64_t(p.head_dim) * p.nheads);
        const float* acc = dq_accum + (r * p.nheads + h) * acc_hdim + d;
        float sum = 0.f;
        for (int s = 0; s < n_splits; ++s) sum += acc[s * split_stride];  // fixed order: deterministic
        int64_t b, i;
        split_row(p, r, b, i);
        static_cast<Elem*>(p.dq)[b * p.dq_batch_stride + i * p.dq_row_stride + h * p.dq_head_stride + d] =
            static_cast<Elem>(sum * p.scale);
    }
}

}  // namespace flashattn::kernels
