// The scores of one (sequence, query head): what turns q.k into the logit the softmax sees, which keys each row
// may see, and which entries dropout keeps.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/mask.h"
#include "common/params.h"
#include "common/philox.h"
#include "reference/tile.h"

namespace flashattn::reference {

template <class Acc>
struct HeadScores {
    int64_t seqlen_q = 0, seqlen_k = 0;  // of this sequence
    int32_t window_left = -1, window_right = -1;
    Acc scale = 1, softcap = 0;
    bool has_alibi = false;
    float alibi_slope = 0.f;
    bool has_dropout = false;
    uint64_t seed = 0, offset = 0;
    uint32_t batch_head = 0;  // b * nheads + h: the dropout RNG's head coordinate
    uint32_t keep_threshold = kDropoutThresholdOne;

    KeyRange visible(int64_t row) const { return visible_keys(row, seqlen_q, seqlen_k, window_left, window_right); }

    // The logit of (row, col) from the raw dot product: scaled, soft-capped, then ALiBi-biased. When dcap is
    // given it receives d(logit)/d(scale * dot), the soft-cap's slope 1 - tanh^2 (1 without soft-cap); ALiBi is
    // an additive constant and passes the gradient through unchanged.
    Acc logit(Acc dot, int64_t row, int64_t col, Acc* dcap = nullptr) const {
        Acc s = dot * scale;
        if (softcap > 0) {
            const Acc t = std::tanh(s / softcap);
            s = softcap * t;
            if (dcap) *dcap = 1 - t * t;
        } else if (dcap) {
            *dcap = 1;
        }
        if (has_alibi) s += static_cast<Acc>(alibi_bias(alibi_slope, row, col, seqlen_q, seqlen_k));
        return s;
    }
};

// Dropout decisions along one row (the same as common/philox.h's dropout_keep), for columns visited in increasing
// order: one Philox draw covers kDropoutColsPerDraw consecutive columns, so each draw is made once, not per column.
template <class Acc>
class RowDropout {
  public:
    RowDropout(const HeadScores<Acc>& hs, int64_t row) : hs_(hs), row_(static_cast<uint32_t>(row)) {}

    bool kept(int64_t col) {
        if (!hs_.has_dropout) return true;
        const int64_t block = col / kDropoutColsPerDraw;
        if (block != block_) {
            bits_ = dropout_bits(hs_.seed, hs_.offset, hs_.batch_head, row_, static_cast<uint32_t>(block));
            block_ = block;
        }
        return dropout_value(bits_, static_cast<int>(col % kDropoutColsPerDraw)) < hs_.keep_threshold;
    }

  private:
    const HeadScores<Acc>& hs_;
    uint32_t row_;
    int64_t block_ = -1;
    Philox4 bits_{};
};

template <class Acc>
HeadScores<Acc> head_scores(const AttnParams& p, int64_t b, int64_t h, int64_t seqlen_q, int64_t seqlen_k) {
    HeadScores<Acc> hs;
    hs.seqlen_q = seqlen_q;
    hs.seqlen_k = seqlen_k;
    hs.window_left = p.window_left;
    hs.window_right = p.window_right;
    hs.scale = static_cast<Acc>(p.scale);
    hs.softcap = static_cast<Acc>(p.softcap);
    if (p.alibi_slopes) {
        hs.has_alibi = true;
        hs.alibi_slope = p.alibi_slopes[b * p.alibi_batch_stride + h];
    }
    hs.has_dropout = p.dropout_p > 0.f;
    hs.seed = p.seed;
    hs.offset = p.offset;
    hs.batch_head = static_cast<uint32_t>(b * p.nheads + h);  // wraps at 32 bits, as the kernels' does
    hs.keep_threshold = p.dropout_keep_threshold;
    return hs;
}

// s = q_tile * kt_tile: (rows, cols) dot products of query rows with keys, kt_tile holding keys as columns.
template <class Acc>
void tile_dots(const Tile<Acc>& q, const Tile<Acc>& kt, Tile<Acc>& s) {
    s.reshape(q.rows(), kt.cols());
    s.fill(Acc(0));
    for (int64_t r = 0; r < q.rows(); ++r)
        for (int64_t d = 0; d < q.cols(); ++d) axpy(q.at(r, d), kt.row(d), s.row(r), kt.cols());
}

}  // namespace flashattn::reference
