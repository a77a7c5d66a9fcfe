// The reference kv-cache forward: rotate and append the new keys/values into the cache in place, rotate the
// queries, then attend over the cache with the same query-block forward as the padded path.
//
// Positions are absolute cache positions. Sequence b's cache holds positions [leftpad_b, cache_len_b); new row t
// goes to position cache_len_b + t; the keys attended to are positions [leftpad_b, cache_len_b + seqlen_new), so
// key column j is position leftpad_b + j and the causal / window / ALiBi diagonal is aligned to the last of them.
//
// Rotary positions are absolute too, left padding included: new key t rotates at cache_len_b + t, and query row i
// at cache_len_b + i when the attention is causal or windowed, else every row at cache_len_b. FlashAttention does
// the same: its kernel adds leftpad back onto its leftpad-relative key index before reading the cos/sin tables,
// and its test (test_flash_attn_kvcache) rotates q and k with seqlen_offsets = cache_seqlens, not
// cache_seqlens - cache_leftpad.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "reference/element_access.h"
#include "reference/head_scores.h"
#include "reference/query_block.h"
#include "reference/reference.h"
#include "reference/rotary.h"
#include "reference/row_layout.h"
#include "reference/sequence.h"
#include "reference/thread_pool.h"

namespace flashattn::reference {

namespace {

struct CacheSequence {
    int64_t entry = 0;    // dense cache: the batch entry sequence b uses
    int64_t length = 0;   // positions already in the cache (before appending)
    int64_t leftpad = 0;  // first valid position
    int64_t seqlen_k = 0;  // keys attended to: positions [leftpad, length + seqlen_new)
};

CacheSequence cache_sequence(const AttnParams& p, int64_t b) {
    CacheSequence c;
    c.entry = p.cache_batch_idx ? p.cache_batch_idx[b] : b;
    c.length = p.cache_seqlens ? p.cache_seqlens[b] : p.cache_seqlen;
    c.leftpad = p.cache_leftpad ? p.cache_leftpad[b] : 0;
    const int64_t appended = p.knew ? p.seqlen_new : 0;
    c.seqlen_k = std::max<int64_t>(c.length + appended - c.leftpad, 0);
    return c;
}

// The cache rows of (sequence b, kv head hk), row r standing for position pos0 + r: through the block table when
// paged (the "batch" stride of a paged cache is the block stride), else within the sequence's cache entry.
RowLayout cache_rows(const AttnParams& p, const void* base, int64_t dim, int64_t batch_stride, int64_t row_stride,
                     int64_t head_stride, int64_t b, const CacheSequence& c, int64_t hk, int64_t pos0) {
    if (!p.block_table) return dense_rows(base, p.dtype, dim, batch_stride, row_stride, head_stride, c.entry, pos0, hk);
    RowLayout l;
    l.base = base;
    l.dtype = p.dtype;
    l.dim = dim;
    l.first = hk * head_stride;
    l.row_stride = row_stride;
    l.block_table = p.block_table + b * p.block_table_batch_stride;
    l.block_stride = batch_stride;
    l.page_size = p.page_size;
    l.pos0 = pos0;
    return l;
}

// Writes new row t of every sequence and kv head to cache position cache_len_b + t, keys rotated first. Runs
// before any attention reads the cache; sequentially, since it is cheap and sequences may share cache storage.
void append_new_rows(const AttnParams& p) {
    if (!p.knew || p.seqlen_new == 0) return;
    Rotary rotary(p);
    std::vector<double> row(static_cast<size_t>(std::max(p.head_dim, p.head_dim_v)));
    for (int64_t b = 0; b < p.batch; ++b) {
        const CacheSequence c = cache_sequence(p, b);
        for (int64_t hk = 0; hk < p.nheads_k; ++hk) {
            const RowLayout knew = dense_rows(p.knew, p.dtype, p.head_dim, p.knew_batch_stride, p.knew_row_stride,
                                              p.knew_head_stride, b, 0, hk);
            const RowLayout vnew = dense_rows(p.vnew, p.dtype, p.head_dim_v, p.vnew_batch_stride,
                                              p.vnew_row_stride, p.vnew_head_stride, b, 0, hk);
            const RowLayout kc = cache_rows(p, p.k_cache_mut, p.head_dim, p.k_batch_stride, p.k_row_stride,
                                            p.k_head_stride, b, c, hk, 0);
            const RowLayout vc = cache_rows(p, p.v_cache_mut, p.head_dim_v, p.v_batch_stride, p.v_row_stride,
                                            p.v_head_stride, b, c, hk, 0);
            for (int64_t t = 0; t < p.seqlen_new; ++t) {
                const int64_t pos = c.length + t;
                read_row(p.dtype, p.knew, knew.offset(t), p.head_dim, row.data());
                rotary.rotate(row.data(), pos);
                write_row(p.dtype, p.k_cache_mut, kc.offset(pos), p.head_dim, row.data());
                read_row(p.dtype, p.vnew, vnew.offset(t), p.head_dim_v, row.data());
                write_row(p.dtype, p.v_cache_mut, vc.offset(pos), p.head_dim_v, row.data());
            }
        }
    }
}

template <class Acc>
void attend_item(const AttnParams& p, int64_t b, int64_t h, int64_t i0) {
    const int64_t rows = std::min(kQueryBlock, int64_t(p.seqlen_q) - i0);
    const int64_t hk = h / (p.nheads / p.nheads_k);
    const CacheSequence c = cache_sequence(p, b);
    HeadScores<Acc> hs = head_scores<Acc>(p, b, h, p.seqlen_q, c.seqlen_k);
    hs.has_dropout = false;  // inference: the kv-cache forward has no dropout

    const RowLayout q = dense_rows(p.q, p.dtype, p.head_dim, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, 0,
                                   h);
    Tile<Acc> q_tile;
    load_rows(q, i0, rows, q_tile);
    Rotary rotary(p);
    const bool rotate_per_row = p.causal || p.window_left >= 0 || p.window_right >= 0;
    for (int64_t r = 0; r < rows; ++r) rotary.rotate(q_tile.row(r), c.length + (rotate_per_row ? i0 + r : 0));

    const RowLayout k = cache_rows(p, p.k, p.head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, c, hk,
                                   c.leftpad);
    const RowLayout v = cache_rows(p, p.v, p.head_dim_v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, c, hk,
                                   c.leftpad);
    QueryBlock<Acc> block;
    block.attend(hs, q_tile, i0, k, v, Acc(1));  // no dropout at inference

    const RowLayout out = dense_rows(p.out, p.dtype, p.head_dim_v, p.out_batch_stride, p.out_row_stride,
                                     p.out_head_stride, b, 0, h);
    store_rows(out, p.out, i0, rows, block.out());
    if (p.softmax_lse)
        for (int64_t r = 0; r < rows; ++r)
            p.softmax_lse[b * p.lse_batch_stride + h * p.lse_head_stride + i0 + r] =
                static_cast<float>(block.lse()[static_cast<size_t>(r)]);
}

template <class Acc>
void kvcache_impl(const AttnParams& p) {
    append_new_rows(p);
    const int64_t q_blocks = blocks_of(p.seqlen_q, kQueryBlock);
    parallel_for(int64_t(p.batch) * p.nheads * q_blocks, [&](int64_t item) {
        const int64_t block = item % q_blocks, bh = item / q_blocks;
        attend_item<Acc>(p, bh / p.nheads, bh % p.nheads, block * kQueryBlock);
    });
}

}  // namespace

void kvcache_forward(const AttnParams& p, Accum acc) {
    if (acc == Accum::f64) kvcache_impl<double>(p);
    else kvcache_impl<float>(p);
}

}  // namespace flashattn::reference
