// merge_attention on the GPU: two attention results over disjoint keys merged by their LSEs (flashattn.h,
// MergeArgs). Memory-bound and simple: one warp per (sequence, head, query row), lanes over the columns.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/params.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/launch.h"

namespace flashattn::kernels {

namespace {

constexpr int kMergeWarps = 4;

__device__ __forceinline__ float load_elem(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load_elem(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_value(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_value(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename Elem>
__global__ void __launch_bounds__(kMergeWarps * 32) merge_kernel(const AttnParams p) {
    const int lane = threadIdx.x % 32;
    const int64_t row = int64_t(blockIdx.x) * kMergeWarps + threadIdx.x / 32;  // (batch, head, token), token fastest
    if (row >= int64_t(p.batch) * p.nheads * p.seqlen_q) return;
    const int64_t i = row % p.seqlen_q, h = (row / p.seqlen_q) % p.nheads, b = row / (int64_t(p.seqlen_q) * p.nheads);
    const int64_t lse_at = b * p.lse_batch_stride + h * p.lse_head_stride + i;
    // +inf marks a part that saw no key: it weighs nothing, like -inf would.
    float lse0 = p.part_lse[0][lse_at], lse1 = p.part_lse[1][lse_at];
    lse0 = lse0 == INFINITY ? -INFINITY : lse0;
    lse1 = lse1 == INFINITY ? -INFINITY : lse1;
    const float top = fmaxf(lse0, lse1);
    const bool empty = top == -INFINITY;
    const float w0 = empty ? 0.f : expf(lse0 - top), w1 = empty ? 0.f : expf(lse1 - top);
    const float inv_total = empty ? 0.f : __fdividef(1.f, w0 + w1);
    const Elem* a = static_cast<const Elem*>(p.part_out[0]) + b * p.part_out_batch_stride[0] +
                    i * p.part_out_row_stride[0] + h * p.part_out_head_stride[0];
    const Elem* c = static_cast<const Elem*>(p.part_out[1]) + b * p.part_out_batch_stride[1] +
                    i * p.part_out_row_stride[1] + h * p.part_out_head_stride[1];
    Elem* out = static_cast<Elem*>(p.out) + b * p.out_batch_stride + i * p.out_row_stride + h * p.out_head_stride;
    for (int col = lane; col < p.head_dim_v; col += 32)
        store_value(out + col, empty ? 0.f : (w0 * load_elem(a + col) + w1 * load_elem(c + col)) * inv_total);
    if (p.softmax_lse && lane == 0) p.softmax_lse[lse_at] = empty ? INFINITY : top + __logf(w0 + w1);
}

}  // namespace

void run_merge(const AttnParams& p) {
    const int64_t rows = int64_t(p.batch) * p.nheads * p.seqlen_q;
    if (rows == 0) return;
    const int blocks = static_cast<int>((rows + kMergeWarps - 1) / kMergeWarps);
    const auto stream = static_cast<cudaStream_t>(p.stream);
    if (p.dtype == ElemType::f16)
        merge_kernel<ElemOf<ElemType::f16>><<<blocks, kMergeWarps * 32, 0, stream>>>(p);
    else if (p.dtype == ElemType::bf16)
        merge_kernel<ElemOf<ElemType::bf16>><<<blocks, kMergeWarps * 32, 0, stream>>>(p);
    else
        throw Error(Status::unsupported, "merge_attention: GPU tensors must be float16 or bfloat16");
    check_cuda(cudaGetLastError(), "merge kernel launch");
}

}  // namespace flashattn::kernels
