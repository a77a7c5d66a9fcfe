// The error baseline of the GPU tests: plain O(N^2) attention computed the way PyTorch computes it in fp16 / bf16
// (FlashAttention's tests' attention_ref(upcast=False, reorder_ops=True)), every intermediate tensor rounded to the
// input dtype. The GPU's error against the fp32 oracle may be at most 2x this implementation's error against the
// same oracle (support/host_tensor.h: within_tolerance).
//
// Forward, for each (batch, head) and query row i of a sequence of seqlen_q rows and seqlen_k keys:
//   s_ij  = R(R(q_i . k_j) * scale)                  dot products accumulated in fp32, R() rounds to the dtype
//   s_ij  = R(softcap * tanh(s_ij / softcap))        if softcap > 0 (fp32 inside)
//   s_ij  = R(s_ij + alibi_bias(slope, i, j))        if ALiBi slopes are given (bias in fp32)
//   only keys j in visible_keys(i) (common/mask.h) take part; a row that sees none gets out 0 and lse +inf
//   p_ij  = R(exp(s_ij - m_i) / l_i)                 softmax in fp32, m_i = max_j s_ij, l_i = sum_j exp(s_ij - m_i)
//   lse_i = m_i + log(l_i)                           (fp32)
//   pd_ij = keep_ij ? R(p_ij * 1 / (1 - dropout_p)) : 0    keep_ij from common/philox.h dropout_keep
//   o_i   = R(sum_j pd_ij v_j)                       fp32 accumulation
// Backward, with dout:
//   D_i   = sum_d dout_id o_id                       (fp32; returned as softmax_d)
//   dpd_ij = R(dout_i . v_j);  dp_ij = keep_ij ? R(dpd_ij / (1 - p)) : 0
//   ds_ij = R(p_ij (dp_ij - D_i));  through softcap: ds_ij = R(ds_ij (1 - tanh^2(s1_ij / softcap)));
//   ds_ij = R(ds_ij * scale)
//   dq_i = R(sum_j ds_ij k_j);  dk_j = R(sum_i ds_ij q_i);  dv_j = R(sum_i pd_ij dout_i)   (per query head)
//   GQA: dk and dv of a key head = R(sum over its query heads of the per-head, rounded, dk and dv)
//
// Inputs are contiguous host tensors of dtype f16, bf16 (or f32, where R() is the identity: a plain fp32
// implementation). Layouts are those of flashattn.h, padded or varlen (SeqLayout).
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"
#include "support/host_tensor.h"

namespace flashattn::testing {

// Where the sequences of a batch lie. Padded: sequence b is rows [b * seqlen_q, (b + 1) * seqlen_q) of q viewed as
// (batch * seqlen_q, nheads, d), and likewise for k. Varlen: rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]).
struct SeqLayout {
    bool varlen = false;
    int64_t batch = 0;
    int64_t seqlen_q = 0, seqlen_k = 0;              // padded: the lengths; varlen: max_seqlen_q / max_seqlen_k
    std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;  // varlen: batch + 1 offsets
    std::vector<int32_t> seqused_k;                   // varlen, optional: keys used of each sequence

    static SeqLayout padded(int64_t batch, int64_t seqlen_q, int64_t seqlen_k);
    // Offsets from per-sequence lengths; the maxima from the lengths (k: the stored lengths, not seqused_k).
    static SeqLayout packed(const std::vector<int32_t>& seqlens_q, const std::vector<int32_t>& seqlens_k,
                            const std::vector<int32_t>& seqused_k = {});

    int64_t q_begin(int64_t b) const;  // first row of sequence b in the (total_q, ...) view
    int64_t q_len(int64_t b) const;
    int64_t k_begin(int64_t b) const;
    int64_t k_len(int64_t b) const;  // keys attended: seqused_k[b] where given
    int64_t total_q() const;         // rows of q (padded: batch * seqlen_q)
    int64_t total_k() const;
    // Index of (b, h, i) in softmax_lse: padded (batch, nheads, seqlen_q), varlen (nheads, total_q).
    int64_t lse_index(int64_t b, int64_t h, int64_t i, int64_t nheads) const;
    std::vector<int64_t> lse_shape(int64_t nheads) const;
    // Index of (b, h, i, j) in attn_probs (batch, nheads, seqlen_q, seqlen_k) (varlen: the maxima).
    int64_t probs_index(int64_t b, int64_t h, int64_t i, int64_t j, int64_t nheads) const;
    std::vector<int64_t> probs_shape(int64_t nheads) const;
};

// Options as the kernels see them: the scale defaulted, causal folded into window_right, slopes read out.
struct ResolvedOptions {
    float scale = 0.0f;
    int32_t window_left = -1, window_right = -1;
    float softcap = 0.0f;
    std::vector<float> alibi_slopes;  // empty, (nheads) or (batch * nheads)
    bool alibi_per_batch = false;
    float dropout_p = 0.0f;
    uint32_t keep_threshold = 65536;
    float dropout_scale = 1.0f;
    uint64_t seed = 0, offset = 0;

    // `options.alibi_slopes` must be a CPU fp32 tensor when present.
    static ResolvedOptions from(const AttentionOptions& options, int64_t head_dim, int64_t batch, int64_t nheads);
    float slope(int64_t b, int64_t h, int64_t nheads) const;
    bool has_dropout() const { return keep_threshold < 65536u; }
};

struct LowpForwardResult {
    HostTensor out;    // dtype of q, shaped like q with head_dim_v
    HostTensor lse;    // f32, SeqLayout::lse_shape
    HostTensor probs;  // f32, SeqLayout::probs_shape, when asked for: p_ij (rounded), negated where dropped
};

struct LowpBackwardResult {
    HostTensor dq, dk, dv;  // dtype of q, shaped like q, k, v
    HostTensor softmax_d;   // f32, shaped like softmax_lse
};

LowpForwardResult lowp_forward(const SeqLayout& layout, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                               const AttentionOptions& options, bool want_probs = false);

LowpBackwardResult lowp_backward(const SeqLayout& layout, const HostTensor& q, const HostTensor& k,
                                 const HostTensor& v, const HostTensor& dout, const AttentionOptions& options);

}  // namespace flashattn::testing
