// The forward with packed query heads (src/kernels/dispatch.cpp: short query rows run on the kv-cache kernel, the
// query heads of a kv head in one tile, the keys split) against the fp32 CPU oracle by the rule of attention_case.h.
// Cases: every head dim bucket and dtype, one to a few hundred packed rows, every mask, softcap, ALiBi, GQA / MQA /
// MHA, q/k head dim above v's, rows that see no key, many splits, and no workspace (no split); each forced with
// FLASHATTN_FORWARD_PACKED=1 and checked to have run packed, on the Hopper kv-cache kernel where it applies (head dims
// up to 128 on an H100) and on the Ampere-class one. Then the default's choice on two shapes, the variable's
// "0", and the packed forward captured into a CUDA graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/attention_case.h"
#include "kernels/gpu_test_util.h"
#include "kernels/launch.h"
#include "kernels/sm90/kvcache_sm90.h"
#include "kernels/test_cases.h"

namespace flashattn::testing {
namespace {

// Whether the Hopper kv-cache kernel can run here (compute capability 9.0, sm_90a compiled), and takes the case.
bool hopper_kvcache_takes(const AttnCase& c) {
    constexpr int64_t kHopperKvcMaxHeadDim = 128;  // sm90/kvcache_sm90.h
    return sm90a_kernels_run_here() && std::max(c.head_dim, c.dv()) <= kHopperKvcMaxHeadDim;
}

// Each case packed on both kv-cache kernels: the default (the Hopper one where it runs and takes the case, checked
// to have launched) and the Ampere-class one (FLASHATTN_KVCACHE_PATH=sm80).
void check_packed(const AttnCase& c) {
    ScopedEnv packed("FLASHATTN_FORWARD_PACKED", "1");
    {
        SCOPED_TRACE("the default kv-cache kernel");
        ScopedEnv path("FLASHATTN_KVCACHE_PATH", "");
        const int64_t before = kernels::packed_forward_launches(), before_sm90 = kernels::kvc_sm90_launches();
        check_forward(c);
        EXPECT_GT(kernels::packed_forward_launches(), before) << "the forward did not run packed";
        if (hopper_kvcache_takes(c))
            EXPECT_GT(kernels::kvc_sm90_launches(), before_sm90) << "the Hopper kv-cache kernel did not run";
    }
    {
        SCOPED_TRACE("FLASHATTN_KVCACHE_PATH=sm80");
        ScopedEnv path("FLASHATTN_KVCACHE_PATH", "sm80");
        const int64_t before_sm90 = kernels::kvc_sm90_launches();
        check_forward(c);
        EXPECT_EQ(kernels::kvc_sm90_launches(), before_sm90) << "the Hopper kv-cache kernel ran";
    }
}

std::vector<AttnCase> packed_cases() {
    std::vector<AttnCase> cases;
    // Every head dim bucket (40, 72 and 200 zero-padded), both dtypes; 4 query heads a kv head.
    for (int64_t d : kHeadDims)
        for (DType dt : kDtypes)
            cases.push_back({.dtype = dt, .seqlen_q = dt == kF16 ? 1 : 4, .seqlen_k = dt == kF16 ? 1000 : 113,
                             .nheads = 8, .nheads_k = 2, .head_dim = d});
    // Packed rows past one tile (17 x 8 = 136 rows: three row blocks of 64), and a single key.
    cases.push_back({.dtype = kBF16, .seqlen_q = 17, .seqlen_k = 517, .nheads = 8, .nheads_k = 1, .head_dim = 128});
    cases.push_back({.dtype = kF16, .batch = 3, .seqlen_q = 1, .seqlen_k = 1, .nheads = 8, .nheads_k = 2,
                     .head_dim = 64});
    // Decode-sized: one query row of 32 heads on 8 kv heads against 4099 keys (many splits, a partial last tile).
    cases.push_back({.dtype = kBF16, .batch = 1, .seqlen_q = 1, .seqlen_k = 4099, .nheads = 32, .nheads_k = 8,
                     .head_dim = 128});
    // MHA (one query head a kv head) and MQA.
    cases.push_back({.dtype = kF16, .seqlen_q = 4, .seqlen_k = 2049, .head_dim = 128});
    cases.push_back({.dtype = kBF16, .seqlen_q = 1, .seqlen_k = 1000, .nheads = 16, .nheads_k = 1, .head_dim = 256});
    // Bottom-right causal: fewer query rows than keys, and more (the first rows see no key: out 0, lse +inf).
    cases.push_back({.dtype = kBF16, .seqlen_q = 17, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 128,
                     .causal = true});
    cases.push_back({.dtype = kF16, .seqlen_q = 17, .seqlen_k = 5, .nheads = 4, .nheads_k = 2, .head_dim = 64,
                     .causal = true});
    // Sliding windows, softcap, ALiBi (per head, per batch and head).
    cases.push_back({.dtype = kF16, .seqlen_q = 4, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 72,
                     .window_left = 100, .window_right = 0});
    cases.push_back({.dtype = kBF16, .seqlen_q = 16, .seqlen_k = 513, .nheads = 8, .nheads_k = 4, .head_dim = 128,
                     .window_left = 32, .window_right = 8});
    cases.push_back({.dtype = kBF16, .seqlen_q = 4, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 128,
                     .softcap = 5.0f});
    cases.push_back({.dtype = kF16, .seqlen_q = 3, .seqlen_k = 700, .nheads = 8, .nheads_k = 2, .head_dim = 64,
                     .causal = true, .softcap = 2.0f, .alibi = Alibi::per_head});
    cases.push_back({.dtype = kBF16, .seqlen_q = 1, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 256,
                     .window_left = 20, .window_right = 5, .alibi = Alibi::per_batch_head});
    // q/k head dim 192 with v head dim 128.
    cases.push_back({.dtype = kBF16, .seqlen_q = 2, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 192,
                     .head_dim_v = 128, .causal = true});
    // Scores spread wide (scale 1): rows' maxima move between key tiles and between splits.
    cases.push_back({.dtype = kBF16, .seqlen_q = 4, .seqlen_k = 2049, .nheads = 8, .nheads_k = 2, .head_dim = 128,
                     .softmax_scale = 1.0f, .tag = "spread_scores"});
    // No workspace: the packed forward runs without splitting the keys.
    cases.push_back({.dtype = kBF16, .batch = 1, .seqlen_q = 1, .seqlen_k = 4099, .nheads = 32, .nheads_k = 8,
                     .head_dim = 128, .causal = true, .no_workspace = true});
    return cases;
}

// The default (no FLASHATTN_FORWARD_PACKED) packs a decode-shaped call and leaves a long one to the tiled forward.
class GpuForwardPackedDefault : public GpuTest {};

TEST_F(GpuForwardPackedDefault, PacksOneQueryRowOfManyHeads) {
    ScopedEnv unset("FLASHATTN_FORWARD_PACKED", "");
    const int64_t before = kernels::packed_forward_launches();
    check_forward({.dtype = kBF16, .batch = 2, .seqlen_q = 1, .seqlen_k = 1000, .nheads = 32, .nheads_k = 8,
                   .head_dim = 128, .causal = true});
    EXPECT_GT(kernels::packed_forward_launches(), before) << "a decode-shaped forward did not run packed";
}

TEST_F(GpuForwardPackedDefault, LeavesLongRowsToTheTiledForward) {
    ScopedEnv unset("FLASHATTN_FORWARD_PACKED", "");
    const int64_t before = kernels::packed_forward_launches();
    check_forward({.dtype = kBF16, .batch = 1, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2,
                   .head_dim = 128, .causal = true});
    EXPECT_EQ(kernels::packed_forward_launches(), before) << "a 1000-row forward ran packed";
}

// FLASHATTN_FORWARD_PACKED=0 keeps even a decode-shaped call on the tiled forward.
TEST_F(GpuForwardPackedDefault, ZeroTurnsItOff) {
    ScopedEnv off("FLASHATTN_FORWARD_PACKED", "0");
    const int64_t before = kernels::packed_forward_launches();
    check_forward({.dtype = kF16, .batch = 2, .seqlen_q = 1, .seqlen_k = 300, .nheads = 32, .nheads_k = 8,
                   .head_dim = 64});
    EXPECT_EQ(kernels::packed_forward_launches(), before);
}

// Split-KV on the Hopper kv-cache kernel: up to 16 splits of a unit merge inside their thread block cluster, more (or
// any with FLASHATTN_KVC_CLUSTER=0) through the workspace and the combine kernel. Decode shapes of 8 units whose
// heuristic counts are 8 (2000 keys: splits of 4 tiles, kvc_one_sm_splits) and 22 (4099 keys: 65 tiles, too many for
// 8 short splits), and three query rows against 1000 keys (8 splits of two tiles, kvc_latency_splits; 12 packed rows,
// causal: the first token sees one key fewer than the last).
TEST_F(GpuForwardPackedDefault, SplitsMergeInAClusterOrByTheCombine) {
    const AttnCase decode{.dtype = kBF16, .batch = 1, .seqlen_q = 1, .seqlen_k = 2000, .nheads = 32, .nheads_k = 8,
                          .head_dim = 128, .causal = true};
    if (!hopper_kvcache_takes(decode)) GTEST_SKIP() << "needs the Hopper kv-cache kernel (compute capability 9.0)";
    ScopedEnv packed("FLASHATTN_FORWARD_PACKED", "1");
    AttnCase longer = decode, rows = decode;
    longer.seqlen_k = 4099;
    rows.seqlen_q = 3, rows.seqlen_k = 1000;
    struct Way {
        const char* cluster;
        const AttnCase& c;
        bool merges_in_cluster;
    };
    for (const Way& way : {Way{"", decode, true}, Way{"0", decode, false}, Way{"", longer, false},
                           Way{"", rows, true}, Way{"0", rows, false}}) {
        SCOPED_TRACE(std::string("FLASHATTN_KVC_CLUSTER=") + way.cluster + ", seqlen_q " +
                     std::to_string(way.c.seqlen_q) + ", seqlen_k " + std::to_string(way.c.seqlen_k));
        ScopedEnv cluster("FLASHATTN_KVC_CLUSTER", way.cluster);
        const int64_t before = kernels::kvc_sm90_cluster_launches();
        check_forward(way.c);
        EXPECT_EQ(kernels::kvc_sm90_cluster_launches() > before, way.merges_in_cluster);
    }
}

// Captured into a CUDA graph on a non-blocking stream with its splits (the attention kernel, then the combine as its
// programmatic dependent): work sent elsewhere, or a synchronising call, fails the capture.
TEST_F(GpuForwardPackedDefault, CudaGraphCapture) {
    ScopedEnv packed("FLASHATTN_FORWARD_PACKED", "1");
    const CudaStream stream(/*non_blocking=*/true);
    const AttnProblem p(AttnCase{.dtype = kBF16, .batch = 1, .seqlen_q = 2, .seqlen_k = 3000, .nheads = 16,
                                 .nheads_k = 4, .head_dim = 128, .causal = true});
    DeviceAttention device(p, stream.get());
    device.prepare_forward();
    const int64_t before = kernels::packed_forward_launches();
    capture_and_replay(stream.get(), [&] { device.launch_forward(); });
    EXPECT_GT(kernels::packed_forward_launches(), before);
    const ForwardResult gpu = device.collect_forward();
    const ForwardResult oracle = p.oracle_forward();
    const ForwardResult lowp = p.lowp_forward();
    expect_within_rule("out", gpu.out, lowp.out, oracle.out);
    expect_within_rule("softmax_lse", gpu.lse, lowp.lse, oracle.lse);
}

[[maybe_unused]] const bool registered = [] {
    register_cases("GpuForwardPacked", "Cases", packed_cases(), check_packed, __FILE__, __LINE__);
    return true;
}();

}  // namespace
}  // namespace flashattn::testing
