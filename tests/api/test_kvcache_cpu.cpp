// End-to-end kv-cache calls on CPU tensors: appends land where they should, and attention over the cache equals
// a plain forward over the same keys.
#include <gtest/gtest.h>

#include <cstring>

#include "api/api_fixtures.h"

namespace flashattn::testing {
namespace {

// Element (position, head, d) of sequence b's cache, through the block table when paged.
int64_t cache_index(const KvCacheProblem& p, int64_t b, int64_t pos, int64_t hk, int64_t d, int64_t dim) {
    if (p.page_size > 0) {
        const int64_t pages = p.capacity / p.page_size;
        const int64_t block = static_cast<int64_t>(p.block_table.get(b * pages + pos / p.page_size));
        return ((block * p.page_size + pos % p.page_size) * p.nheads_k + hk) * dim + d;
    }
    return ((b * p.capacity + pos) * p.nheads_k + hk) * dim + d;
}

void expect_appended(const KvCacheProblem& p, const HostTensor& k_before, const std::vector<int32_t>& lens) {
    for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t pos = 0; pos < p.capacity; ++pos)
            for (int64_t hk = 0; hk < p.nheads_k; ++hk)
                for (int64_t d = 0; d < p.head_dim; ++d) {
                    const int64_t at = cache_index(p, b, pos, hk, d, p.head_dim);
                    const int64_t t = pos - lens[b];
                    if (t >= 0 && t < p.seqlen_new)
                        EXPECT_EQ(p.k_cache.get(at), p.knew.get(((b * p.seqlen_new + t) * p.nheads_k + hk) * p.head_dim + d));
                    else
                        EXPECT_EQ(p.k_cache.get(at), k_before.get(at)) << "b " << b << " pos " << pos;
                }
}

// out of sequence b equals a forward over its cache positions [0, lens[b] + seqlen_new).
void expect_matches_forward(KvCacheProblem& p, const std::vector<int32_t>& lens, bool causal) {
    for (int64_t b = 0; b < p.batch; ++b) {
        const int64_t sk = lens[b] + p.seqlen_new;
        DenseProblem f(DenseShape{1, p.seqlen_q, sk, p.nheads, p.nheads_k, p.head_dim, p.head_dim_v});
        for (int64_t i = 0; i < f.q.numel(); ++i) f.q.set(i, p.q.get(b * f.q.numel() + i));
        for (int64_t j = 0; j < sk; ++j)
            for (int64_t hk = 0; hk < p.nheads_k; ++hk) {
                for (int64_t d = 0; d < p.head_dim; ++d)
                    f.k.set((j * p.nheads_k + hk) * p.head_dim + d, p.k_cache.get(cache_index(p, b, j, hk, d, p.head_dim)));
                for (int64_t d = 0; d < p.head_dim_v; ++d)
                    f.v.set((j * p.nheads_k + hk) * p.head_dim_v + d, p.v_cache.get(cache_index(p, b, j, hk, d, p.head_dim_v)));
            }
        ForwardArgs a = f.forward_args();
        a.options.causal = causal;
        forward(a);
        for (int64_t i = 0; i < f.out.numel(); ++i)
            EXPECT_NEAR(p.out.get(b * f.out.numel() + i), f.out.get(i), 1e-5) << "sequence " << b;
    }
}

TEST(ApiKvCache, AppendsIntoDenseCache) {
    const std::vector<int32_t> lens = {3, 10};
    KvCacheProblem p(lens);
    const HostTensor before = p.k_cache;
    KvCacheArgs a = p.args();
    a.options.causal = true;
    kvcache_forward(a);
    expect_appended(p, before, lens);
    expect_matches_forward(p, lens, true);
}

TEST(ApiKvCache, AppendsIntoPagedCache) {
    const std::vector<int32_t> lens = {15, 4};  // sequence 0's new keys straddle a page boundary
    KvCacheProblem p(lens, 16);
    const HostTensor before = p.k_cache;
    kvcache_forward(p.args());
    expect_appended(p, before, lens);
    expect_matches_forward(p, lens, false);
}

TEST(ApiKvCache, WithoutNewKeysTheCacheIsOnlyRead) {
    const std::vector<int32_t> lens = {7, 20};
    KvCacheProblem p(lens);
    const HostTensor before = p.k_cache;
    kvcache_forward(p.args(/*with_new=*/false));
    EXPECT_EQ(std::memcmp(before.data(), p.k_cache.data(), before.nbytes()), 0);
    p.seqlen_new = 0;  // compare against a forward over the cached keys only
    expect_matches_forward(p, lens, false);
}

TEST(ApiKvCache, IdentityRotaryChangesNothing) {
    const std::vector<int32_t> lens = {3, 5};
    KvCacheProblem plain(lens), rotated(lens);
    HostTensor cos(DType::f32, {16, 8}), sin(DType::f32, {16, 8});
    for (int64_t i = 0; i < cos.numel(); ++i) {
        cos.set(i, 1.0);
        sin.set(i, 0.0);
    }
    kvcache_forward(plain.args());
    KvCacheArgs a = rotated.args();
    a.rotary_cos = cos.view();
    a.rotary_sin = sin.view();
    kvcache_forward(a);
    for (int64_t i = 0; i < plain.out.numel(); ++i) EXPECT_EQ(plain.out.get(i), rotated.out.get(i));
}

TEST(ApiKvCache, CacheBatchIdxSelectsEntries) {
    const std::vector<int32_t> lens = {4, 4};
    KvCacheProblem p(lens), swapped(lens);
    // swapped's cache holds p's entries in the opposite order; cache_batch_idx undoes it.
    const int64_t entry = p.capacity * p.nheads_k * p.head_dim;
    for (int64_t i = 0; i < entry; ++i) {
        swapped.k_cache.set(i, p.k_cache.get(entry + i));
        swapped.k_cache.set(entry + i, p.k_cache.get(i));
        swapped.v_cache.set(i, p.v_cache.get(entry + i));
        swapped.v_cache.set(entry + i, p.v_cache.get(i));
    }
    HostTensor idx(DType::i32, {2});
    idx.set(0, 1);
    idx.set(1, 0);
    kvcache_forward(p.args(false));
    KvCacheArgs a = swapped.args(false);
    a.cache_batch_idx = idx.view();
    kvcache_forward(a);
    for (int64_t i = 0; i < p.out.numel(); ++i) EXPECT_EQ(p.out.get(i), swapped.out.get(i));
}

}  // namespace
}  // namespace flashattn::testing
