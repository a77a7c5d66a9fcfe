// The Hopper kv-cache kernel reading a paged cache's pages in address order (src/kernels/sm90/kvc_page_order.cuh;
// KvcPlan::pages_in_address_order): which calls take it (checked by the count of launches whose plan asks for it, so
// that the tests of its numerics in tests/python/test_kvcache.py, which force it, cannot pass with the plan's flag
// off; whether a block then orders its range is the kernel's own test, kvc_page_order), and that it gives the CPU
// path's result. By default (or FLASHATTN_KVC_PAGE_ORDER=auto) where kvc_pages_in_address_order says (blocks of 32
// key tiles or more, on up to 4096 pages of at most 64 rows; with fast memory, kvc_fast_memory, nowhere); =1 takes it
// on every paged call without ALiBi, =0 nowhere. And the paged V pieces copied both 64-column halves at once
// (KvcPlan::v_fold_rows, kvc_v_fold_rows in src/kernels/sm90/kvcache_sm90.cu): which calls fold (by the count of
// launches that did), with the CPU path's result, and FLASHATTN_KVC_V_FOLD=0 keeping them to one copy a half; the
// same for the paged K pieces (KvcPlan::k_fold, kvc_k_fold) and FLASHATTN_KVC_K_FOLD=0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>

#include "common/build_config.h"
#include "flashattn/flashattn.h"
#include "kernels/gpu_test_util.h"
#include "kernels/sm80/kvcache_plan.h"
#include "kernels/sm90/kvcache_sm90.h"

#if FLASHATTN_WITH_CUDA
namespace flashattn::testing {
namespace {

class GpuKvcPageOrder : public GpuTest {};

// One paged decode call (32 query heads on 8 kv heads, head dim c.head_dim, bf16, causal, one new key appended)
// on the GPU and on the CPU; returns which of the paths the GPU call took.
struct OrderCase {
    const char* env;  // FLASHATTN_KVC_PAGE_ORDER ("" unset)
    int64_t page;
    int num_splits;
    bool alibi;
    bool ordered;  // expected
    const char* fold_env = "";  // FLASHATTN_KVC_V_FOLD
    const char* head_group_env = "";  // FLASHATTN_KVC_HEAD_GROUP
    int64_t head_dim = 128;
    // FLASHATTN_KVC_FAST_MEMORY: the H100 rules by default, whatever the device ("1": kvc_fast_memory's, which keep
    // table order)
    const char* fast_env = "0";
    const char* k_fold_env = "";  // FLASHATTN_KVC_K_FOLD
};
struct Paths {
    bool ordered, folded, k_folded;
};
Paths run_case(const OrderCase& c) {
    constexpr int64_t kBatch = 2, kHeads = 32, kHeadsK = 8, kCapacity = 6000;
    const int kLengths[kBatch] = {5990, 2500};
    std::mt19937_64 rng(uint64_t(c.page * 10 + c.num_splits));
    const int64_t pages = (kCapacity + c.page - 1) / c.page, blocks = kBatch * pages + 3;
    HostTensor q(DType::bf16, {kBatch, 1, kHeads, c.head_dim}), k_new(DType::bf16, {kBatch, 1, kHeadsK, c.head_dim}),
        v_new(DType::bf16, {kBatch, 1, kHeadsK, c.head_dim});
    HostTensor k_cache(DType::bf16, {blocks, c.page, kHeadsK, c.head_dim}),
        v_cache(DType::bf16, {blocks, c.page, kHeadsK, c.head_dim});
    for (HostTensor* t : {&q, &k_new, &v_new, &k_cache, &v_cache}) t->fill_normal(rng);
    HostTensor lengths(DType::i32, {kBatch}), table(DType::i32, {kBatch, pages}), slopes(DType::f32, {kHeads});
    fill_random_block_table(table, blocks, rng);
    for (int64_t b = 0; b < kBatch; ++b) static_cast<int32_t*>(lengths.data())[b] = kLengths[b];
    fill_alibi_slopes(slopes);

    KvCacheArgs a;
    a.num_splits = c.num_splits;
    a.options.causal = true;
    HostTensor out_cpu(DType::bf16, {kBatch, 1, kHeads, c.head_dim}), lse_cpu(DType::f32, {kBatch, kHeads, 1});
    // The GPU's copies first: the CPU call appends to the host caches.
    const DeviceTensor dq = DeviceTensor::upload(q), dk_new = DeviceTensor::upload(k_new),
                       dv_new = DeviceTensor::upload(v_new), dk_cache = DeviceTensor::upload(k_cache),
                       dv_cache = DeviceTensor::upload(v_cache), dlengths = DeviceTensor::upload(lengths),
                       dtable = DeviceTensor::upload(table), dslopes = DeviceTensor::upload(slopes);
    DeviceTensor dout(DType::bf16, {kBatch, 1, kHeads, c.head_dim}), dlse(DType::f32, {kBatch, kHeads, 1});
    dout.poison(), dlse.poison();

    KvCacheArgs h = a;
    h.q = q.view(), h.k = k_new.view(), h.v = v_new.view(), h.k_cache = k_cache.view(), h.v_cache = v_cache.view();
    h.cache_seqlens = lengths.view(), h.block_table = table.view(), h.out = out_cpu.view();
    h.softmax_lse = lse_cpu.view();
    if (c.alibi) h.options.alibi_slopes = slopes.view();
    kvcache_forward(h);

    a.q = dq.view(), a.k = dk_new.view(), a.v = dv_new.view(), a.k_cache = dk_cache.view();
    a.v_cache = dv_cache.view(), a.cache_seqlens = dlengths.view(), a.block_table = dtable.view();
    a.out = dout.view(), a.softmax_lse = dlse.view();
    if (c.alibi) a.options.alibi_slopes = dslopes.view();
    const Workspace workspace = make_workspace(a);
    a.ctx = workspace.ctx;
    // The Hopper kernel whatever the environment says (these tests count its launches; a run of the suites with
    // FLASHATTN_KVCACHE_PATH=sm80 would otherwise send every call to the Ampere-class kernel).
    ScopedEnv path_env("FLASHATTN_KVCACHE_PATH", "");
    ScopedEnv env("FLASHATTN_KVC_PAGE_ORDER", c.env), fold_env("FLASHATTN_KVC_V_FOLD", c.fold_env),
        group_env("FLASHATTN_KVC_HEAD_GROUP", c.head_group_env), fast_env("FLASHATTN_KVC_FAST_MEMORY", c.fast_env),
        k_fold_env("FLASHATTN_KVC_K_FOLD", c.k_fold_env);
    const int64_t ordered_before = kernels::kvc_sm90_ordered_launches();
    const int64_t folded_before = kernels::kvc_sm90_v_fold_launches();
    const int64_t k_folded_before = kernels::kvc_sm90_k_fold_launches();
    kvcache_forward(a);
    cuda_sync_check("the paged kv-cache call");
    const Paths paths{kernels::kvc_sm90_ordered_launches() > ordered_before,
                      kernels::kvc_sm90_v_fold_launches() > folded_before,
                      kernels::kvc_sm90_k_fold_launches() > k_folded_before};

    const HostTensor out_gpu = dout.download(), lse_gpu = dlse.download();
    EXPECT_FALSE(out_gpu.has_poison_or_nan());
    const ErrorStats err = compare(out_gpu, out_cpu);
    EXPECT_EQ(err.nonfinite, 0) << err.str();
    EXPECT_LT(err.rel_l2, 1e-2) << err.str();  // a sanity bound: the numerics by rule are tests/python's
    for (int64_t i = 0; i < lse_gpu.numel(); ++i) EXPECT_NEAR(lse_gpu.get(i), lse_cpu.get(i), 1e-3) << i;
    return paths;
}

TEST_F(GpuKvcPageOrder, WhichCallsReadPagesInAddressOrder) {
    if (!sm90a_kernels_run_here()) GTEST_SKIP() << "needs the Hopper kv-cache kernel (compute capability 9.0, sm_90a)";
    // Unset or "auto": the rule (kvc_pages_in_address_order, tests/kernels/test_kvc_splits.cpp) on the cache's 94 key
    // tiles of 64 keys over the splits.
    for (const OrderCase& c : {
             OrderCase{"", 64, 1, false, true},        // unset: 94 tiles a block on 94 pages
             OrderCase{"", 16, 1, false, true},        // 376 pages: one wide window
             OrderCase{"auto", 64, 8, false, false},   // 12 tiles a block
             OrderCase{"1", 64, 8, false, true},    // forced
             OrderCase{"1", 48, 3, false, true},    // forced; pages of 3 pieces
             OrderCase{"0", 64, 1, false, false},   // kept off where the rule would take it
             OrderCase{"1", 16, 1, true, false},    // ALiBi: never
             OrderCase{"", 64, 1, false, false, "", "", 128, "1"},   // fast memory: table order
             OrderCase{"1", 64, 1, false, true, "", "", 128, "1"},   // ... unless forced
         }) {
        SCOPED_TRACE(std::string("FLASHATTN_KVC_PAGE_ORDER=") + c.env + ", FLASHATTN_KVC_FAST_MEMORY=" + c.fast_env +
                     ", page " + std::to_string(c.page) + ", splits " + std::to_string(c.num_splits) +
                     (c.alibi ? ", ALiBi" : ""));
        EXPECT_EQ(run_case(c).ordered, c.ordered);
    }
}

// One fold's cases: each call with the case's field `env` (OrderCase::fold_env or k_fold_env, the environment
// variable named `variable`) set to its fold_env, checking which path `which` says it took.
struct FoldCase {
    int64_t page;
    int num_splits;
    const char* order_env;
    const char* fold_env;
    const char* group_env;
    int64_t head_dim;
    bool folded;
};
void expect_folds(const std::string& variable, const char* OrderCase::*env, bool Paths::*which,
                  std::initializer_list<FoldCase> cases) {
    for (const FoldCase& f : cases) {
        SCOPED_TRACE("page " + std::to_string(f.page) + ", splits " + std::to_string(f.num_splits) +
                     ", FLASHATTN_KVC_PAGE_ORDER=" + f.order_env + ", " + variable + "=" + f.fold_env +
                     ", FLASHATTN_KVC_HEAD_GROUP=" + f.group_env + ", head dim " + std::to_string(f.head_dim));
        OrderCase c{f.order_env, f.page, f.num_splits, false, false, "", f.group_env, f.head_dim};
        c.*env = f.fold_env;
        EXPECT_EQ(run_case(c).*which, f.folded);
    }
}

TEST_F(GpuKvcPageOrder, WhichCallsFoldVHalves) {
    if (!sm90a_kernels_run_here()) GTEST_SKIP() << "needs the Hopper kv-cache kernel (compute capability 9.0, sm_90a)";
    // One kv head a block (forced), head dim 128, pieces of 16 rows or a whole tile: folded; each with several splits
    // too, table and address order both; the lengths (5991, 2501) end inside a piece (the V tail in the folded layout).
    expect_folds("FLASHATTN_KVC_V_FOLD", &OrderCase::fold_env, &Paths::folded, {
             FoldCase{16, 1, "", "", "1", 128, true},      // 16-row pieces, pages in address order (the H100 rule)
             FoldCase{16, 7, "0", "", "1", 128, true},     // table order, blocks of 14 tiles
             FoldCase{48, 3, "", "", "1", 128, true},      // pages of three 16-row pieces
             FoldCase{64, 5, "", "", "1", 128, true},      // a whole tile a piece
             FoldCase{256, 1, "", "", "1", 128, true},
             FoldCase{32, 2, "", "", "1", 128, false},     // 32-row pieces: not folded
             FoldCase{16, 1, "", "0", "1", 128, false},    // FLASHATTN_KVC_V_FOLD=0
             FoldCase{16, 1, "", "", "max", 128, false},   // several kv heads a block
             FoldCase{16, 2, "", "", "1", 64, false},      // one 64-column half
         });
}

TEST_F(GpuKvcPageOrder, WhichCallsFoldKHalves) {
    if (!sm90a_kernels_run_here()) GTEST_SKIP() << "needs the Hopper kv-cache kernel (compute capability 9.0, sm_90a)";
    // One kv head a block (forced), head dim 128, any piece rows: folded (KvcPlan::k_fold, the 5-D map and the S
    // product's 2 KB group stride); with several splits too, table and address order both; the lengths (5991, 2501)
    // end inside a piece (the masked keys of a piece copied whole).
    expect_folds("FLASHATTN_KVC_K_FOLD", &OrderCase::k_fold_env, &Paths::k_folded, {
             FoldCase{16, 1, "", "", "1", 128, true},      // 16-row pieces, pages in address order (the H100 rule)
             FoldCase{16, 7, "0", "", "1", 128, true},     // table order, blocks of 14 tiles
             FoldCase{48, 3, "", "", "1", 128, true},      // pages of three 16-row pieces
             FoldCase{32, 2, "", "", "1", 128, true},      // 32-row pieces (V's are not folded there)
             FoldCase{64, 5, "", "", "1", 128, true},      // a whole tile a piece
             FoldCase{256, 1, "0", "", "1", 128, true},
             FoldCase{16, 1, "", "0", "1", 128, false},    // FLASHATTN_KVC_K_FOLD=0
             FoldCase{16, 1, "", "", "max", 128, false},   // several kv heads a block
             FoldCase{16, 2, "", "", "1", 64, false},      // one 64-column half
         });
}

}  // namespace
}  // namespace flashattn::testing
#endif
