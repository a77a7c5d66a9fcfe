// A deliberately plain attention in fp64: the whole (seqlen_q, seqlen_k) score matrix of one (sequence, head) at
// a time, softmax by the textbook formula, gradients by the analytic formulas. It shares no code with the tiled
// reference (only the dropout RNG, whose bits are the specification, and the fp16/bf16 conversions), so the
// two agreeing means something.
//
// It reads the same AttnParams as the reference, and returns its results in fp64, in the logical (contiguous)
// layouts of the outputs, whatever the strides of the params.
#pragma once

#include <vector>

#include "common/params.h"

namespace flashattn::testing::naive {

struct Result {
    std::vector<double> out;     // (rows_q, nheads, head_dim_v): rows_q = batch * seqlen_q, or total_q (varlen)
    std::vector<double> lse;     // padded (batch, nheads, seqlen_q); varlen (nheads, total_q)
    std::vector<double> probs;   // (batch, nheads, seqlen_q, seqlen_k): softmax, negated where dropped, 0 masked
    std::vector<double> dq;      // (rows_q, nheads, head_dim)
    std::vector<double> dk, dv;  // (rows_k, nheads_k, head_dim / head_dim_v)
    std::vector<double> delta;   // rowsum(dout * out), laid out like lse
};

// Forward of a padded or varlen batch: out, lse and probs.
Result forward(const AttnParams& p);

// Backward of a padded or varlen batch: dq, dk, dv and delta. The probabilities are recomputed exactly from
// q and k (the saved LSE is not used); delta comes from the given out, as the API defines it.
Result backward(const AttnParams& p);

// KV-cache forward: appends the (rotated) new keys and values to p.k_cache_mut / p.v_cache_mut (give it a copy
// of the cache) and attends: out and lse (padded layouts).
Result kvcache_forward(const AttnParams& p);

}  // namespace flashattn::testing::naive
