// The reference kv-cache forward against the naive one: appending (rotated) rows in place, ragged lengths, cache
// entry indirection, left padding, rotary styles, and paging; the cache must change exactly where rows are appended.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "reference/closeness.h"
#include "reference/kvcache_problem.h"
#include "reference/naive_attention.h"
#include "reference/reference.h"
#include "reference/reference_checks.h"

namespace flashattn::testing {
namespace {

struct KvRun {
    std::vector<double> out, lse;
    HostTensor k_cache, v_cache;
};

// The reference on a fresh copy of the problem's cache, outputs poisoned first.
KvRun run_reference(KvCacheProblem& prob, reference::Accum acc) {
    KvRun run{{}, {}, prob.k_cache, prob.v_cache};
    prob.out.poison();
    prob.lse.poison();
    reference::kvcache_forward(prob.params(&run.k_cache, &run.v_cache), acc);
    run.out = values(prob.out);
    run.lse = values(prob.lse);
    return run;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Storage elements of the k (dim = head_dim) or v cache that appending writes.
std::set<int64_t> appended_elements(const KvCacheProblem& prob, int64_t dim) {
    std::set<int64_t> written;
    const KvCacheConfig& c = prob.cfg();
    for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t t = 0; t < c.seqlen_new; ++t)
            for (int64_t hk = 0; hk < c.nheads_k; ++hk)
                for (int64_t e = 0; e < dim; ++e)
                    written.insert(prob.cache_offset(b, prob.cache_length(b) + t, hk, dim) + e);
    return written;
}

// after equals before everywhere but at the appended elements.
::testing::AssertionResult unchanged_elsewhere(const HostTensor& before, const HostTensor& after,
                                               const std::set<int64_t>& written, const char* what) {
    for (int64_t i = 0; i < before.numel(); ++i)
        if (written.count(i) == 0 && before.get(i) != after.get(i))
            return ::testing::AssertionFailure() << what << ": element " << i << " changed but is not appended";
    return ::testing::AssertionSuccess();
}

// The appended rows of `cache` hold the new rows exactly (v always; k when it is not rotated).
::testing::AssertionResult holds_new_rows(const KvCacheProblem& prob, const HostTensor& cache,
                                          const HostTensor& rows, int64_t dim, const char* what) {
    const KvCacheConfig& c = prob.cfg();
    for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t t = 0; t < c.seqlen_new; ++t)
            for (int64_t hk = 0; hk < c.nheads_k; ++hk)
                for (int64_t e = 0; e < dim; ++e) {
                    const double want = rows.get(((b * c.seqlen_new + t) * c.nheads_k + hk) * dim + e);
                    const int64_t at = prob.cache_offset(b, prob.cache_length(b) + t, hk, dim) + e;
                    if (cache.get(at) != want)
                        return ::testing::AssertionFailure() << what << ": sequence " << b << " new row " << t
                                                             << " head " << hk << " not at its cache position";
                }
    return ::testing::AssertionSuccess();
}

void check_kvcache(const KvCacheConfig& cfg) {
    KvCacheProblem prob(cfg);
    HostTensor naive_k = prob.k_cache, naive_v = prob.v_cache;
    const naive::Result want = naive::kvcache_forward(prob.params(&naive_k, &naive_v));
    for (reference::Accum acc : kBothAccums) {
        SCOPED_TRACE(acc == reference::Accum::f32 ? "accum f32" : "accum f64");
        const KvRun got = run_reference(prob, acc);
        EXPECT_TRUE(fully_written(got.out, "out"));
        EXPECT_TRUE(fully_written(got.lse, "lse"));
        EXPECT_TRUE(all_close(got.out, want.out, output_tolerance(cfg.dtype, acc), "out"));
        EXPECT_TRUE(all_close(got.lse, want.lse, fp32_tolerance(acc), "lse"));
        // Appended rows are rotated in one fixed precision and rounded to the dtype: bit-identical to the naive.
        EXPECT_TRUE(same_bytes(got.k_cache, naive_k)) << "k cache after appending";
        EXPECT_TRUE(same_bytes(got.v_cache, naive_v)) << "v cache after appending";
        EXPECT_TRUE(unchanged_elsewhere(prob.k_cache, got.k_cache, appended_elements(prob, cfg.head_dim), "k cache"));
        EXPECT_TRUE(unchanged_elsewhere(prob.v_cache, got.v_cache, appended_elements(prob, cfg.dv()), "v cache"));
        if (cfg.seqlen_new > 0) {
            EXPECT_TRUE(holds_new_rows(prob, got.v_cache, prob.vnew, cfg.dv(), "v cache"));
            if (cfg.rotary_dim == 0) EXPECT_TRUE(holds_new_rows(prob, got.k_cache, prob.knew, cfg.head_dim, "k cache"));
        }
    }
}

KvCacheConfig decode(DType dtype = DType::f16) {
    KvCacheConfig c;
    c.dtype = dtype;
    c.batch = 4;
    c.seqlen_q = 4;
    c.seqlen_new = 4;
    c.seqlen_cache = 160;
    c.cache_seqlens = {0, 7, 64, 150};  // empty, short, a tile boundary, nearly full
    c.causal = true;
    return c;
}

TEST(ReferenceKvCache, Dtypes) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) check_kvcache(decode(dtype));
}

TEST(ReferenceKvCache, AttendWithoutAppending) {
    KvCacheConfig c = decode();
    c.seqlen_new = 0;
    c.seqlen_q = 1;
    c.causal = false;
    check_kvcache(c);  // the sequence with an empty cache sees nothing: out 0, LSE +inf
    c.cache_seqlens.clear();
    c.cache_seqlen = 77;  // one scalar length for every sequence
    check_kvcache(c);
}

TEST(ReferenceKvCache, RaggedLengthsAndQueryCounts) {
    for (auto [sq, added] : {std::pair{1, 1}, {6, 6}, {6, 2}, {2, 6}, {70, 3}}) {
        KvCacheConfig c = decode();
        c.seqlen_q = sq;
        c.seqlen_new = added;
        for (bool causal : {false, true}) {
            c.causal = causal;
            check_kvcache(c);
        }
    }
}

TEST(ReferenceKvCache, CacheBatchIndex) {
    KvCacheConfig c = decode();
    c.batch_cache = 7;
    c.cache_batch_idx = {5, 0, 3, 6};  // a permutation of a subset: entries 1, 2, 4 must stay untouched
    check_kvcache(c);
}

TEST(ReferenceKvCache, Rotary) {
    for (bool interleaved : {true, false})
        for (int rotary_dim : {32, 64})
            for (bool causal : {false, true}) {
                // Causal: query row i rotates at cache_len + i; otherwise every row at cache_len.
                KvCacheConfig c = decode();
                c.rotary_dim = rotary_dim;
                c.rotary_interleaved = interleaved;
                c.causal = causal;
                c.seqlen_q = 5;
                c.seqlen_new = 5;
                SCOPED_TRACE(::testing::Message() << "interleaved=" << interleaved << " rotary_dim=" << rotary_dim
                                                << " causal=" << causal);
                check_kvcache(c);
            }
}

TEST(ReferenceKvCache, RotaryWithWindow) {
    // A window alone (not causal) also rotates the queries row by row.
    KvCacheConfig c = decode();
    c.causal = false;
    c.window_left = 10;
    c.window_right = 2;
    c.rotary_dim = 48;
    check_kvcache(c);
}

TEST(ReferenceKvCache, LeftPadding) {
    KvCacheConfig c = decode();
    c.cache_seqlens = {10, 40, 100, 151};
    c.cache_leftpad = {0, 3, 99, 60};  // one sequence keeps a single old key
    check_kvcache(c);
    c.rotary_dim = 32;
    c.rotary_interleaved = false;
    c.alibi = Alibi::per_batch_head;
    check_kvcache(c);
    c.page_size = 16;
    check_kvcache(c);
}

TEST(ReferenceKvCache, Paged) {
    for (int page_size : {16, 64}) {
        KvCacheConfig c = decode();
        c.page_size = page_size;
        c.rotary_dim = 32;
        check_kvcache(c);
    }
}

TEST(ReferenceKvCache, AppendAtPageBoundaries) {
    KvCacheConfig c = decode();
    c.page_size = 16;
    c.seqlen_new = 3;
    c.seqlen_q = 3;
    // Fills a page to its last row, starts a fresh page, crosses into the next page, starts at 0.
    c.cache_seqlens = {13, 16, 31, 0};
    check_kvcache(c);
}

TEST(ReferenceKvCache, PagedMatchesDense) {
    KvCacheConfig dense = decode();
    dense.rotary_dim = 64;
    dense.softcap = 20.0f;
    KvCacheConfig paged = dense;
    paged.page_size = 32;
    KvCacheProblem a(dense), b(paged);
    for (reference::Accum acc : kBothAccums) {
        const KvRun d = run_reference(a, acc), p = run_reference(b, acc);
        // The same keys in the same order: bit-identical results.
        EXPECT_EQ(d.out, p.out);
        EXPECT_EQ(d.lse, p.lse);
        for (int64_t s = 0; s < dense.batch; ++s)
            for (int64_t pos = 0; pos < dense.seqlen_cache; ++pos)
                for (int64_t hk = 0; hk < dense.nheads_k; ++hk)
                    for (int64_t e = 0; e < dense.head_dim; ++e)
                        ASSERT_EQ(d.k_cache.get(a.cache_offset(s, pos, hk, dense.head_dim) + e),
                                  p.k_cache.get(b.cache_offset(s, pos, hk, dense.head_dim) + e))
                            << "sequence " << s << " position " << pos;
    }
}

TEST(ReferenceKvCache, MasksAndModifiers) {
    KvCacheConfig c = decode(DType::bf16);
    c.seqlen_q = 9;
    c.seqlen_new = 9;
    c.causal = false;
    c.window_left = 20;
    c.window_right = 3;
    c.softcap = 15.0f;
    c.alibi = Alibi::per_head;
    check_kvcache(c);
}

TEST(ReferenceKvCache, HeadsAndDims) {
    for (auto [h, hk, d, dv] : {std::tuple{4, 4, 64, 64}, {8, 1, 64, 64}, {6, 2, 72, 40}, {4, 2, 256, 256}}) {
        KvCacheConfig c = decode();
        c.nheads = h;
        c.nheads_k = hk;
        c.head_dim = d;
        c.head_dim_v = dv;
        c.rotary_dim = 32;
        check_kvcache(c);
    }
}

}  // namespace
}  // namespace flashattn::testing
