#include "reference/kvcache_problem.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <random>
#include <stdexcept>

#include "common/philox.h"

namespace flashattn::testing {

namespace {

constexpr int kSpareBlocks = 3;  // physical blocks no sequence uses: they must stay untouched
constexpr double kAlibiSlopeMin = 0.02, kAlibiSlopeMax = 0.3;

ElemType elem_type(DType d) {
    switch (d) {
        case DType::f16: return ElemType::f16;
        case DType::bf16: return ElemType::bf16;
        case DType::f32: return ElemType::f32;
        case DType::f64: return ElemType::f64;
        case DType::i32: break;
    }
    throw std::invalid_argument("not an attention dtype");
}

HostTensor int_tensor(const std::vector<int>& values) {
    HostTensor t(DType::i32, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
    return t;
}

}  // namespace

KvCacheProblem::KvCacheProblem(KvCacheConfig cfg) : cfg_(std::move(cfg)) {
    const int64_t b = cfg_.batch, bc = cfg_.batch_cache > 0 ? cfg_.batch_cache : cfg_.batch;
    const int64_t s = cfg_.seqlen_cache, hk = cfg_.nheads_k, d = cfg_.head_dim, dv = cfg_.dv();
    if (cfg_.paged() && (bc != b || !cfg_.cache_batch_idx.empty()))
        throw std::invalid_argument("a paged cache has no cache_batch_idx");

    // Everything a dense and a paged problem of one seed share is drawn first, in a fixed order, from one stream.
    std::mt19937_64 rng(cfg_.data_seed);
    q = HostTensor(cfg_.dtype, {b, cfg_.seqlen_q, cfg_.nheads, d});
    q.fill_normal(rng);
    HostTensor dense_k(cfg_.dtype, {bc, s, hk, d}), dense_v(cfg_.dtype, {bc, s, hk, dv});
    dense_k.fill_normal(rng);
    dense_v.fill_normal(rng);
    if (cfg_.seqlen_new > 0) {
        knew = HostTensor(cfg_.dtype, {b, cfg_.seqlen_new, hk, d});
        vnew = HostTensor(cfg_.dtype, {b, cfg_.seqlen_new, hk, dv});
        knew.fill_normal(rng);
        vnew.fill_normal(rng);
    }
    if (cfg_.rotary_dim > 0) {
        // One row per cache position, as FlashAttention's tests size them.
        rotary_cos = HostTensor(cfg_.dtype, {s, cfg_.rotary_dim / 2});
        rotary_sin = HostTensor(cfg_.dtype, {s, cfg_.rotary_dim / 2});
        std::uniform_real_distribution<double> angle(0.0, 2 * std::numbers::pi);
        for (int64_t i = 0; i < rotary_cos.numel(); ++i) {
            const double a = angle(rng);
            rotary_cos.set(i, std::cos(a));
            rotary_sin.set(i, std::sin(a));
        }
    }
    if (cfg_.alibi != Alibi::none) {
        alibi_slopes = cfg_.alibi == Alibi::per_head ? HostTensor(DType::f32, {cfg_.nheads})
                                                     : HostTensor(DType::f32, {b, cfg_.nheads});
        alibi_slopes.fill_uniform(rng, kAlibiSlopeMin, kAlibiSlopeMax);
    }
    if (!cfg_.cache_seqlens.empty()) cache_seqlens = int_tensor(cfg_.cache_seqlens);
    if (!cfg_.cache_leftpad.empty()) cache_leftpad = int_tensor(cfg_.cache_leftpad);
    if (!cfg_.cache_batch_idx.empty()) cache_batch_idx = int_tensor(cfg_.cache_batch_idx);

    if (cfg_.paged()) {
        // Sequence b's logical page n lives in physical block perm[b * blocks_per_seq + n]; spare blocks and the
        // tail of the last page hold unrelated data.
        std::mt19937_64 paging_rng(cfg_.data_seed + 1);
        blocks_per_seq = (s + cfg_.page_size - 1) / cfg_.page_size;
        const int64_t num_blocks = b * blocks_per_seq + kSpareBlocks;
        std::vector<int> perm(static_cast<size_t>(num_blocks));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), paging_rng);
        block_table = HostTensor(DType::i32, {b, blocks_per_seq});
        for (int64_t i = 0; i < block_table.numel(); ++i) block_table.set(i, perm[static_cast<size_t>(i)]);
        k_cache = HostTensor(cfg_.dtype, {num_blocks, cfg_.page_size, hk, d});
        v_cache = HostTensor(cfg_.dtype, {num_blocks, cfg_.page_size, hk, dv});
        k_cache.fill_normal(paging_rng);
        v_cache.fill_normal(paging_rng);
        for (int64_t seq = 0; seq < b; ++seq)
            for (int64_t pos = 0; pos < s; ++pos)
                for (int64_t h = 0; h < hk; ++h) {
                    for (int64_t c = 0; c < d; ++c)
                        k_cache.set(cache_offset(seq, pos, h, d) + c, dense_k.get(((seq * s + pos) * hk + h) * d + c));
                    for (int64_t c = 0; c < dv; ++c)
                        v_cache.set(cache_offset(seq, pos, h, dv) + c,
                                    dense_v.get(((seq * s + pos) * hk + h) * dv + c));
                }
    } else {
        k_cache = std::move(dense_k);
        v_cache = std::move(dense_v);
    }
    out = HostTensor(cfg_.dtype, {b, cfg_.seqlen_q, cfg_.nheads, dv});
    lse = HostTensor(DType::f32, {b, cfg_.nheads, cfg_.seqlen_q});
    out.poison();
    lse.poison();
}

int64_t KvCacheProblem::cache_length(int64_t b) const {
    return cfg_.cache_seqlens.empty() ? cfg_.cache_seqlen : cfg_.cache_seqlens[static_cast<size_t>(b)];
}

int64_t KvCacheProblem::cache_offset(int64_t b, int64_t pos, int64_t hk, int64_t dim) const {
    const int64_t row = cfg_.nheads_k * dim;  // one position: every kv head
    if (cfg_.paged()) {
        const int64_t block = static_cast<int64_t>(block_table.get(b * blocks_per_seq + pos / cfg_.page_size));
        return block * cfg_.page_size * row + (pos % cfg_.page_size) * row + hk * dim;
    }
    const int64_t entry = cfg_.cache_batch_idx.empty() ? b : cfg_.cache_batch_idx[static_cast<size_t>(b)];
    return entry * cfg_.seqlen_cache * row + pos * row + hk * dim;
}

AttnParams KvCacheProblem::params(HostTensor* k_cache_override, HostTensor* v_cache_override) {
    HostTensor& kc = k_cache_override ? *k_cache_override : k_cache;
    HostTensor& vc = v_cache_override ? *v_cache_override : v_cache;
    const int64_t h = cfg_.nheads, hk = cfg_.nheads_k, d = cfg_.head_dim, dv = cfg_.dv();
    const int64_t positions = cfg_.paged() ? cfg_.page_size : cfg_.seqlen_cache;  // rows per cache "batch" entry
    AttnParams p;
    p.op = OpKind::kvcache;
    p.dtype = elem_type(cfg_.dtype);
    p.batch = cfg_.batch;
    p.seqlen_q = cfg_.seqlen_q;
    p.seqlen_k = static_cast<int32_t>(cfg_.paged() ? blocks_per_seq * cfg_.page_size : cfg_.seqlen_cache);
    p.nheads = cfg_.nheads;
    p.nheads_k = cfg_.nheads_k;
    p.head_dim = cfg_.head_dim;
    p.head_dim_v = cfg_.dv();

    p.q = q.data();
    p.q_batch_stride = cfg_.seqlen_q * h * d;
    p.q_row_stride = h * d;
    p.q_head_stride = d;
    p.k = p.k_cache_mut = kc.data();
    p.v = p.v_cache_mut = vc.data();
    p.k_batch_stride = positions * hk * d;
    p.k_row_stride = hk * d;
    p.k_head_stride = d;
    p.v_batch_stride = positions * hk * dv;
    p.v_row_stride = hk * dv;
    p.v_head_stride = dv;
    p.out = out.data();
    p.out_batch_stride = cfg_.seqlen_q * h * dv;
    p.out_row_stride = h * dv;
    p.out_head_stride = dv;
    p.softmax_lse = static_cast<float*>(lse.data());
    p.lse_batch_stride = h * cfg_.seqlen_q;
    p.lse_head_stride = cfg_.seqlen_q;

    if (!cfg_.cache_seqlens.empty()) p.cache_seqlens = static_cast<const int32_t*>(cache_seqlens.data());
    p.cache_seqlen = cfg_.cache_seqlen;
    if (!cfg_.cache_leftpad.empty()) p.cache_leftpad = static_cast<const int32_t*>(cache_leftpad.data());
    if (!cfg_.cache_batch_idx.empty()) p.cache_batch_idx = static_cast<const int32_t*>(cache_batch_idx.data());
    if (cfg_.paged()) {
        p.block_table = static_cast<const int32_t*>(block_table.data());
        p.block_table_batch_stride = blocks_per_seq;
        p.page_size = cfg_.page_size;
        p.max_blocks_per_seq = static_cast<int32_t>(blocks_per_seq);
    }
    if (cfg_.seqlen_new > 0) {
        p.knew = knew.data();
        p.vnew = vnew.data();
        p.seqlen_new = cfg_.seqlen_new;
        p.knew_batch_stride = cfg_.seqlen_new * hk * d;
        p.knew_row_stride = hk * d;
        p.knew_head_stride = d;
        p.vnew_batch_stride = cfg_.seqlen_new * hk * dv;
        p.vnew_row_stride = hk * dv;
        p.vnew_head_stride = dv;
    }
    if (cfg_.rotary_dim > 0) {
        p.rotary_cos = rotary_cos.data();
        p.rotary_sin = rotary_sin.data();
        p.rotary_dim = cfg_.rotary_dim;
        p.seqlen_ro = cfg_.seqlen_cache;
        p.rotary_interleaved = cfg_.rotary_interleaved;
    }

    p.scale = 1.0f / std::sqrt(static_cast<float>(d));
    p.scale_log2 = p.scale * std::numbers::log2e_v<float>;
    p.softcap = cfg_.softcap;
    p.causal = cfg_.causal;
    p.window_left = cfg_.window_left;
    p.window_right = cfg_.causal ? 0 : cfg_.window_right;
    if (cfg_.alibi != Alibi::none) {
        p.alibi_slopes = static_cast<const float*>(alibi_slopes.data());
        p.alibi_batch_stride = cfg_.alibi == Alibi::per_batch_head ? cfg_.nheads : 0;
    }
    p.dropout_keep_threshold = kDropoutThresholdOne;
    p.dropout_scale = 1.0f;
    p.num_splits = 1;
    return p;
}

}  // namespace flashattn::testing
