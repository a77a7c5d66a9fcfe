// Where sequence b of a padded or variable-length batch lives, how long it is, and where its LSE entries go.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/params.h"

namespace flashattn::reference {

struct Sequence {
    int64_t q_row0 = 0, k_row0 = 0;     // first row in the q / k tensors (varlen: packed rows; padded: 0)
    int64_t seqlen_q = 0, seqlen_k = 0;  // lengths the attention uses
    int64_t k_rows = 0;                  // rows of k/v the sequence owns (varlen with seqused_k: >= seqlen_k)
};

inline Sequence sequence(const AttnParams& p, int64_t b) {
    Sequence s;
    if (p.is_varlen) {
        s.q_row0 = p.cu_seqlens_q[b];
        s.k_row0 = p.cu_seqlens_k[b];
        s.seqlen_q = p.cu_seqlens_q[b + 1] - s.q_row0;
        s.k_rows = p.cu_seqlens_k[b + 1] - s.k_row0;
        s.seqlen_k = p.seqused_k ? std::min<int64_t>(p.seqused_k[b], s.k_rows) : s.k_rows;
    } else {
        s.seqlen_q = p.seqlen_q;
        s.seqlen_k = s.k_rows = p.seqlen_k;
    }
    return s;
}

// Element offset of the LSE (and softmax_d) of query row i of (b, h): padded (batch, nheads, seqlen_q), varlen
// (nheads, total_q) with the sequence's rows starting at cu_seqlens_q[b] (batch stride 0).
inline int64_t lse_offset(const AttnParams& p, const Sequence& s, int64_t b, int64_t h, int64_t i) {
    return b * p.lse_batch_stride + h * p.lse_head_stride + s.q_row0 + i;
}

// Number of blocks of `block` rows covering n rows.
inline int64_t blocks_of(int64_t n, int64_t block) { return n > 0 ? (n + block - 1) / block : 0; }

}  // namespace flashattn::reference
