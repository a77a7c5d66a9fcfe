// The backward's pre-pass (D = rowsum(dO * O), zero the dQ accumulator) and post-pass (dQ = scale * sum of the
// accumulator copies, converted to the element type). Memory-bound and shape-agnostic: not templated on head dim;
// every access is 16 bytes wide and the index arithmetic is done once per 16-byte chunk, not per element.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/params.h"
#include "kernels/common/ptx.cuh"
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

// 16-byte chunks: 8 elements of dO, O and dQ, 4 floats of the accumulator. Every row of a CUDA tensor starts
// 16-byte aligned and head dims are multiples of 8 (validated), and accumulator rows are a head-dim bucket of floats.
constexpr int kElemsPerChunk = 8;
constexpr int kFloatsPerChunk = 4;

__device__ __forceinline__ void unpack8(const uint4& v, __half, float (&f)[kElemsPerChunk]) {
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < kElemsPerChunk / 2; ++i) {
        const float2 x = __half22float2(h[i]);
        f[2 * i] = x.x;
        f[2 * i + 1] = x.y;
    }
}
__device__ __forceinline__ void unpack8(const uint4& v, __nv_bfloat16, float (&f)[kElemsPerChunk]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < kElemsPerChunk / 2; ++i) {
        const float2 x = __bfloat1622float2(h[i]);
        f[2 * i] = x.x;
        f[2 * i + 1] = x.y;
    }
}

// A group of `lanes` lanes (a power of two, at least head_dim_v / 8) per (row, head), 32 / lanes groups a warp: lane
// c of a group reads chunk c of dO and O. Narrow heads thus keep every lane of a warp loading (one warp per row left
// three quarters of the lanes idle at head dim 64).
template <typename Elem>
__global__ void bwd_preprocess_kernel(const AttnParams p, float* softmax_d, float* dq_accum, int64_t split_stride,
                                      int n_splits, int acc_hdim, int lanes) {
    const int64_t thread = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    const int64_t row_head = thread / lanes;
    const int c = static_cast<int>(thread % lanes);
    const int64_t rows = q_rows(p);
    const bool live = row_head < rows * p.nheads;  // every lane stays for the shuffles
    const int64_t row = row_head / p.nheads;
    const int64_t r = live ? row : 0;
    const int h = static_cast<int>(row_head - row * p.nheads);
    int64_t b, i;
    split_row(p, r, b, i);
    float dot = 0.f;
    if (live && c * kElemsPerChunk < p.head_dim_v) {
        const Elem* dout = static_cast<const Elem*>(p.dout) + b * p.dout_batch_stride + i * p.dout_row_stride +
                           h * p.dout_head_stride + c * kElemsPerChunk;
        const Elem* out = static_cast<const Elem*>(p.out) + b * p.out_batch_stride + i * p.out_row_stride +
                          h * p.out_head_stride + c * kElemsPerChunk;
        float x[kElemsPerChunk], y[kElemsPerChunk];
        unpack8(*reinterpret_cast<const uint4*>(dout), Elem(), x);
        unpack8(*reinterpret_cast<const uint4*>(out), Elem(), y);
#pragma unroll
        for (int e = 0; e < kElemsPerChunk; ++e) dot += x[e] * y[e];
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (!live) return;
    if (c == 0) softmax_d[b * p.lse_batch_stride + h * p.lse_head_stride + i] = dot;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < n_splits; ++s) {
        float4* acc =
            reinterpret_cast<float4*>(dq_accum + s * split_stride + (accum_row_of(p, r) * p.nheads + h) * acc_hdim);
        for (int j = c; j < acc_hdim / kFloatsPerChunk; j += lanes) acc[j] = zero;
    }
}

// The pre-pass's lanes a (row, head): head_dim_v / 8 chunks rounded up to a power of two.
inline int bwd_preprocess_lanes(int head_dim_v) {
    int lanes = 1;
    while (lanes * kElemsPerChunk < head_dim_v) lanes *= 2;
    return lanes;
}

// One thread per 8 dQ elements (half c % 2 of column group c / 2, bwd_plan.h): four 8-byte accumulator reads per
// split, one 16-byte store.
template <typename Elem>
__global__ void bwd_postprocess_kernel(const AttnParams p, const float* dq_accum, int64_t split_stride, int n_splits,
                                       int acc_hdim) {
    const int chunks_per_head = p.head_dim / kElemsPerChunk;
    const int64_t total = q_rows(p) * p.nheads * chunks_per_head;
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t row_head = idx / chunks_per_head;
        const int c = static_cast<int>(idx - row_head * chunks_per_head);
        const int64_t r = row_head / p.nheads;
        const int h = static_cast<int>(row_head - r * p.nheads);
        // Columns 2t and 2t + 1 of this chunk sit at positions accum_col_in_group(8 * (c % 2) + 2t) = 4t + 2 * (c % 2)
        // and the next of its group.
        static_assert(kDqAccumColGroup == 2 * kElemsPerChunk, "a column group is two chunks");
        const float* acc = dq_accum + (accum_row_of(p, r) * p.nheads + h) * acc_hdim + (c / 2) * kDqAccumColGroup +
                           accum_col_in_group(8 * (c % 2));
        float sum[kElemsPerChunk] = {};
        for (int s = 0; s < n_splits; ++s) {  // fixed order: deterministic
#pragma unroll
            for (int t = 0; t < kElemsPerChunk / 2; ++t) {
                const float2 v = *reinterpret_cast<const float2*>(acc + s * split_stride + 4 * t);
                sum[2 * t] += v.x, sum[2 * t + 1] += v.y;
            }
        }
        uint4 packed;
        uint32_t* words = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
        for (int e = 0; e < kElemsPerChunk / 2; ++e)
            words[e] = ptx::pack2(sum[2 * e] * p.scale, sum[2 * e + 1] * p.scale, Elem());
        int64_t b, i;
        split_row(p, r, b, i);
        Elem* dq = static_cast<Elem*>(p.dq) + b * p.dq_batch_stride + i * p.dq_row_stride + h * p.dq_head_stride +
                   c * kElemsPerChunk;
        *reinterpret_cast<uint4*>(dq) = packed;
    }
}

}  // namespace flashattn::kernels
