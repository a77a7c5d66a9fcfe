// Merging attention results computed over disjoint key ranges: out = sum_s w_s O_s / sum_s w_s with
// w_s = exp(lse_s - max lse), and lse = max + log(sum_s w_s). The split-KV kv-cache forward merges its splits with
// it. A range that saw no key has lse -inf and weight 0; a row no range saw gets out 0 and lse +inf.
//
// One warp per output row (sequence, head, token); lanes walk the splits for the LSE, then the columns.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "common/params.h"
#include "kernels/sm80/kvcache_plan.h"

namespace flashattn::kernels {

constexpr int kCombineWarps = 4;

__device__ __forceinline__ float warp_max(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ __forceinline__ void store_elem(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_elem(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename Elem>
__global__ void __launch_bounds__(kCombineWarps * 32) kvcache_combine_kernel(const AttnParams p, const KvcPlan plan) {
    const int lane = threadIdx.x % 32;
    const int64_t row = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32;  // (b, h, token), token fastest
    const int64_t rows_per_split = int64_t(p.batch) * p.nheads * p.seqlen_q;
    if (row >= rows_per_split) return;
    const int token = static_cast<int>(row % p.seqlen_q);
    const int h = static_cast<int>((row / p.seqlen_q) % p.nheads);
    const int b = static_cast<int>(row / (int64_t(p.seqlen_q) * p.nheads));

    float max_lse = -INFINITY;
    for (int s = lane; s < plan.num_splits; s += 32) max_lse = fmaxf(max_lse, plan.lse_accum[s * rows_per_split + row]);
    max_lse = warp_max(max_lse);
    const bool empty = max_lse == -INFINITY;
    float weight_sum = 0.f;
    for (int s = lane; s < plan.num_splits; s += 32)
        weight_sum += empty ? 0.f : expf(plan.lse_accum[s * rows_per_split + row] - max_lse);
    weight_sum = warp_sum(weight_sum);

    Elem* out = static_cast<Elem*>(p.out) + b * p.out_batch_stride + token * p.out_row_stride + h * p.out_head_stride;
    for (int c = lane; c < p.head_dim_v; c += 32) {
        float acc = 0.f;
        if (!empty)
            for (int s = 0; s < plan.num_splits; ++s) {
                const float w = expf(plan.lse_accum[s * rows_per_split + row] - max_lse);
                acc += w * plan.o_accum[(s * rows_per_split + row) * p.head_dim_v + c];
            }
        store_elem(out + c, empty ? 0.f : acc / weight_sum);
    }
    if (p.softmax_lse && lane == 0)
        p.softmax_lse[b * p.lse_batch_stride + h * p.lse_head_stride + token] =
            empty ? INFINITY : max_lse + logf(weight_sum);
}

}  // namespace flashattn::kernels
