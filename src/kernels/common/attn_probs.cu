// The attention probabilities, for tests at small sizes (ForwardArgs::attn_probs): one thread per (row, key),
// recomputing the score from q and k and normalising with the forward's LSE. Not a fast path.
#include <cuda_runtime.h>

#include <cmath>

#include "common/mask.h"
#include "common/params.h"
#include "common/philox.h"
#include "kernels/common/attn_probs.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/common/seq_slice.cuh"

namespace flashattn::kernels {

constexpr int kProbsThreads = 256;
constexpr int kProbsMaxBlocks = 65535;

template <typename Elem>
__global__ void attn_probs_kernel(const AttnParams p, const float* lse) {
    const int64_t total = int64_t(p.batch) * p.nheads * p.seqlen_q * p.seqlen_k;
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t col = idx % p.seqlen_k;
        const int64_t row = (idx / p.seqlen_k) % p.seqlen_q;
        const int h = static_cast<int>((idx / (int64_t(p.seqlen_k) * p.seqlen_q)) % p.nheads);
        const int b = static_cast<int>(idx / (int64_t(p.seqlen_k) * p.seqlen_q * p.nheads));
        const SeqSlice seq = seq_slice(p, b);
        float prob = 0.f;
        const KeyRange r = visible_keys(row, seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right);
        if (row < seq.seqlen_q && col >= r.begin && col < r.end) {
            const int hk = h / (p.nheads / p.nheads_k);
            const Elem* q = static_cast<const Elem*>(p.q) + b * p.q_batch_stride + (seq.q_row0 + row) * p.q_row_stride +
                            h * p.q_head_stride;
            const Elem* k = static_cast<const Elem*>(p.k) + b * p.k_batch_stride + (seq.k_row0 + col) * p.k_row_stride +
                            hk * p.k_head_stride;
            float s = 0.f;
            for (int d = 0; d < p.head_dim; ++d) s += static_cast<float>(q[d]) * static_cast<float>(k[d]);
            s = p.softcap > 0.f ? p.softcap * tanhf(s * p.scale / p.softcap) : s * p.scale;
            if (p.alibi_slopes)
                s += alibi_bias(p.alibi_slopes[b * p.alibi_batch_stride + h], row, col, seq.seqlen_q, seq.seqlen_k);
            const float l = lse[b * p.lse_batch_stride + h * p.lse_head_stride + seq.q_row0 + row];
            prob = expf(s - l);
            if (p.dropout_p > 0.f &&
                !dropout_keep(p.seed, p.offset, static_cast<uint32_t>(b) * p.nheads + h, static_cast<uint32_t>(row),
                              static_cast<uint32_t>(col), p.dropout_keep_threshold))
                prob = -prob;
        }
        p.attn_probs[idx] = prob;
    }
}

void launch_attn_probs(const AttnParams& p, const float* lse) {
    const int64_t total = int64_t(p.batch) * p.nheads * p.seqlen_q * p.seqlen_k;
    if (total == 0) return;
    const int64_t blocks = std::min<int64_t>((total + kProbsThreads - 1) / kProbsThreads, kProbsMaxBlocks);
    const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
    if (p.dtype == ElemType::f16)
        attn_probs_kernel<__half><<<static_cast<unsigned>(blocks), kProbsThreads, 0, stream>>>(p, lse);
    else
        attn_probs_kernel<__nv_bfloat16><<<static_cast<unsigned>(blocks), kProbsThreads, 0, stream>>>(p, lse);
    check_cuda(cudaGetLastError(), "attn_probs kernel launch");
}

}  // namespace flashattn::kernels
