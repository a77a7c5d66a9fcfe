// The reference backward for padded and variable-length batches, FlashAttention-2 style: the probabilities are
// recomputed tile by tile from the saved LSE, never stored whole.
//
// Work item = one (sequence, kv head). It walks the key tiles; for each it accumulates dK and dV of those keys
// over every query head of its group (GQA/MQA) and every query tile that sees them, and adds each tile's share to
// the dQ of those query heads, which the item owns as well. So no two threads write the same element, no atomics
// are needed, and every sum runs in a fixed order: the result is deterministic.
//
//   P  = exp(s - lse)            (0 where masked; a row with lse = +inf saw nothing and contributes nothing)
//   dV = (P o Z)^T dO            Z = dropout_scale where kept, 0 where dropped
//   dP = (dO V^T) o Z,  D = rowsum(dO o O),  dS = P o (dP - D) o softcap'
//   dQ = scale dS K,  dK = scale dS^T Q
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/mask.h"
#include "reference/head_scores.h"
#include "reference/reference.h"
#include "reference/row_layout.h"
#include "reference/sequence.h"
#include "reference/thread_pool.h"
#include "reference/tile.h"

namespace flashattn::reference {

namespace {

// What the backward keeps per query head of the group: O(seqlen_q * head_dim), linear in the sequence length.
template <class Acc>
struct QueryHead {
    int64_t h = 0;
    HeadScores<Acc> hs;
    RowLayout q, dout;
    std::vector<Acc> lse;    // saved by the forward
    std::vector<Acc> delta;  // D = rowsum(dO o O)
    Tile<Acc> dq;            // (seqlen_q, head_dim), unscaled
};

template <class Acc>
QueryHead<Acc> prepare_query_head(const AttnParams& p, const Sequence& s, int64_t b, int64_t h) {
    QueryHead<Acc> qh;
    qh.h = h;
    qh.hs = head_scores<Acc>(p, b, h, s.seqlen_q, s.seqlen_k);
    qh.q = dense_rows(p.q, p.dtype, p.head_dim, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, s.q_row0, h);
    qh.dout = dense_rows(p.dout, p.dtype, p.head_dim_v, p.dout_batch_stride, p.dout_row_stride, p.dout_head_stride,
                         b, s.q_row0, h);
    const RowLayout out = dense_rows(p.out, p.dtype, p.head_dim_v, p.out_batch_stride, p.out_row_stride,
                                     p.out_head_stride, b, s.q_row0, h);
    qh.lse.resize(static_cast<size_t>(s.seqlen_q));
    qh.delta.resize(static_cast<size_t>(s.seqlen_q));
    Tile<Acc> o_tile, do_tile;
    for (int64_t i0 = 0; i0 < s.seqlen_q; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, s.seqlen_q - i0);
        load_rows(out, i0, rows, o_tile);
        load_rows(qh.dout, i0, rows, do_tile);
        for (int64_t r = 0; r < rows; ++r) {
            Acc d = 0;
            for (int64_t c = 0; c < p.head_dim_v; ++c) d += do_tile.at(r, c) * o_tile.at(r, c);
            const int64_t off = lse_offset(p, s, b, h, i0 + r);
            qh.delta[static_cast<size_t>(i0 + r)] = d;
            qh.lse[static_cast<size_t>(i0 + r)] = static_cast<Acc>(p.softmax_lse[off]);
            if (p.softmax_d) p.softmax_d[off] = static_cast<float>(d);
        }
    }
    qh.dq.reshape(s.seqlen_q, p.head_dim);
    qh.dq.fill(Acc(0));
    return qh;
}

// The tiles one key tile of the backward works with, reused across key tiles.
template <class Acc>
struct KeyTile {
    int64_t j0 = 0, cols = 0;
    Tile<Acc> k, kt, vt;  // keys as rows and as columns; values as columns
    Tile<Acc> dk, dv;     // accumulators, (cols, head_dim) and (cols, head_dim_v)
};

// Adds the share of query rows [i0, i0 + rows) of one head to the key tile's dK/dV and to the head's dQ.
template <class Acc>
void backward_query_tile(QueryHead<Acc>& qh, KeyTile<Acc>& kt, int64_t i0, int64_t rows, Acc dropout_scale,
                         Tile<Acc>& q, Tile<Acc>& dout, Tile<Acc>& s, Tile<Acc>& dp) {
    load_rows(qh.q, i0, rows, q);
    load_rows(qh.dout, i0, rows, dout);
    tile_dots(q, kt.kt, s);     // q.k
    tile_dots(dout, kt.vt, dp);  // dO.v
    const HeadScores<Acc>& hs = qh.hs;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const Acc row_lse = qh.lse[static_cast<size_t>(i)], row_delta = qh.delta[static_cast<size_t>(i)];
        if (!std::isfinite(row_lse)) continue;  // the row saw no key: P = 0
        const KeyRange vis = hs.visible(i);
        const int64_t c_begin = std::max(vis.begin, kt.j0) - kt.j0;
        const int64_t c_end = std::min(vis.end, kt.j0 + kt.cols) - kt.j0;
        Acc* dq_row = qh.dq.row(i);
        RowDropout<Acc> dropout(hs, i);
        for (int64_t c = c_begin; c < c_end; ++c) {
            const int64_t j = kt.j0 + c;
            Acc dcap;
            const Acc pr = std::exp(hs.logit(s.at(r, c), i, j, &dcap) - row_lse);
            const Acc z = dropout.kept(j) ? dropout_scale : Acc(0);
            if (z != 0) axpy(pr * z, dout.row(r), kt.dv.row(c), kt.dv.cols());
            const Acc ds = pr * (dp.at(r, c) * z - row_delta) * dcap;
            axpy(ds, kt.k.row(c), dq_row, kt.k.cols());
            axpy(ds, q.row(r), kt.dk.row(c), kt.dk.cols());
        }
    }
}

template <class Acc>
void backward_item(const AttnParams& p, int64_t b, int64_t hk) {
    const Sequence s = sequence(p, b);
    const int64_t group = p.nheads / p.nheads_k;
    const Acc scale = static_cast<Acc>(p.scale);
    const Acc dropout_scale = static_cast<Acc>(p.dropout_p > 0.f ? p.dropout_scale : 1.0f);
    std::vector<QueryHead<Acc>> heads;
    heads.reserve(static_cast<size_t>(group));
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) heads.push_back(prepare_query_head<Acc>(p, s, b, h));

    const RowLayout k = dense_rows(p.k, p.dtype, p.head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b,
                                   s.k_row0, hk);
    const RowLayout v = dense_rows(p.v, p.dtype, p.head_dim_v, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                                   b, s.k_row0, hk);
    const RowLayout dk = dense_rows(p.dk, p.dtype, p.head_dim, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride,
                                    b, s.k_row0, hk);
    const RowLayout dv = dense_rows(p.dv, p.dtype, p.head_dim_v, p.dv_batch_stride, p.dv_row_stride,
                                    p.dv_head_stride, b, s.k_row0, hk);
    KeyTile<Acc> kt;
    Tile<Acc> scratch, q, dout, sc, dp;
    for (kt.j0 = 0; kt.j0 < s.seqlen_k; kt.j0 += kKeyBlock) {
        kt.cols = std::min(kKeyBlock, s.seqlen_k - kt.j0);
        load_rows(k, kt.j0, kt.cols, kt.k);
        load_rows_transposed(k, kt.j0, kt.cols, kt.kt, scratch);
        load_rows_transposed(v, kt.j0, kt.cols, kt.vt, scratch);
        kt.dk.reshape(kt.cols, p.head_dim);
        kt.dk.fill(Acc(0));
        kt.dv.reshape(kt.cols, p.head_dim_v);
        kt.dv.fill(Acc(0));
        const KeyRange rows = rows_seeing_keys(kt.j0, kt.j0 + kt.cols, s.seqlen_q, s.seqlen_k, p.window_left,
                                               p.window_right);
        for (QueryHead<Acc>& qh : heads)
            for (int64_t i0 = align_down(rows.begin, kQueryBlock); i0 < rows.end; i0 += kQueryBlock)
                backward_query_tile(qh, kt, i0, std::min(i0 + kQueryBlock, rows.end) - i0, dropout_scale, q, dout,
                                    sc, dp);
        for (int64_t c = 0; c < kt.cols; ++c)
            for (int64_t d = 0; d < p.head_dim; ++d) kt.dk.at(c, d) *= scale;
        store_rows(dk, p.dk, kt.j0, kt.cols, kt.dk);
        store_rows(dv, p.dv, kt.j0, kt.cols, kt.dv);
    }
    // Keys the sequence owns but does not use (varlen seqused_k) took no part in the forward: zero gradient.
    if (s.k_rows > s.seqlen_k) {
        Tile<Acc> zeros_k, zeros_v;
        zeros_k.reshape(s.k_rows - s.seqlen_k, p.head_dim);
        zeros_k.fill(Acc(0));
        zeros_v.reshape(s.k_rows - s.seqlen_k, p.head_dim_v);
        zeros_v.fill(Acc(0));
        store_rows(dk, p.dk, s.seqlen_k, zeros_k.rows(), zeros_k);
        store_rows(dv, p.dv, s.seqlen_k, zeros_v.rows(), zeros_v);
    }
    for (QueryHead<Acc>& qh : heads) {
        for (int64_t i = 0; i < s.seqlen_q; ++i)
            for (int64_t d = 0; d < p.head_dim; ++d) qh.dq.at(i, d) *= scale;
        const RowLayout dq = dense_rows(p.dq, p.dtype, p.head_dim, p.dq_batch_stride, p.dq_row_stride,
                                        p.dq_head_stride, b, s.q_row0, qh.h);
        store_rows(dq, p.dq, 0, s.seqlen_q, qh.dq);
    }
}

template <class Acc>
void backward_impl(const AttnParams& p) {
    parallel_for(int64_t(p.batch) * p.nheads_k,
                 [&](int64_t item) { backward_item<Acc>(p, item / p.nheads_k, item % p.nheads_k); });
}

}  // namespace

void backward(const AttnParams& p, Accum acc) {
    if (acc == Accum::f64) backward_impl<double>(p);
    else backward_impl<float>(p);
}

}  // namespace flashattn::reference
