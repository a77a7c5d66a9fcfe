// The reference's attention for one (sequence, query head), on rows already converted to the accumulator type.
// Shared by the padded/varlen forward and the kv-cache forward; the backward (attention.cpp) reuses score().
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/mask.h"
#include "common/params.h"
#include "common/philox.h"
#include "reference/element_access.h"

namespace flashattn::reference {

// Keys are visited in blocks of this many with FlashAttention's online softmax (running max and sum, the partial
// output rescaled when the max grows), so the reference exercises the same numerics as the kernels, and no row of
// the score matrix is kept whole.
constexpr int64_t kKeyBlock = 64;

// Everything about one (sequence, query head) that shapes its scores.
struct HeadContext {
    int64_t seqlen_q = 0, seqlen_k = 0;
    double alibi_slope = 0.0;     // 0: no ALiBi
    uint32_t batch_head = 0;      // b * nheads + h, for the dropout RNG
};

// The final score of (row, col) from the raw dot product q.k: scaled, soft-capped, ALiBi-biased. dcap receives
// d(score)/d(scale * q.k) (1 without softcap), which the backward needs.
template <class Acc>
Acc score(const AttnParams& p, const HeadContext& hc, Acc dot, int64_t row, int64_t col, Acc* dcap = nullptr) {
    Acc s = dot * static_cast<Acc>(p.scale);
    Acc d = 1;
    if (p.softcap > 0.f) {
        const Acc t = std::tanh(s / static_cast<Acc>(p.softcap));
        s = static_cast<Acc>(p.softcap) * t;
        d = 1 - t * t;
    }
    if (hc.alibi_slope != 0.0) {
        const int64_t dist = row + hc.seqlen_k - hc.seqlen_q - col;
        s -= static_cast<Acc>(hc.alibi_slope) * static_cast<Acc>(dist < 0 ? -dist : dist);
    }
    if (dcap) *dcap = d;
    return s;
}

template <class Acc>
Acc dot(const Acc* a, const Acc* b, int64_t n) {
    Acc s = 0;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

inline bool dropout_kept(const AttnParams& p, const HeadContext& hc, int64_t row, int64_t col) {
    if (p.dropout_p <= 0.f) return true;
    return dropout_keep(p.seed, p.offset, hc.batch_head, static_cast<uint32_t>(row), static_cast<uint32_t>(col),
                        p.dropout_keep_threshold);
}

// out (seqlen_q x head_dim_v) and lse (seqlen_q) of one head; a row that sees no key gets 0 and +inf.
template <class Acc>
void attend_head(const AttnParams& p, const HeadContext& hc, const Rows<Acc>& q, const Rows<Acc>& k,
                 const Rows<Acc>& v, Rows<Acc>& out, std::vector<Acc>& lse) {
    const int64_t dv = v.dim;
    out.resize(hc.seqlen_q, dv);
    lse.assign(static_cast<size_t>(hc.seqlen_q), std::numeric_limits<Acc>::infinity());
    std::vector<Acc> s(kKeyBlock);
    const Acc dropout_scale = static_cast<Acc>(p.dropout_scale);
    for (int64_t i = 0; i < hc.seqlen_q; ++i) {
        const KeyRange r = visible_keys(i, hc.seqlen_q, hc.seqlen_k, p.window_left, p.window_right);
        Acc m = -std::numeric_limits<Acc>::infinity(), l = 0;
        Acc* o = out.row(i);
        for (int64_t j0 = r.begin; j0 < r.end; j0 += kKeyBlock) {
            const int64_t n = std::min(kKeyBlock, r.end - j0);
            Acc block_max = -std::numeric_limits<Acc>::infinity();
            for (int64_t t = 0; t < n; ++t) {
                s[t] = score(p, hc, dot(q.row(i), k.row(j0 + t), q.dim), i, j0 + t);
                block_max = std::max(block_max, s[t]);
            }
            const Acc m_new = std::max(m, block_max);
            const Acc correction = std::exp(m - m_new);  // 0 on the first block (m = -inf)
            l *= correction;
            for (int64_t d = 0; d < dv; ++d) o[d] *= correction;
            for (int64_t t = 0; t < n; ++t) {
                const Acc pr = std::exp(s[t] - m_new);
                l += pr;  // the LSE is of the undropped softmax
                if (!dropout_kept(p, hc, i, j0 + t)) continue;
                const Acc w = pr * dropout_scale;
                const Acc* vj = v.row(j0 + t);
                for (int64_t d = 0; d < dv; ++d) o[d] += w * vj[d];
            }
            m = m_new;
        }
        if (l > 0) {
            for (int64_t d = 0; d < dv; ++d) o[d] /= l;
            lse[static_cast<size_t>(i)] = m + std::log(l);
        }
    }
}

// Row i of the attention probabilities (the softmax before dropout, negated where dropout drops the entry,
// 0 where masked) into probs[0, seqlen_k).
template <class Acc>
void probs_row(const AttnParams& p, const HeadContext& hc, const Rows<Acc>& q, const Rows<Acc>& k, int64_t i,
               Acc row_lse, float* probs) {
    const KeyRange r = visible_keys(i, hc.seqlen_q, hc.seqlen_k, p.window_left, p.window_right);
    for (int64_t j = r.begin; j < r.end; ++j) {
        const Acc pr = std::exp(score(p, hc, dot(q.row(i), k.row(j), q.dim), i, j) - row_lse);
        probs[j] = static_cast<float>(dropout_kept(p, hc, i, j) ? pr : -pr);
    }
}

}  // namespace flashattn::reference
