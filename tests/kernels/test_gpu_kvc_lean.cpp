// The Hopper kv-cache kernel's lean instance (kvcache_sm90_kernel's kLean; kvc_lean in
// src/kernels/sm90/kvcache_sm90.cu): which calls take it (by the count of its launches), and that it gives the general
// instance's bits on each of them (FLASHATTN_KVC_LEAN=0) and the CPU path's result. Its numerics by rule are
// tests/python/test_kvcache.py's, which run on it by default and on the general instance under FLASHATTN_KVC_LEAN=0
// (test_general_instance_on_plain_calls).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>

#include "common/build_config.h"
#include "flashattn/flashattn.h"
#include "kernels/gpu_test_util.h"
#include "kernels/sm90/kvcache_sm90.h"

#if FLASHATTN_WITH_CUDA
namespace flashattn::testing {
namespace {

class GpuKvcLean : public GpuTest {};

struct LeanCase {
    const char* what;
    int64_t page;  // 0: a dense cache
    int num_splits;
    bool softcap = false, alibi = false;
    const char* env_name = nullptr;  // one more setting, or none
    const char* env_value = "";
};

struct LeanRun {
    bool lean;
    HostTensor out, lse;
};

// One decode call (32 query heads on 8 kv heads, head dim 128, bf16, causal, one new key appended, ragged lengths) on
// the GPU, with FLASHATTN_KVC_LEAN set to `lean_env`; checked against the CPU path.
LeanRun run_case(const LeanCase& c, const char* lean_env) {
    constexpr int64_t kBatch = 3, kHeads = 32, kHeadsK = 8, kDim = 128, kCapacity = 3000;
    const int kLengths[kBatch] = {2990, 1, 1700};
    std::mt19937_64 rng(uint64_t(c.page * 10 + c.num_splits));
    const int64_t pages = c.page ? (kCapacity + c.page - 1) / c.page : 0;
    const int64_t entries = c.page ? kBatch * pages + 3 : kBatch, rows = c.page ? c.page : kCapacity;
    HostTensor q(DType::bf16, {kBatch, 1, kHeads, kDim}), k_new(DType::bf16, {kBatch, 1, kHeadsK, kDim}),
        v_new(DType::bf16, {kBatch, 1, kHeadsK, kDim});
    HostTensor k_cache(DType::bf16, {entries, rows, kHeadsK, kDim}),
        v_cache(DType::bf16, {entries, rows, kHeadsK, kDim});
    for (HostTensor* t : {&q, &k_new, &v_new, &k_cache, &v_cache}) t->fill_normal(rng);
    HostTensor lengths(DType::i32, {kBatch}), table(DType::i32, {kBatch, std::max<int64_t>(pages, 1)}),
        slopes(DType::f32, {kHeads});
    if (c.page) fill_random_block_table(table, entries, rng);
    for (int64_t b = 0; b < kBatch; ++b) static_cast<int32_t*>(lengths.data())[b] = kLengths[b];
    fill_alibi_slopes(slopes);

    KvCacheArgs a;
    a.num_splits = c.num_splits;
    a.options.causal = true;
    if (c.softcap) a.options.softcap = 20.f;
    HostTensor out_cpu(DType::bf16, {kBatch, 1, kHeads, kDim}), lse_cpu(DType::f32, {kBatch, kHeads, 1});
    // The GPU's copies first: the CPU call appends to the host caches.
    const DeviceTensor dq = DeviceTensor::upload(q), dk_new = DeviceTensor::upload(k_new),
                       dv_new = DeviceTensor::upload(v_new), dk_cache = DeviceTensor::upload(k_cache),
                       dv_cache = DeviceTensor::upload(v_cache), dlengths = DeviceTensor::upload(lengths),
                       dtable = DeviceTensor::upload(table), dslopes = DeviceTensor::upload(slopes);
    DeviceTensor dout(DType::bf16, {kBatch, 1, kHeads, kDim}), dlse(DType::f32, {kBatch, kHeads, 1});
    dout.poison(), dlse.poison();

    KvCacheArgs h = a;
    h.q = q.view(), h.k = k_new.view(), h.v = v_new.view(), h.k_cache = k_cache.view(), h.v_cache = v_cache.view();
    h.cache_seqlens = lengths.view(), h.out = out_cpu.view(), h.softmax_lse = lse_cpu.view();
    if (c.page) h.block_table = table.view();
    if (c.alibi) h.options.alibi_slopes = slopes.view();
    kvcache_forward(h);

    a.q = dq.view(), a.k = dk_new.view(), a.v = dv_new.view(), a.k_cache = dk_cache.view();
    a.v_cache = dv_cache.view(), a.cache_seqlens = dlengths.view(), a.out = dout.view(), a.softmax_lse = dlse.view();
    if (c.page) a.block_table = dtable.view();
    if (c.alibi) a.options.alibi_slopes = dslopes.view();
    // The Hopper kernel whatever the environment says (a run of the suites with FLASHATTN_KVCACHE_PATH=sm80 would
    // otherwise send every call to the Ampere-class kernel).
    ScopedEnv path_env("FLASHATTN_KVCACHE_PATH", ""), lean("FLASHATTN_KVC_LEAN", lean_env);
    ScopedEnv extra(c.env_name ? c.env_name : "FLASHATTN_KVC_UNUSED_SETTING", c.env_value);
    const Workspace workspace = make_workspace(a);
    a.ctx = workspace.ctx;
    const int64_t before = kernels::kvc_sm90_lean_launches();
    kvcache_forward(a);
    cuda_sync_check("the kv-cache call");
    LeanRun run{kernels::kvc_sm90_lean_launches() > before, dout.download(), dlse.download()};

    EXPECT_FALSE(run.out.has_poison_or_nan());
    const ErrorStats err = compare(run.out, out_cpu);
    EXPECT_EQ(err.nonfinite, 0) << err.str();
    EXPECT_LT(err.rel_l2, 1e-2) << err.str();  // a sanity bound: the numerics by rule are tests/python's
    for (int64_t i = 0; i < run.lse.numel(); ++i) EXPECT_NEAR(run.lse.get(i), lse_cpu.get(i), 1e-3) << i;
    return run;
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// One kv head a block whatever the head-group rule would take for these small grids: the lean instance's calls.
constexpr const char* kOneKvHead = "FLASHATTN_KVC_HEAD_GROUP";

TEST_F(GpuKvcLean, CommonCallsRunTheLeanInstanceWithTheGeneralOnesBits) {
    if (!sm90a_kernels_run_here()) GTEST_SKIP() << "needs the Hopper kv-cache kernel (compute capability 9.0, sm_90a)";
    for (const LeanCase& c : {
             LeanCase{"dense, one split", 0, 1, false, false, kOneKvHead, "1"},
             LeanCase{"dense, splits merged in a cluster", 0, 5, false, false, kOneKvHead, "1"},
             LeanCase{"dense, splits merged by the combine kernel", 0, 20, false, false, kOneKvHead, "1"},
             LeanCase{"pages of 16, one split", 16, 1, false, false, kOneKvHead, "1"},
             LeanCase{"pages of 16, splits merged in a cluster", 16, 8, false, false, kOneKvHead, "1"},
             LeanCase{"pages of 48 (pieces of 16)", 48, 3, false, false, kOneKvHead, "1"},
             LeanCase{"pages of 256", 256, 1, false, false, kOneKvHead, "1"},
         }) {
        SCOPED_TRACE(c.what);
        const LeanRun lean = run_case(c, ""), general = run_case(c, "0");
        EXPECT_TRUE(lean.lean);
        EXPECT_FALSE(general.lean);
        EXPECT_TRUE(same_bits(lean.out, general.out)) << "the output differs from the general instance's";
        EXPECT_TRUE(same_bits(lean.lse, general.lse)) << "the LSE differs from the general instance's";
    }
}

TEST_F(GpuKvcLean, OtherCallsRunTheGeneralInstance) {
    if (!sm90a_kernels_run_here()) GTEST_SKIP() << "needs the Hopper kv-cache kernel (compute capability 9.0, sm_90a)";
    for (const LeanCase& c : {
             LeanCase{"softcap", 0, 1, /*softcap=*/true},
             LeanCase{"ALiBi", 16, 1, false, /*alibi=*/true},
             LeanCase{"two kv heads a block", 0, 1, false, false, "FLASHATTN_KVC_HEAD_GROUP", "2"},
             LeanCase{"pages in address order", 64, 1, false, false, "FLASHATTN_KVC_PAGE_ORDER", "1"},
             LeanCase{"balanced splits", 16, 4, false, false, "FLASHATTN_KVC_BALANCE", "2"},
             LeanCase{"merged by the last block", 0, 20, false, false, "FLASHATTN_KVC_LAST_MERGE", "1"},
             LeanCase{"the cluster merge two splits at a time", 0, 5, false, false, "FLASHATTN_KVC_MERGE_GROUP", "2"},
         }) {
        SCOPED_TRACE(c.what);
        EXPECT_FALSE(run_case(c, "").lean);
    }
}

}  // namespace
}  // namespace flashattn::testing
#endif  // FLASHATTN_WITH_CUDA
