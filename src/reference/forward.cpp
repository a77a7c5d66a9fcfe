// The reference forward for padded and variable-length batches.
//
// Work item = one block of kQueryBlock query rows of one (sequence, query head): items write disjoint rows of
// out, softmax_lse and attn_probs, so they run in parallel without locks, and each loads only the key tiles its
// rows can see.
#include <algorithm>
#include <cstdint>

#include "reference/head_scores.h"
#include "reference/query_block.h"
#include "reference/reference.h"
#include "reference/row_layout.h"
#include "reference/sequence.h"
#include "reference/thread_pool.h"

namespace flashattn::reference {

namespace {

// Query blocks per (sequence, head): enough for the longest sequence, and for every row of attn_probs (which
// spans the padded / maximum seqlen_q and is written in full, zeros included).
int64_t query_blocks_per_head(const AttnParams& p) {
    int64_t rows = p.attn_probs ? p.seqlen_q : 0;
    for (int64_t b = 0; b < p.batch; ++b) rows = std::max(rows, sequence(p, b).seqlen_q);
    return blocks_of(rows, kQueryBlock);
}

template <class Acc>
void forward_item(const AttnParams& p, int64_t b, int64_t h, int64_t i0) {
    const Sequence s = sequence(p, b);
    const int64_t hk = h / (p.nheads / p.nheads_k);
    const int64_t rows = std::clamp<int64_t>(s.seqlen_q - i0, 0, kQueryBlock);
    const int64_t prob_rows = p.attn_probs ? std::clamp<int64_t>(p.seqlen_q - i0, 0, kQueryBlock) : 0;
    if (rows == 0 && prob_rows == 0) return;

    const HeadScores<Acc> hs = head_scores<Acc>(p, b, h, s.seqlen_q, s.seqlen_k);
    const RowLayout q = dense_rows(p.q, p.dtype, p.head_dim, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b,
                                   s.q_row0, h);
    const RowLayout k = dense_rows(p.k, p.dtype, p.head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b,
                                   s.k_row0, hk);
    const RowLayout v = dense_rows(p.v, p.dtype, p.head_dim_v, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                                   b, s.k_row0, hk);
    const RowLayout out = dense_rows(p.out, p.dtype, p.head_dim_v, p.out_batch_stride, p.out_row_stride,
                                     p.out_head_stride, b, s.q_row0, h);

    Tile<Acc> q_tile;
    load_rows(q, i0, rows, q_tile);
    QueryBlock<Acc> block;
    block.attend(hs, q_tile, i0, k, v, static_cast<Acc>(hs.has_dropout ? p.dropout_scale : 1.0f));
    store_rows(out, p.out, i0, rows, block.out());
    if (p.softmax_lse)
        for (int64_t r = 0; r < rows; ++r)
            p.softmax_lse[lse_offset(p, s, b, h, i0 + r)] = static_cast<float>(block.lse()[static_cast<size_t>(r)]);

    if (p.attn_probs) {
        // (batch, nheads, seqlen_q, seqlen_k) with the padded / maximum lengths: rows past the sequence stay 0.
        const int64_t width = p.seqlen_k;
        float* probs = p.attn_probs + ((b * p.nheads + h) * p.seqlen_q + i0) * width;
        block.write_probs(hs, q_tile, i0, k, probs, std::min(rows, prob_rows), width);
        for (int64_t r = rows; r < prob_rows; ++r) std::fill(probs + r * width, probs + (r + 1) * width, 0.f);
    }
}

template <class Acc>
void forward_impl(const AttnParams& p) {
    const int64_t q_blocks = query_blocks_per_head(p);
    parallel_for(int64_t(p.batch) * p.nheads * q_blocks, [&](int64_t item) {
        const int64_t block = item % q_blocks, bh = item / q_blocks;
        forward_item<Acc>(p, bh / p.nheads, bh % p.nheads, block * kQueryBlock);
    });
}

}  // namespace

void forward(const AttnParams& p, Accum acc) {
    if (acc == Accum::f64) forward_impl<double>(p);
    else forward_impl<float>(p);
}

}  // namespace flashattn::reference
