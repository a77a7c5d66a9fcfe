// The kv-cache forward's first step: write the new keys (rotated) and values into the cache in place, and rotate the
// queries into the workspace when rotary embedding is on. The attention kernel then reads only the cache.
//
// One block per (new row or query row t, sequence b); its threads walk (head, channel). The rotation runs in double
// and rounds through float to the element type, exactly as the CPU reference does, so the cache contents match it
// bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/params.h"
#include "kernels/sm80/kvcache_common.cuh"

namespace flashattn::kernels {

constexpr int kAppendThreads = 128;

__device__ __forceinline__ double to_double(__half x) { return static_cast<double>(__half2float(x)); }
__device__ __forceinline__ double to_double(__nv_bfloat16 x) { return static_cast<double>(__bfloat162float(x)); }
__device__ __forceinline__ void from_double(double v, __half& x) { x = __float2half_rn(__double2float_rn(v)); }
__device__ __forceinline__ void from_double(double v, __nv_bfloat16& x) {
    x = __float2bfloat16_rn(__double2float_rn(v));
}

// Channel c of row x rotated at table row `pos`: pairs (2i, 2i + 1) when interleaved, else (i, i + rotary_dim / 2).
template <typename Elem>
__device__ __forceinline__ Elem rotated(const AttnParams& p, const Elem* x, int c, int64_t pos) {
    if (c >= p.rotary_dim) return x[c];
    const int half = p.rotary_dim / 2;
    const int pair = p.rotary_interleaved ? c / 2 : c % half;
    const bool first = p.rotary_interleaved ? c % 2 == 0 : c < half;
    const int i0 = p.rotary_interleaved ? 2 * pair : pair;
    const int i1 = p.rotary_interleaved ? 2 * pair + 1 : pair + half;
    const Elem* cos_row = static_cast<const Elem*>(p.rotary_cos) + pos * half;
    const Elem* sin_row = static_cast<const Elem*>(p.rotary_sin) + pos * half;
    const double x0 = to_double(x[i0]), x1 = to_double(x[i1]);
    const double cs = to_double(cos_row[pair]), sn = to_double(sin_row[pair]);
    // Explicit roundings: no fused multiply-add, so the result is the reference's to the bit.
    const double v = first ? __dsub_rn(__dmul_rn(x0, cs), __dmul_rn(x1, sn))
                           : __dadd_rn(__dmul_rn(x0, sn), __dmul_rn(x1, cs));
    Elem out;
    from_double(v, out);
    return out;
}

template <typename Elem>
__global__ void __launch_bounds__(kAppendThreads) kvcache_append_kernel(const AttnParams p, Elem* q_rot) {
    const int t = blockIdx.x, b = blockIdx.y;
    const CacheSeq seq = cache_seq(p, b);
    const bool rotary = p.rotary_dim > 0;

    if (t < p.seqlen_new) {
        const int64_t pos = seq.length + t;
        for (int idx = threadIdx.x; idx < p.nheads_k * p.head_dim; idx += kAppendThreads) {
            const int hk = idx / p.head_dim, c = idx % p.head_dim;
            const Elem* knew = static_cast<const Elem*>(p.knew) + b * p.knew_batch_stride + t * p.knew_row_stride +
                               hk * p.knew_head_stride;
            const CacheView<Elem> kc =
                cache_view<Elem>(p, p.k_cache_mut, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, hk);
            kc.row(pos)[c] = rotary ? rotated(p, knew, c, pos) : knew[c];
        }
        for (int idx = threadIdx.x; idx < p.nheads_k * p.head_dim_v; idx += kAppendThreads) {
            const int hk = idx / p.head_dim_v, c = idx % p.head_dim_v;
            const Elem* vnew = static_cast<const Elem*>(p.vnew) + b * p.vnew_batch_stride + t * p.vnew_row_stride +
                               hk * p.vnew_head_stride;
            const CacheView<Elem> vc =
                cache_view<Elem>(p, p.v_cache_mut, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, hk);
            vc.row(pos)[c] = vnew[c];
        }
    }

    if (rotary && t < p.seqlen_q) {
        const int64_t pos = seq.length + (rotate_queries_per_row(p) ? t : 0);
        for (int idx = threadIdx.x; idx < p.nheads * p.head_dim; idx += kAppendThreads) {
            const int h = idx / p.head_dim, c = idx % p.head_dim;
            const Elem* q = static_cast<const Elem*>(p.q) + b * p.q_batch_stride + t * p.q_row_stride +
                            h * p.q_head_stride;
            q_rot[((int64_t(b) * p.seqlen_q + t) * p.nheads + h) * p.head_dim + c] = rotated(p, q, c, pos);
        }
    }
}

}  // namespace flashattn::kernels
