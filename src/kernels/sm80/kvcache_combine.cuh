// Merging attention results computed over disjoint key ranges: out = sum_s w_s O_s / sum_s w_s with
// w_s = exp(lse_s - max lse), and lse = max + log(sum_s w_s). The split-KV kv-cache forward merges its splits with
// it. A range that saw no key has lse -inf and weight 0; a row no range saw gets out 0 and lse +inf.
//
// One warp per output row (sequence, head, token); lanes walk the splits for the LSE, then share the columns.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "common/params.h"
#include "kernels/common/ptx.cuh"
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
    // Launched as a programmatic dependent of the attention kernel where the GPU allows (kvcache_launch.cuh): the
    // launch overlaps that kernel's last blocks, and the partial results are read only once they are all written.
    ptx::wait_for_prior_grid();
    const int lane = threadIdx.x % 32;
    const int64_t row = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32;  // (b, h, token), token fastest
    const int64_t rows_per_split = int64_t(p.batch) * p.nheads * p.seqlen_q;
    if (row >= rows_per_split) return;
    const int token = static_cast<int>(row % p.seqlen_q);
    const int h = static_cast<int>((row / p.seqlen_q) % p.nheads);
    const int b = static_cast<int>(row / (int64_t(p.seqlen_q) * p.nheads));

    // Lane j holds split s0 + j's weight and hands it round by shuffle; each partial row is one 16-byte load per
    // lane. The loads of kSplitsInFlight splits are issued together, unconditionally (a clamped split and column,
    // weight 0), before any is used: in a loop with a branch around each load they went one round trip at a time
    // (Nsight Compute: 79% of the stalls on the loads, ~14 us at 22 splits). The first group goes out before the
    // LSEs are read, as it does not depend on them: at batch 1 the combine is a chain of memory round trips (a warp
    // a row, a few dozen rows), and this takes one link out of it.
    Elem* out = static_cast<Elem*>(p.out) + b * p.out_batch_stride + token * p.out_row_stride + h * p.out_head_stride;
    constexpr int kColsPerLane = 4;                       // one float4 of a partial row
    constexpr int kColsPerPass = 32 * kColsPerLane;
    constexpr int kSplitsInFlight = 16;
    const int n = plan.num_splits;  // > 1: the launch skips this kernel otherwise
    const float* o_row = plan.o_accum + row * p.head_dim_v;
    const float* lse_row = plan.lse_accum + row;
    const int64_t split_stride = rows_per_split * p.head_dim_v;
    float4 o[kSplitsInFlight];
    auto load_group = [&](int first_split, int count, int c_read) {
#pragma unroll
        for (int j = 0; j < kSplitsInFlight; ++j) {
            const int split = first_split + min(j, count - 1);
            o[j] = *reinterpret_cast<const float4*>(o_row + split * split_stride + c_read);
        }
    };
    load_group(0, min(32, n), min(kColsPerLane * lane, p.head_dim_v - kColsPerLane));

    // The LSEs: splits lane, lane + 32, ...; the first 32 stay in a register.
    const float lse_first = lane < n ? lse_row[lane * rows_per_split] : -INFINITY;
    float max_lse = lse_first;
    for (int s = lane + 32; s < n; s += 32) max_lse = fmaxf(max_lse, lse_row[s * rows_per_split]);
    max_lse = warp_max(max_lse);
    const bool empty = max_lse == -INFINITY;
    const float weight_first = empty ? 0.f : expf(lse_first - max_lse);  // 0 past n (lse -inf)
    float weight_sum = weight_first;
    for (int s = lane + 32; s < n; s += 32) weight_sum += empty ? 0.f : expf(lse_row[s * rows_per_split] - max_lse);
    weight_sum = warp_sum(weight_sum);

    for (int c_base = 0; c_base < p.head_dim_v; c_base += kColsPerPass) {  // uniform: every lane shuffles
        const int c = c_base + kColsPerLane * lane;
        const bool active = c < p.head_dim_v;                           // head_dim_v is a multiple of 8
        const int c_read = active ? c : p.head_dim_v - kColsPerLane;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s0 = 0; s0 < n && !empty; s0 += 32) {
            const int mine = s0 + lane;
            const float my_weight =
                s0 == 0 ? weight_first : (mine < n ? expf(lse_row[mine * rows_per_split] - max_lse) : 0.f);
            const int count = min(32, n - s0);
            for (int j0 = 0; j0 < count; j0 += kSplitsInFlight) {
                if (c_base > 0 || s0 > 0 || j0 > 0) load_group(s0 + j0, count - j0, c_read);  // else issued above
                float w[kSplitsInFlight];
#pragma unroll
                for (int j = 0; j < kSplitsInFlight; ++j) {
                    w[j] = __shfl_sync(0xffffffffu, my_weight, (j0 + j) % 32);
                    if (j0 + j >= count) w[j] = 0.f;
                }
#pragma unroll
                for (int j = 0; j < kSplitsInFlight; ++j)
                    acc.x += w[j] * o[j].x, acc.y += w[j] * o[j].y, acc.z += w[j] * o[j].z, acc.w += w[j] * o[j].w;
            }
        }
        if (active) {
            const float inv = empty ? 0.f : __fdividef(1.f, weight_sum);
            store_elem(out + c, acc.x * inv);
            store_elem(out + c + 1, acc.y * inv);
            store_elem(out + c + 2, acc.z * inv);
            store_elem(out + c + 3, acc.w * inv);
        }
    }
    if (p.softmax_lse && lane == 0)
        p.softmax_lse[b * p.lse_batch_stride + h * p.lse_head_stride + token] =
            empty ? INFINITY : max_lse + __logf(weight_sum);
}

}  // namespace flashattn::kernels
