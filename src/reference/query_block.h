// The forward of one block of query rows of one (sequence, query head): FlashAttention's online softmax.
//
// Key tiles are visited left to right. Each row keeps its running maximum m and running sum l of exp(s - m) and
// an unnormalised output; when a tile raises the maximum, the sum and the output are rescaled by
// exp(m_old - m_new). Only tiles that some row of the block can see are visited. The padded/varlen forward and
// the kv-cache forward both use it; they differ only in where q, k and v rows come from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/head_scores.h"
#include "reference/row_layout.h"
#include "reference/tile.h"

namespace flashattn::reference {

// Keys [begin, end) that at least one of rows [i0, i0 + rows) sees. Visible ranges only move right as the row
// grows (both ends are non-decreasing), so the union is the span from the first row's begin to the last's end.
template <class Acc>
KeyRange block_keys(const HeadScores<Acc>& hs, int64_t i0, int64_t rows) {
    const KeyRange first = hs.visible(i0), last = hs.visible(i0 + rows - 1);
    return KeyRange{first.begin, std::max(first.begin, last.end)};
}

template <class Acc>
class QueryBlock {
  public:
    // Attends query rows [i0, i0 + q.rows()) (q already loaded, and rotated where that applies) to the keys of
    // k and v. Afterwards out() holds the normalised output rows and lse() their log-sum-exp; a row that sees no
    // key gets output 0 and LSE +inf.
    void attend(const HeadScores<Acc>& hs, const Tile<Acc>& q, int64_t i0, const RowLayout& k, const RowLayout& v,
                Acc dropout_scale) {
        const int64_t rows = q.rows(), dv = v.dim;
        out_.reshape(rows, dv);
        out_.fill(Acc(0));
        max_.assign(static_cast<size_t>(rows), -kInf);
        sum_.assign(static_cast<size_t>(rows), Acc(0));
        lse_.assign(static_cast<size_t>(rows), kInf);
        if (rows == 0) return;
        const KeyRange keys = block_keys(hs, i0, rows);
        for (int64_t j0 = align_down(keys.begin, kKeyBlock); j0 < keys.end; j0 += kKeyBlock) {
            const int64_t cols = std::min(j0 + kKeyBlock, keys.end) - j0;
            load_rows_transposed(k, j0, cols, kt_, scratch_);
            load_rows(v, j0, cols, v_);
            tile_dots(q, kt_, s_);
            for (int64_t r = 0; r < rows; ++r) update_row(hs, i0 + r, j0, cols, r);
        }
        for (int64_t r = 0; r < rows; ++r) {
            const Acc l = sum_[static_cast<size_t>(r)];
            Acc* o = out_.row(r);
            if (l > 0) {
                // The LSE is of the undropped softmax; the output of the dropped one, rescaled by 1 / (1 - p).
                const Acc factor = dropout_scale / l;
                for (int64_t c = 0; c < dv; ++c) o[c] *= factor;
                lse_[static_cast<size_t>(r)] = max_[static_cast<size_t>(r)] + std::log(l);
            } else {
                std::fill(o, o + dv, Acc(0));  // sees no key (or only -inf logits): output 0, LSE stays +inf
            }
        }
    }

    // Rows [0, rows) (rows <= q.rows()) of the attention probabilities of the rows just attended (the softmax before dropout,
    // negated where dropout drops the entry, 0 where masked), into probs: rows of length `width` (the tensor's
    // seqlen_k; columns at or past it are not stored). Recomputed from the final LSE one key tile at a time.
    void write_probs(const HeadScores<Acc>& hs, const Tile<Acc>& q, int64_t i0, const RowLayout& k, float* probs,
                     int64_t rows, int64_t width) {
        for (int64_t r = 0; r < rows; ++r) std::fill(probs + r * width, probs + (r + 1) * width, 0.f);
        if (rows <= 0) return;
        const KeyRange keys = block_keys(hs, i0, q.rows());
        for (int64_t j0 = align_down(keys.begin, kKeyBlock); j0 < std::min(keys.end, width); j0 += kKeyBlock) {
            const int64_t cols = std::min({j0 + kKeyBlock, keys.end, width}) - j0;
            load_rows_transposed(k, j0, cols, kt_, scratch_);
            tile_dots(q, kt_, s_);
            for (int64_t r = 0; r < rows; ++r) {
                const Acc row_lse = lse_[static_cast<size_t>(r)];
                if (!std::isfinite(row_lse)) continue;  // sees nothing: stays 0
                const int64_t i = i0 + r;
                const KeyRange vis = hs.visible(i);
                RowDropout<Acc> dropout(hs, i);
                for (int64_t j = std::max(vis.begin, j0); j < std::min(vis.end, j0 + cols); ++j) {
                    const Acc pr = std::exp(hs.logit(s_.at(r, j - j0), i, j) - row_lse);
                    probs[r * width + j] = static_cast<float>(dropout.kept(j) ? pr : -pr);
                }
            }
        }
    }

    const Tile<Acc>& out() const { return out_; }
    const std::vector<Acc>& lse() const { return lse_; }

  private:
    static constexpr Acc kInf = std::numeric_limits<Acc>::infinity();

    // Folds key tile [j0, j0 + cols) into row r (query row i) of the block.
    void update_row(const HeadScores<Acc>& hs, int64_t i, int64_t j0, int64_t cols, int64_t r) {
        const KeyRange vis = hs.visible(i);
        const int64_t c_begin = std::max(vis.begin, j0) - j0, c_end = std::min(vis.end, j0 + cols) - j0;
        if (c_begin >= c_end) return;  // this row sees none of the tile
        Acc* s = s_.row(r);
        Acc tile_max = -kInf;
        for (int64_t c = c_begin; c < c_end; ++c) {
            s[c] = hs.logit(s[c], i, j0 + c);
            tile_max = std::max(tile_max, s[c]);
        }
        Acc& m = max_[static_cast<size_t>(r)];
        Acc& l = sum_[static_cast<size_t>(r)];
        const Acc m_new = std::max(m, tile_max);
        if (m_new == -kInf) return;  // only -inf logits so far: nothing to add
        Acc* o = out_.row(r);
        if (m_new != m) {
            const Acc correction = std::exp(m - m_new);  // 0 for the first tile the row sees (m = -inf)
            l *= correction;
            for (int64_t c = 0; c < out_.cols(); ++c) o[c] *= correction;
            m = m_new;
        }
        RowDropout<Acc> dropout(hs, i);
        for (int64_t c = c_begin; c < c_end; ++c) {
            const Acc pr = std::exp(s[c] - m);
            l += pr;
            if (dropout.kept(j0 + c)) axpy(pr, v_.row(c), o, out_.cols());
        }
    }

    Tile<Acc> kt_, v_, s_, scratch_, out_;
    std::vector<Acc> max_, sum_, lse_;
};

}  // namespace flashattn::reference
