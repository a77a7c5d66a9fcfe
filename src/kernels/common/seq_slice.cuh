// Where one sequence of a (possibly variable-length) batch lives, for every kernel.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace flashattn::kernels {

struct SeqSlice {
    int64_t q_row0, k_row0;  // first row of the sequence in q/out and in k/v (varlen: cu_seqlens; padded: 0)
    int seqlen_q, seqlen_k;
    int k_rows;  // rows of k/v the sequence occupies (varlen with seqused_k: may exceed seqlen_k)
};

__device__ __forceinline__ SeqSlice seq_slice(const AttnParams& p, int b) {
    SeqSlice s;
    if (p.is_varlen) {
        s.q_row0 = p.cu_seqlens_q[b];
        s.k_row0 = p.cu_seqlens_k[b];
        s.seqlen_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
        s.k_rows = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
        s.seqlen_k = p.seqused_k ? p.seqused_k[b] : s.k_rows;
    } else {
        s.q_row0 = 0;
        s.k_row0 = 0;
        s.seqlen_q = p.seqlen_q;
        s.k_rows = p.seqlen_k;
        s.seqlen_k = p.seqused_k ? p.seqused_k[b] : p.seqlen_k;
    }
    return s;
}

}  // namespace flashattn::kernels
