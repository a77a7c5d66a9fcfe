// The reference kv-cache forward: rotate and append the new keys/values into the cache in place, rotate the
// queries, then attend over the cache.
//
// Positions are absolute cache positions, also with a left padding: the new key t of sequence b goes to (and is
// rotated at) position cache_seqlens[b] + t; the keys attended to are positions [leftpad[b], cache_seqlens[b] +
// seqlen_new), so key column j is position leftpad[b] + j and causal/window masks align to the last of them.
// This follows FlashAttention's kv-cache kernels, whose rotary tables are indexed by the absolute position.
#include <cstdint>
#include <vector>

#include "reference/attend.h"
#include "reference/element_access.h"
#include "reference/reference.h"
#include "reference/thread_pool.h"

namespace flashattn::reference {

namespace {

struct CacheSeq {
    int64_t entry = 0;      // dense cache: the batch entry the sequence uses
    int64_t length = 0;     // cache_seqlens[b]: keys in the cache before appending
    int64_t leftpad = 0;    // first valid position
};

CacheSeq cache_seq(const AttnParams& p, int b) {
    CacheSeq c;
    c.entry = p.cache_batch_idx ? p.cache_batch_idx[b] : b;
    c.length = p.cache_seqlens ? p.cache_seqlens[b] : p.cache_seqlen;
    c.leftpad = p.cache_leftpad ? p.cache_leftpad[b] : 0;
    return c;
}

// Offset of (sequence b, cache position pos, kv head hk) in a cache with the given strides, through the block
// table when the cache is paged.
int64_t cache_offset(const AttnParams& p, int b, const CacheSeq& c, int64_t pos, int hk, int64_t batch_stride,
                     int64_t row_stride, int64_t head_stride) {
    if (p.block_table) {
        const int64_t block = p.block_table[b * p.block_table_batch_stride + pos / p.page_size];
        return block * batch_stride + (pos % p.page_size) * row_stride + hk * head_stride;
    }
    return c.entry * batch_stride + pos * row_stride + hk * head_stride;
}

// Rotate the first rotary_dim channels of x (in place) at position pos, rounding to the dtype as stored.
template <class Acc>
void rotate(const AttnParams& p, Acc* x, int64_t pos) {
    if (p.rotary_dim == 0) return;
    const int64_t half = p.rotary_dim / 2;
    for (int64_t c = 0; c < half; ++c) {
        const Acc cs = static_cast<Acc>(read_elem(p.dtype, p.rotary_cos, pos * half + c));
        const Acc sn = static_cast<Acc>(read_elem(p.dtype, p.rotary_sin, pos * half + c));
        // GPT-J style pairs neighbours (2c, 2c+1); GPT-NeoX style pairs the halves (c, c + rotary_dim/2).
        const int64_t i0 = p.rotary_interleaved ? 2 * c : c;
        const int64_t i1 = p.rotary_interleaved ? 2 * c + 1 : c + half;
        const Acc x0 = x[i0], x1 = x[i1];
        x[i0] = static_cast<Acc>(round_to(p.dtype, x0 * cs - x1 * sn));
        x[i1] = static_cast<Acc>(round_to(p.dtype, x0 * sn + x1 * cs));
    }
}

template <class Acc>
void append_new_keys(const AttnParams& p) {
    if (!p.knew) return;
    // Sequences write disjoint cache positions (validated), but appends are cheap: run them in order.
    std::vector<Acc> row(static_cast<size_t>(std::max(p.head_dim, p.head_dim_v)));
    for (int b = 0; b < p.batch; ++b) {
        const CacheSeq c = cache_seq(p, b);
        for (int64_t t = 0; t < p.seqlen_new; ++t) {
            const int64_t pos = c.length + t;
            for (int hk = 0; hk < p.nheads_k; ++hk) {
                const int64_t ko = row_offset(p.knew_batch_stride, p.knew_row_stride, p.knew_head_stride, b, t, hk);
                for (int64_t d = 0; d < p.head_dim; ++d) row[d] = static_cast<Acc>(read_elem(p.dtype, p.knew, ko + d));
                rotate(p, row.data(), pos);
                const int64_t kc = cache_offset(p, b, c, pos, hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
                for (int64_t d = 0; d < p.head_dim; ++d) write_elem(p.dtype, p.k_cache_mut, kc + d, row[d]);
                const int64_t vo = row_offset(p.vnew_batch_stride, p.vnew_row_stride, p.vnew_head_stride, b, t, hk);
                const int64_t vc = cache_offset(p, b, c, pos, hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
                for (int64_t d = 0; d < p.head_dim_v; ++d)
                    write_elem(p.dtype, p.v_cache_mut, vc + d, read_elem(p.dtype, p.vnew, vo + d));
            }
        }
    }
}

template <class Acc>
void kvcache_impl(const AttnParams& p) {
    append_new_keys<Acc>(p);
    const int group = p.nheads / p.nheads_k;
    const bool rotate_q_per_row = p.window_left >= 0 || p.window_right >= 0;  // causal or local
    parallel_for(int64_t(p.batch) * p.nheads, [&](int64_t item) {
        const int b = static_cast<int>(item / p.nheads), h = static_cast<int>(item % p.nheads), hk = h / group;
        const CacheSeq c = cache_seq(p, b);
        HeadContext hc;
        hc.seqlen_q = p.seqlen_q;
        hc.seqlen_k = c.length + p.seqlen_new - c.leftpad;
        hc.alibi_slope = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.0;
        hc.batch_head = static_cast<uint32_t>(b) * static_cast<uint32_t>(p.nheads) + static_cast<uint32_t>(h);

        Rows<Acc> q, k, v, out;
        load_rows(q, p.dtype, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, h, 0, p.seqlen_q, p.head_dim);
        for (int64_t i = 0; i < p.seqlen_q; ++i) rotate(p, q.row(i), c.length + (rotate_q_per_row ? i : 0));
        k.resize(hc.seqlen_k, p.head_dim);
        v.resize(hc.seqlen_k, p.head_dim_v);
        for (int64_t j = 0; j < hc.seqlen_k; ++j) {
            const int64_t pos = c.leftpad + j;
            const int64_t ko = cache_offset(p, b, c, pos, hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
            const int64_t vo = cache_offset(p, b, c, pos, hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
            for (int64_t d = 0; d < p.head_dim; ++d) k.row(j)[d] = static_cast<Acc>(read_elem(p.dtype, p.k, ko + d));
            for (int64_t d = 0; d < p.head_dim_v; ++d) v.row(j)[d] = static_cast<Acc>(read_elem(p.dtype, p.v, vo + d));
        }
        std::vector<Acc> lse;
        attend_head(p, hc, q, k, v, out, lse);
        for (int64_t i = 0; i < p.seqlen_q; ++i) {
            const int64_t off = row_offset(p.out_batch_stride, p.out_row_stride, p.out_head_stride, b, i, h);
            for (int64_t d = 0; d < p.head_dim_v; ++d) write_elem(p.dtype, p.out, off + d, out.row(i)[d]);
            if (p.softmax_lse)
                p.softmax_lse[b * p.lse_batch_stride + h * p.lse_head_stride + i] =
                    static_cast<float>(lse[static_cast<size_t>(i)]);
        }
    });
}

}  // namespace

void kvcache_forward(const AttnParams& p, Accum acc) {
    if (acc == Accum::f64) kvcache_impl<double>(p);
    else kvcache_impl<float>(p);
}

}  // namespace flashattn::reference
