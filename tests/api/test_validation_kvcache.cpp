// Validation of the kv-cache forward: dense and paged caches, cache lengths, new keys, rotary tables.
#include <gtest/gtest.h>

#include <cstring>

#include "api/api_fixtures.h"
#include "api/validate.h"

namespace flashattn::testing {
namespace {

// The cache bytes before a call, to check that a rejected call appended nothing.
struct CacheSnapshot {
    HostTensor k, v;
    explicit CacheSnapshot(const KvCacheProblem& p) : k(p.k_cache), v(p.v_cache) {}
    bool unchanged(const KvCacheProblem& p) const {
        return std::memcmp(k.data(), p.k_cache.data(), k.nbytes()) == 0 &&
               std::memcmp(v.data(), p.v_cache.data(), v.nbytes()) == 0;
    }
};

TEST(ApiKvCacheValidation, DenseAndPagedAccepted) {
    KvCacheProblem dense({3, 7});
    EXPECT_NO_THROW(api::validate(dense.args()));
    KvCacheProblem paged({3, 20}, 16);
    const api::AttnDims d = api::validate(paged.args());
    EXPECT_TRUE(d.paged);
    EXPECT_EQ(d.seqlen_k, 32);
}

TEST(ApiKvCacheValidation, DropoutRejected) {
    KvCacheProblem p({3, 7});
    const CacheSnapshot before(p);
    KvCacheArgs a = p.args();
    a.options.dropout_p = 0.1f;
    EXPECT_INVALID(kvcache_forward(a), "options.dropout_p: expected 0 (the kv-cache forward is for inference");
    EXPECT_TRUE(p.outputs_untouched() && before.unchanged(p));
}

TEST(ApiKvCacheValidation, PageSizeMustBeMultipleOf16) {
    KvCacheProblem p({3, 7}, 8);
    const CacheSnapshot before(p);
    EXPECT_INVALID(kvcache_forward(p.args()),
                   "k_cache: expected page_size (dimension 1 of a paged cache) a multiple of 16 and >= 16, got 8");
    EXPECT_TRUE(p.outputs_untouched() && before.unchanged(p));
}

TEST(ApiKvCacheValidation, BlockTableShape) {
    KvCacheProblem p({3, 7}, 16);
    HostTensor table(DType::i32, {3, 2});
    KvCacheArgs a = p.args();
    a.block_table = table.view();
    EXPECT_INVALID(kvcache_forward(a), "block_table: expected shape (batch=2, max_blocks_per_seq), got (3, 2)");
}

TEST(ApiKvCacheValidation, BlockTableMustBeInt32) {
    KvCacheProblem p({3, 7}, 16);
    HostTensor table(DType::f32, {2, 2});
    KvCacheArgs a = p.args();
    a.block_table = table.view();
    EXPECT_INVALID(kvcache_forward(a), "block_table: expected dtype int32, got float32");
}

TEST(ApiKvCacheValidation, BlockIdOutOfRange) {
    KvCacheProblem p({3, 20}, 16);  // 6 blocks
    const CacheSnapshot before(p);
    p.block_table.set(3, 6);  // sequence 1, page 1: used (positions 16..21)
    EXPECT_INVALID(kvcache_forward(p.args()),
                   "block_table: expected block ids in [0, num_blocks = 6) for the pages sequence b uses, got block_table[1][1] = 6");
    EXPECT_TRUE(p.outputs_untouched() && before.unchanged(p));
}

TEST(ApiKvCacheValidation, UnusedBlockTableEntriesAreNotRead) {
    KvCacheProblem p({3, 7}, 16);
    p.block_table.set(1, -1);  // page 1 of both sequences lies past their ends
    p.block_table.set(3, -1);
    EXPECT_NO_THROW(api::validate(p.args()));
}

TEST(ApiKvCacheValidation, CacheBatchIdxOnlyWithDenseCache) {
    KvCacheProblem p({3, 7}, 16);
    HostTensor idx(DType::i32, {2});
    KvCacheArgs a = p.args();
    a.cache_batch_idx = idx.view();
    EXPECT_INVALID(kvcache_forward(a), "cache_batch_idx: expected absent with a paged cache");
}

TEST(ApiKvCacheValidation, CacheBatchIdxOutOfRange) {
    KvCacheProblem p({3, 7});
    const CacheSnapshot before(p);
    HostTensor idx(DType::i32, {2});
    idx.set(0, 1);
    idx.set(1, 2);
    KvCacheArgs a = p.args();
    a.cache_batch_idx = idx.view();
    EXPECT_INVALID(kvcache_forward(a), "cache_batch_idx: expected entries in [0, batch_cache = 2), got cache_batch_idx[1] = 2");
    EXPECT_TRUE(p.outputs_untouched() && before.unchanged(p));
    idx.set(1, -1);
    EXPECT_INVALID(kvcache_forward(a), "got cache_batch_idx[1] = -1");
}

TEST(ApiKvCacheValidation, SharedCacheEntryCannotBeAppendedTwice) {
    KvCacheProblem p({3, 3});
    HostTensor idx(DType::i32, {2});
    idx.set(0, 1);
    idx.set(1, 1);
    KvCacheArgs a = p.args();
    a.cache_batch_idx = idx.view();
    EXPECT_INVALID(kvcache_forward(a), "cache_batch_idx: expected every appended key to get its own cache slot",
                   "sequences 0 and 1");
    a.k = a.v = TensorView{};  // reading a shared entry is fine
    EXPECT_NO_THROW(api::validate(a));
}

TEST(ApiKvCacheValidation, SharedPagedBlockCannotBeAppendedTwice) {
    KvCacheProblem p({3, 3}, 16);
    p.block_table.set(2, static_cast<int32_t>(p.block_table.get(0)));  // both sequences' page 0 in one block
    EXPECT_INVALID(kvcache_forward(p.args()), "block_table: expected every appended key to get its own cache slot");
}

TEST(ApiKvCacheValidation, CacheSeqlensBeyondCapacity) {
    KvCacheProblem p({3, 31});  // 31 + 2 new > 32
    const CacheSnapshot before(p);
    EXPECT_INVALID(kvcache_forward(p.args()),
                   "cache_seqlens: expected 0 <= cache_seqlens[b] and cache_seqlens[b] + seqlen_new <= the cache capacity 32, "
                   "got cache_seqlens[1] = 31 with seqlen_new 2");
    EXPECT_TRUE(p.outputs_untouched() && before.unchanged(p));
    EXPECT_NO_THROW(api::validate(p.args(/*with_new=*/false)));
}

TEST(ApiKvCacheValidation, NegativeCacheSeqlens) {
    KvCacheProblem p({-1, 3});
    EXPECT_INVALID(kvcache_forward(p.args()), "got cache_seqlens[0] = -1");
}

TEST(ApiKvCacheValidation, CacheSeqlensShapeAndDtype) {
    KvCacheProblem p({3, 3});
    HostTensor lens(DType::i32, {3}), lens_f(DType::f32, {2});
    KvCacheArgs a = p.args();
    a.cache_seqlens = lens.view();
    EXPECT_INVALID(kvcache_forward(a), "cache_seqlens: expected shape (batch=2), got (3)");
    a.cache_seqlens = lens_f.view();
    EXPECT_INVALID(kvcache_forward(a), "cache_seqlens: expected dtype int32, got float32");
}

TEST(ApiKvCacheValidation, LeftpadBeyondLength) {
    KvCacheProblem p({3, 5});
    HostTensor pad(DType::i32, {2});
    pad.set(0, 1);
    pad.set(1, 6);
    KvCacheArgs a = p.args();
    a.cache_leftpad = pad.view();
    EXPECT_INVALID(kvcache_forward(a), "cache_leftpad: expected 0 <= cache_leftpad[b] <= cache_seqlens[b], got cache_leftpad[1] = 6");
}

TEST(ApiKvCacheValidation, ScalarCacheSeqlenRange) {
    KvCacheProblem p({0, 0});
    KvCacheArgs a = p.args(/*with_new=*/false);
    a.cache_seqlens = TensorView{};
    a.cache_seqlen = 33;
    EXPECT_INVALID(kvcache_forward(a), "cache_seqlen: expected -1 (the whole cache) or a length in [0, 32] (the cache capacity), got 33");
    a.cache_seqlen = -2;
    EXPECT_INVALID(kvcache_forward(a), "got -2");
}

TEST(ApiKvCacheValidation, WholeCacheLeavesNoRoomForNewKeys) {
    KvCacheProblem p({0, 0});
    KvCacheArgs a = p.args();
    a.cache_seqlens = TensorView{};
    EXPECT_INVALID(kvcache_forward(a), "cache_seqlen: expected cache_seqlen + seqlen_new <= the cache capacity 32, got 32 + 2",
                   "give the filled length");
    a.cache_seqlen = 30;
    EXPECT_NO_THROW(api::validate(a));
}

TEST(ApiKvCacheValidation, NewKeysBothOrNeither) {
    KvCacheProblem p({3, 3});
    KvCacheArgs a = p.args();
    a.v = TensorView{};
    EXPECT_INVALID(kvcache_forward(a), "v: expected k and v both given (to append) or both absent, got k without v");
    a = p.args();
    a.k = TensorView{};
    EXPECT_INVALID(kvcache_forward(a), "k: expected k and v both given", "got v without k");
}

TEST(ApiKvCacheValidation, NewKeysShape) {
    KvCacheProblem p({3, 3});
    HostTensor vnew(DType::f32, {2, 3, 2, 16});
    KvCacheArgs a = p.args();
    a.v = vnew.view();
    EXPECT_INVALID(kvcache_forward(a), "v: expected shape (batch=2, seqlen_new=2, nheads_k=2, head_dim_v=16), got (2, 3, 2, 16)");
}

TEST(ApiKvCacheValidation, CacheShapes) {
    KvCacheProblem p({3, 3});
    HostTensor v_cache(DType::f32, {2, 31, 2, 16});
    KvCacheArgs a = p.args();
    a.v_cache = v_cache.view();
    EXPECT_INVALID(kvcache_forward(a), "v_cache: expected shape (batch_cache=2, seqlen_cache=32, nheads_k=2, head_dim_v), got (2, 31, 2, 16)");
    HostTensor k_cache(DType::f32, {1, 32, 2, 16});
    a = p.args();
    a.k_cache = k_cache.view();
    EXPECT_INVALID(kvcache_forward(a), "k_cache: expected batch_cache >= batch = 2");
}

TEST(ApiKvCacheValidation, RotaryBothOrNeither) {
    KvCacheProblem p({3, 3});
    HostTensor cos(DType::f32, {32, 4});
    KvCacheArgs a = p.args();
    a.rotary_cos = cos.view();
    EXPECT_INVALID(kvcache_forward(a), "rotary_sin: expected rotary_cos and rotary_sin both given or both absent, got only rotary_cos");
}

TEST(ApiKvCacheValidation, RotaryDimAtMostHeadDim) {
    KvCacheProblem p({3, 3});
    HostTensor cos(DType::f32, {32, 12}), sin(DType::f32, {32, 12});
    KvCacheArgs a = p.args();
    a.rotary_cos = cos.view();
    a.rotary_sin = sin.view();
    EXPECT_INVALID(kvcache_forward(a), "rotary_cos: expected rotary_dim = 2 * shape[1] in [2, head_dim = 16], got rotary_dim 24");
}

TEST(ApiKvCacheValidation, RotaryTableTooShort) {
    KvCacheProblem p({3, 9});  // new keys at positions up to 10: 11 positions needed
    HostTensor cos(DType::f32, {10, 4}), sin(DType::f32, {10, 4});
    KvCacheArgs a = p.args();
    a.rotary_cos = cos.view();
    a.rotary_sin = sin.view();
    EXPECT_INVALID(kvcache_forward(a), "rotary_cos: expected seqlen_ro >= 11", "got 10");
    HostTensor cos11(DType::f32, {11, 4}), sin11(DType::f32, {11, 4});
    a.rotary_cos = cos11.view();
    a.rotary_sin = sin11.view();
    EXPECT_NO_THROW(api::validate(a));
    a.options.causal = true;  // queries rotate at cache_seqlens + i: 9 + 3 positions
    EXPECT_INVALID(kvcache_forward(a), "rotary_cos: expected seqlen_ro >= 12");
}

TEST(ApiKvCacheValidation, RotaryDtypeAndShape) {
    KvCacheProblem p({3, 3});
    HostTensor cos(DType::f16, {32, 4}), sin(DType::f32, {32, 4}), sin_short(DType::f32, {31, 4});
    KvCacheArgs a = p.args();
    a.rotary_cos = cos.view();
    a.rotary_sin = sin.view();
    EXPECT_INVALID(kvcache_forward(a), "rotary_cos: expected dtype float32 (the dtype of q), got float16");
    HostTensor cos32(DType::f32, {32, 4});
    a.rotary_cos = cos32.view();
    a.rotary_sin = sin_short.view();
    EXPECT_INVALID(kvcache_forward(a), "rotary_sin: expected shape (seqlen_ro=32, rotary_dim / 2=4), got (31, 4)");
}

TEST(ApiKvCacheValidation, NumSplitsNonNegative) {
    KvCacheProblem p({3, 3});
    KvCacheArgs a = p.args();
    a.num_splits = -1;
    EXPECT_INVALID(kvcache_forward(a), "num_splits: expected 0 (chosen by a heuristic) or a count >= 1, got -1");
}

TEST(ApiKvCacheValidation, OutMustNotAliasCache) {
    KvCacheProblem p({3, 3});
    KvCacheArgs a = p.args(/*with_new=*/false);
    a.out = make_view(p.k_cache.data(), DType::f32, {2, 3, 4, 16});
    EXPECT_INVALID(kvcache_forward(a), "out: expected an output that does not overlap the input k_cache");
    a = p.args();  // appending: the cache is written too
    a.out = make_view(p.v_cache.data(), DType::f32, {2, 3, 4, 16});
    EXPECT_INVALID(kvcache_forward(a), "v_cache: expected an output that does not overlap the output out");
}

TEST(ApiKvCacheValidation, NewKeysMustNotAliasCache) {
    KvCacheProblem p({3, 3});
    KvCacheArgs a = p.args();
    a.k = make_view(p.k_cache.data(), DType::f32, {2, 2, 2, 16});
    EXPECT_INVALID(kvcache_forward(a), "k_cache: expected an output that does not overlap the input k");
}

TEST(ApiKvCacheValidation, DeviceIndexTensorsAreTrusted) {
    KvCacheArgs a;
    a.q = cuda_view(0, DType::bf16, {2, 1, 8, 64});
    a.k_cache = cuda_view(1, DType::bf16, {10, 16, 2, 64});
    a.v_cache = cuda_view(2, DType::bf16, {10, 16, 2, 64});
    a.block_table = cuda_view(3, DType::i32, {2, 4});
    a.cache_seqlens = cuda_view(4, DType::i32, {2});
    a.out = cuda_view(5, DType::bf16, {2, 1, 8, 64});
    const api::AttnDims d = api::validate(a);
    EXPECT_TRUE(d.paged);
    EXPECT_EQ(d.seqlen_k, 64);
    // Device lengths can't be read: the rotary table must cover every position a full cache rotates, the query of
    // a cache holding all 64 keys included (position 64).
    a.rotary_cos = cuda_view(6, DType::bf16, {64, 16});
    a.rotary_sin = cuda_view(7, DType::bf16, {64, 16});
    EXPECT_INVALID(api::validate(a), "rotary_cos: expected seqlen_ro >= 65 (every position a cache of this capacity");
    a.rotary_cos = cuda_view(6, DType::bf16, {65, 16});
    a.rotary_sin = cuda_view(7, DType::bf16, {65, 16});
    EXPECT_NO_THROW(api::validate(a));
}

}  // namespace
}  // namespace flashattn::testing
