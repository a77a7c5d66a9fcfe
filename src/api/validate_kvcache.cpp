// Validation of the kv-cache forward. Index tensors (cache_seqlens, cache_batch_idx, cache_leftpad, block_table) are
// read when they live on the CPU; on a GPU they are trusted.
#include <algorithm>
#include <string>
#include <vector>

#include "api/validate.h"
#include "api/window.h"

namespace flashattn::api {

namespace {

// Pages of a paged cache: whole multiples of this many rows.
constexpr int64_t kPageSizeMultiple = 16;

std::string at(const char* name, int64_t b) { return std::string(name) + "[" + std::to_string(b) + "]"; }

// The cache's geometry: dense (batch_cache, seqlen_cache, nheads_k, d) or paged (num_blocks, page_size, nheads_k, d).
void read_cache_shapes(AttnDims& d, const KvCacheArgs& a) {
    d.paged = a.block_table.present();
    if (d.paged) {
        expect_shape(a.block_table, "block_table", {{"batch", d.batch}, {"max_blocks_per_seq"}});
        d.max_blocks_per_seq = a.block_table.shape[1];
        expect_shape(a.k_cache, "k_cache", {{"num_blocks"}, {"page_size"}, {"nheads_k"}, {"head_dim", d.head_dim}});
        d.batch_cache = a.k_cache.shape[0];
        d.page_size = a.k_cache.shape[1];
        if (d.page_size < kPageSizeMultiple || d.page_size % kPageSizeMultiple != 0)
            fail("k_cache: expected page_size (dimension 1 of a paged cache) a multiple of " +
                 std::to_string(kPageSizeMultiple) + " and >= " + std::to_string(kPageSizeMultiple) + ", got " +
                 std::to_string(d.page_size));
        d.seqlen_k = d.max_blocks_per_seq * d.page_size;
        if (d.seqlen_k > kMaxSize)
            fail("block_table: expected max_blocks_per_seq * page_size <= " + std::to_string(kMaxSize) + " (int32), got " +
                 std::to_string(d.max_blocks_per_seq) + " * " + std::to_string(d.page_size));
        if (a.cache_batch_idx.present())
            fail("cache_batch_idx: expected absent with a paged cache (block_table maps sequences to blocks), got a "
                 "tensor of shape " + shape_str(a.cache_batch_idx));
    } else {
        expect_shape(a.k_cache, "k_cache", {{"batch_cache"}, {"seqlen_cache"}, {"nheads_k"}, {"head_dim", d.head_dim}});
        d.batch_cache = a.k_cache.shape[0];
        d.seqlen_k = a.k_cache.shape[1];
        if (!a.cache_batch_idx.present() && d.batch_cache < d.batch)
            fail("k_cache: expected batch_cache >= batch = " + std::to_string(d.batch) +
                 " (sequence b uses cache entry b when cache_batch_idx is absent), got " + shape_str(a.k_cache));
    }
    d.nheads_k = a.k_cache.shape[2];
    check_head_groups(d.nheads, d.nheads_k, "k_cache");
    const char* outer = d.paged ? "num_blocks" : "batch_cache";
    const char* rows = d.paged ? "page_size" : "seqlen_cache";
    expect_shape(a.v_cache, "v_cache", {{outer, d.batch_cache}, {rows, a.k_cache.shape[1]}, {"nheads_k", d.nheads_k}, {"head_dim_v"}});
    d.head_dim_v = a.v_cache.shape[3];
    check_head_dim(d.head_dim_v, "v_cache", "head_dim_v");
}

void read_new_kv_shapes(AttnDims& d, const KvCacheArgs& a) {
    if (a.k.present() != a.v.present())
        fail(std::string(a.k.present() ? "v" : "k") + ": expected k and v both given (to append) or both absent, got " +
             (a.k.present() ? "k without v" : "v without k"));
    if (!a.k.present()) return;
    expect_shape(a.k, "k", {{"batch", d.batch}, {"seqlen_new"}, {"nheads_k", d.nheads_k}, {"head_dim", d.head_dim}});
    d.seqlen_new = a.k.shape[1];
    expect_shape(a.v, "v", {{"batch", d.batch}, {"seqlen_new", d.seqlen_new}, {"nheads_k", d.nheads_k}, {"head_dim_v", d.head_dim_v}});
}

void read_rotary_shapes(AttnDims& d, const KvCacheArgs& a) {
    if (a.rotary_cos.present() != a.rotary_sin.present())
        fail(std::string(a.rotary_cos.present() ? "rotary_sin" : "rotary_cos") +
             ": expected rotary_cos and rotary_sin both given or both absent, got only " +
             (a.rotary_cos.present() ? "rotary_cos" : "rotary_sin"));
    if (!a.rotary_cos.present()) return;
    expect_shape(a.rotary_cos, "rotary_cos", {{"seqlen_ro"}, {"rotary_dim / 2"}});
    d.seqlen_ro = a.rotary_cos.shape[0];
    d.rotary_dim = 2 * a.rotary_cos.shape[1];
    expect_shape(a.rotary_sin, "rotary_sin", {{"seqlen_ro", d.seqlen_ro}, {"rotary_dim / 2", d.rotary_dim / 2}});
    if (d.rotary_dim == 0 || d.rotary_dim > d.head_dim)
        fail("rotary_cos: expected rotary_dim = 2 * shape[1] in [2, head_dim = " + std::to_string(d.head_dim) +
             "], got rotary_dim " + std::to_string(d.rotary_dim));
}

// The scalar cache length: -1 is the whole cache; with new keys, room must be left for them.
void check_scalar_cache_seqlen(AttnDims& d, const KvCacheArgs& a) {
    if (a.cache_seqlens.present()) {
        d.cache_seqlen = 0;  // unused: every sequence has its own length
        return;
    }
    if (a.cache_seqlen < -1 || a.cache_seqlen > d.seqlen_k)
        fail("cache_seqlen: expected -1 (the whole cache) or a length in [0, " + std::to_string(d.seqlen_k) +
             "] (the cache capacity), got " + std::to_string(a.cache_seqlen));
    d.cache_seqlen = a.cache_seqlen < 0 ? d.seqlen_k : a.cache_seqlen;
    if (d.cache_seqlen + d.seqlen_new > d.seqlen_k)
        fail("cache_seqlen: expected cache_seqlen + seqlen_new <= the cache capacity " + std::to_string(d.seqlen_k) +
             ", got " + std::to_string(d.cache_seqlen) + " + " + std::to_string(d.seqlen_new) +
             (a.cache_seqlen < 0 ? " (-1 means the whole cache is filled: give the filled length)" : ""));
}

// Where the rotary tables are read: new key t of sequence b at cache_seqlens[b] + t; query row i at
// cache_seqlens[b] + i when the mask is causal or local, else at cache_seqlens[b].
int64_t rotary_positions_needed(const AttnDims& d, int64_t cache_len, bool q_per_row) {
    int64_t need = cache_len + d.seqlen_new;
    if (d.seqlen_q > 0) need = std::max(need, cache_len + (q_per_row ? d.seqlen_q : 1));
    return need;
}

// Per-sequence values of the host index tensors.
void check_host_cache_index(const AttnDims& d, const KvCacheArgs& a, bool q_per_row) {
    std::vector<int32_t> lens(static_cast<size_t>(d.batch), static_cast<int32_t>(d.cache_seqlen));
    if (a.cache_seqlens.present()) lens = host_values(a.cache_seqlens);
    const std::vector<int32_t> leftpad = a.cache_leftpad.present() ? host_values(a.cache_leftpad)
                                                                   : std::vector<int32_t>(static_cast<size_t>(d.batch), 0);
    const std::vector<int32_t> entry = a.cache_batch_idx.present() ? host_values(a.cache_batch_idx) : std::vector<int32_t>();
    const std::vector<int32_t> table = d.paged ? host_values(a.block_table) : std::vector<int32_t>();
    int64_t rotary_need = 0;
    for (int64_t b = 0; b < d.batch; ++b) {
        const int64_t len = lens[b];
        if (a.cache_seqlens.present() && (len < 0 || len + d.seqlen_new > d.seqlen_k))
            fail("cache_seqlens: expected 0 <= cache_seqlens[b] and cache_seqlens[b] + seqlen_new <= the cache capacity " +
                 std::to_string(d.seqlen_k) + ", got " + at("cache_seqlens", b) + " = " + std::to_string(len) +
                 " with seqlen_new " + std::to_string(d.seqlen_new));
        if (leftpad[b] < 0 || leftpad[b] > len)
            fail("cache_leftpad: expected 0 <= cache_leftpad[b] <= cache_seqlens[b], got " + at("cache_leftpad", b) +
                 " = " + std::to_string(leftpad[b]) + " with cache length " + std::to_string(len));
        if (!entry.empty() && (entry[b] < 0 || entry[b] >= d.batch_cache))
            fail("cache_batch_idx: expected entries in [0, batch_cache = " + std::to_string(d.batch_cache) + "), got " +
                 at("cache_batch_idx", b) + " = " + std::to_string(entry[b]));
        // Pages holding the keys the sequence reads, [leftpad, len + seqlen_new); the rest of its row is not read.
        const int64_t end = len + d.seqlen_new;
        if (d.paged && end > leftpad[b])
            for (int64_t page = leftpad[b] / d.page_size; page <= (end - 1) / d.page_size; ++page) {
                const int32_t block = table[b * d.max_blocks_per_seq + page];
                if (block < 0 || block >= d.batch_cache)
                    fail("block_table: expected block ids in [0, num_blocks = " + std::to_string(d.batch_cache) +
                         ") for the pages sequence b uses, got block_table[" + std::to_string(b) + "][" +
                         std::to_string(page) + "] = " + std::to_string(block));
            }
        rotary_need = std::max(rotary_need, rotary_positions_needed(d, len, q_per_row));
    }
    if (d.rotary_dim > 0 && d.seqlen_ro < rotary_need)
        fail("rotary_cos: expected seqlen_ro >= " + std::to_string(rotary_need) +
             " (the positions rotated: cache_seqlens[b] + seqlen_new for new keys, + seqlen_q for queries when "
             "causal or local), got " + std::to_string(d.seqlen_ro));

    // Appends: no two sequences may write the same cache slot (their results would depend on the order).
    if (d.seqlen_new == 0) return;
    std::vector<std::pair<int64_t, int64_t>> slots;  // (slot, sequence)
    slots.reserve(static_cast<size_t>(d.batch * d.seqlen_new));
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t pos = lens[b]; pos < lens[b] + d.seqlen_new; ++pos) {
            const int64_t slot = d.paged ? int64_t(table[b * d.max_blocks_per_seq + pos / d.page_size]) * d.page_size +
                                               pos % d.page_size
                                         : (entry.empty() ? b : entry[b]) * d.seqlen_k + pos;
            slots.emplace_back(slot, b);
        }
    std::sort(slots.begin(), slots.end());
    for (size_t i = 1; i < slots.size(); ++i)
        if (slots[i].first == slots[i - 1].first)
            fail(std::string(d.paged ? "block_table" : "cache_batch_idx") +
                 ": expected every appended key to get its own cache slot, got sequences " +
                 std::to_string(slots[i - 1].second) + " and " + std::to_string(slots[i].second) +
                 " both appending to the same " + (d.paged ? "block" : "cache entry"));
}

}  // namespace

AttnDims validate(const KvCacheArgs& a) {
    for (const NamedView& t : {NamedView{"q", &a.q}, NamedView{"k_cache", &a.k_cache}, NamedView{"v_cache", &a.v_cache},
                               NamedView{"out", &a.out}})
        expect_present(*t.view, t.name);
    AttnDims d;
    d.where = check_devices({{"q", &a.q}, {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}, {"k", &a.k}, {"v", &a.v},
                             {"rotary_cos", &a.rotary_cos}, {"rotary_sin", &a.rotary_sin},
                             {"cache_seqlens", &a.cache_seqlens}, {"cache_batch_idx", &a.cache_batch_idx},
                             {"cache_leftpad", &a.cache_leftpad}, {"block_table", &a.block_table}, {"out", &a.out},
                             {"softmax_lse", &a.softmax_lse}, {"options.alibi_slopes", &a.options.alibi_slopes}});
    d.dtype = check_data_dtype(a.q, "q", d.where);

    expect_shape(a.q, "q", {{"batch"}, {"seqlen_q"}, {"nheads"}, {"head_dim"}});
    d.batch = a.q.shape[0];
    d.seqlen_q = a.q.shape[1];
    d.nheads = a.q.shape[2];
    d.head_dim = a.q.shape[3];
    check_head_dim(d.head_dim, "q", "head_dim");
    read_cache_shapes(d, a);
    read_new_kv_shapes(d, a);
    read_rotary_shapes(d, a);
    for (const NamedView& t : {NamedView{"cache_seqlens", &a.cache_seqlens}, NamedView{"cache_batch_idx", &a.cache_batch_idx},
                               NamedView{"cache_leftpad", &a.cache_leftpad}})
        if (t.view->present()) expect_shape(*t.view, t.name, {{"batch", d.batch}});
    expect_shape(a.out, "out", {{"batch", d.batch}, {"seqlen_q", d.seqlen_q}, {"nheads", d.nheads}, {"head_dim_v", d.head_dim_v}});
    if (a.softmax_lse.present())
        expect_shape(a.softmax_lse, "softmax_lse", {{"batch", d.batch}, {"nheads", d.nheads}, {"seqlen_q", d.seqlen_q}});

    for (const NamedView& t : {NamedView{"q", &a.q}, NamedView{"k_cache", &a.k_cache}, NamedView{"v_cache", &a.v_cache},
                               NamedView{"k", &a.k}, NamedView{"v", &a.v}, NamedView{"out", &a.out}})
        if (t.view->present()) check_data_tensor(*t.view, t.name, d.dtype, d.where);
    for (const NamedView& t : {NamedView{"rotary_cos", &a.rotary_cos}, NamedView{"rotary_sin", &a.rotary_sin}})
        if (t.view->present()) {
            if (t.view->dtype != d.dtype)
                fail(std::string(t.name) + ": expected dtype " + dtype_name(d.dtype) + " (the dtype of q), got " +
                     dtype_name(t.view->dtype));
            expect_layout(*t.view, t.name, Layout::contiguous);
        }
    for (const NamedView& t : {NamedView{"cache_seqlens", &a.cache_seqlens}, NamedView{"cache_batch_idx", &a.cache_batch_idx},
                               NamedView{"cache_leftpad", &a.cache_leftpad}})
        if (t.view->present()) check_index_tensor(*t.view, t.name);
    if (d.paged) check_index_tensor(a.block_table, "block_table", Layout::last_dim);
    if (a.softmax_lse.present()) check_stat_tensor(a.softmax_lse, "softmax_lse");
    if (a.num_splits < 0)
        fail("num_splits: expected 0 (chosen by a heuristic) or a count >= 1, got " + std::to_string(a.num_splits));

    check_options(a.options, d, /*allow_dropout=*/false);
    check_scalar_cache_seqlen(d, a);
    const bool q_per_row = normalized_window(a.options, d.seqlen_k).bounded();
    if (d.where.on_cpu()) {
        check_host_cache_index(d, a, q_per_row);
    } else if (d.rotary_dim > 0) {
        // Lengths are known only for the scalar cache_seqlen; with device cache_seqlens the table must cover the
        // whole cache, as FlashAttention asks.
        // Any length up to capacity - seqlen_new is possible: the positions the longest of them rotates.
        const int64_t need = a.cache_seqlens.present()
                                 ? std::max<int64_t>(d.seqlen_k, rotary_positions_needed(d, d.seqlen_k - d.seqlen_new,
                                                                                         q_per_row))
                                 : rotary_positions_needed(d, d.cache_seqlen, q_per_row);
        if (d.seqlen_ro < need)
            fail("rotary_cos: expected seqlen_ro >= " + std::to_string(need) +
                 (a.cache_seqlens.present() ? " (every position a cache of this capacity can rotate: cache_seqlens on the GPU can't be checked)"
                                            : " (the positions rotated)") +
                 ", got " + std::to_string(d.seqlen_ro));
    }

    // With new keys the caches are written too: outputs, then, rather than inputs.
    static const TensorView kAbsent;
    const bool appends = a.k.present();
    const TensorView* k_cache_out = appends ? &a.k_cache : &kAbsent;
    const TensorView* v_cache_out = appends ? &a.v_cache : &kAbsent;
    const TensorView* k_cache_in = appends ? &kAbsent : &a.k_cache;
    const TensorView* v_cache_in = appends ? &kAbsent : &a.v_cache;
    check_no_aliasing({{"out", &a.out}, {"softmax_lse", &a.softmax_lse}, {"k_cache", k_cache_out}, {"v_cache", v_cache_out}},
                      {{"q", &a.q}, {"k_cache", k_cache_in}, {"v_cache", v_cache_in}, {"k", &a.k}, {"v", &a.v},
                       {"rotary_cos", &a.rotary_cos}, {"rotary_sin", &a.rotary_sin}, {"cache_seqlens", &a.cache_seqlens},
                       {"cache_batch_idx", &a.cache_batch_idx}, {"cache_leftpad", &a.cache_leftpad},
                       {"block_table", &a.block_table}, {"options.alibi_slopes", &a.options.alibi_slopes}});
    return d;
}

}  // namespace flashattn::api
