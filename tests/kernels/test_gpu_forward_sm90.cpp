// The Hopper forward (src/kernels/sm90) against the fp32 CPU oracle by the rule of attention_case.h: the cases it
// takes (float16/bfloat16, head dims up to 256 and 192/128 for q-k/v, causal and window masks, softcap, ALiBi, GQA,
// varlen, odd lengths), each run with FLASHATTN_FORWARD_PATH=sm90 in every schedule (FLASHATTN_SM90_SCHEDULE:
// serial1, specialised, specialised_free, specialised3 (three consumer warpgroups at head dim 64); specialised also
// persistent, FLASHATTN_SM90_PERSISTENT=1 (up to head dim 128 without varlen; elsewhere the one-tile kernel), with 128-key tiles everywhere, FLASHATTN_SM90_BLOCK_N=128, and with the
// wider tiles everywhere, masks included, =wide, which the default takes only without masks and from 4096 keys) and checked to have launched the Hopper kernel rather than the Ampere fallback.
// Skipped, saying why, where the device is not compute capability 9.0 or sm_90a was not compiled.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/build_config.h"
#include "kernels/attention_case.h"
#include "kernels/sm90/fwd_sm90.h"
#include "kernels/test_cases.h"

namespace flashattn::testing {
namespace {

// Why the Hopper forward cannot run here, or null where it can.
const char* sm90_unavailable() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        return "no CUDA GPU visible";
    }
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major != 9 || minor != 0) return "the Hopper forward runs on compute capability 9.0 only";
    if (!std::strstr(FLASHATTN_CUDA_ARCHS, "90a")) return "sm_90a not in this build's architectures";
    return nullptr;
}

void check_on_sm90(const AttnCase& c) {
    if (const char* why = sm90_unavailable()) GTEST_SKIP() << why;
    ScopedEnv path("FLASHATTN_FORWARD_PATH", "sm90");
    ScopedEnv unpacked("FLASHATTN_FORWARD_PACKED", "0");  // short query rows would run packed (test_gpu_forward_packed)
    struct Variant {
        const char* schedule;
        const char* persistent;
        const char* block_n;
        const char* tail = "";  // FLASHATTN_SM90_TAIL_SPLIT: the last R tiles in K parts, where a split can run
    };
    const Variant variants[] = {{"serial1", "0", ""},
                                {"specialised", "0", ""},
                                {"specialised", "0", "128"},
                                {"specialised", "0", "wide"},
                                {"specialised_free", "0", ""},
                                {"specialised3", "0", ""},
                                {"specialised", "1", ""},
                                {"specialised", "0", "wide", "5,3"},
                                {"specialised3", "0", "", "3,2"}};
    for (const Variant& v : variants) {
        SCOPED_TRACE(std::string("FLASHATTN_SM90_SCHEDULE=") + v.schedule + " FLASHATTN_SM90_PERSISTENT=" +
                     v.persistent + " FLASHATTN_SM90_BLOCK_N=" + v.block_n + " FLASHATTN_SM90_TAIL_SPLIT=" + v.tail);
        ScopedEnv chosen("FLASHATTN_SM90_SCHEDULE", v.schedule);
        ScopedEnv persistent("FLASHATTN_SM90_PERSISTENT", v.persistent);
        ScopedEnv block_n("FLASHATTN_SM90_BLOCK_N", v.block_n);
        ScopedEnv tail("FLASHATTN_SM90_TAIL_SPLIT", v.tail);
        const int64_t before = kernels::sm90_forward_launches();
        check_forward(c);
        EXPECT_GT(kernels::sm90_forward_launches(), before) << "the Ampere-class fallback ran, not the Hopper kernel";
    }
}

std::vector<AttnCase> sm90_cases() {
    std::vector<AttnCase> cases;
    // Head dims of every bucket (40, 72 and 200 zero-filled by the copy engine), both dtypes, lengths on and off
    // tiles. Above 128 every schedule name runs the specialised kernel (with or without turns).
    for (int64_t d : {40, 64, 72, 128, 200, 256})
        for (DType dt : kDtypes)
            cases.push_back({.dtype = dt, .seqlen_q = dt == kF16 ? 113 : 1000, .seqlen_k = dt == kF16 ? 1000 : 113,
                             .head_dim = d});
    cases.push_back({.dtype = kF16, .seqlen_q = 17, .seqlen_k = 17, .head_dim = 64});
    cases.push_back({.dtype = kBF16, .batch = 1, .seqlen_q = 2049, .seqlen_k = 2049, .nheads = 8, .nheads_k = 8,
                     .head_dim = 128});
    // Bottom-right causal: seqlen_q < seqlen_k, >, ==.
    cases.push_back({.dtype = kF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 64, .causal = true});
    cases.push_back({.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 113, .head_dim = 128, .causal = true});
    cases.push_back({.dtype = kF16, .batch = 1, .seqlen_q = 2049, .seqlen_k = 2049, .nheads = 8, .nheads_k = 8,
                     .head_dim = 128, .causal = true});
    // Sliding windows.
    cases.push_back({.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 64, .window_left = 100});
    cases.push_back({.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 128, .window_left = 32,
                     .window_right = 16});
    // GQA and MQA.
    cases.push_back({.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2,
                     .head_dim = 128, .causal = true});
    cases.push_back({.dtype = kF16, .seqlen_q = 113, .seqlen_k = 1000, .nheads = 6, .nheads_k = 1, .head_dim = 64});
    // Score transforms: softcap and ALiBi (per head, per batch and head), alone and with masks.
    cases.push_back({.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 1000, .head_dim = 128, .softcap = 5.0f});
    cases.push_back({.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 64, .causal = true,
                     .softcap = 2.0f, .alibi = Alibi::per_head});
    cases.push_back({.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 113, .nheads = 8, .nheads_k = 2, .head_dim = 256,
                     .window_left = 20, .window_right = 5, .alibi = Alibi::per_batch_head});
    // Varlen: ragged (empty sequences, one row, lengths off the tiles), seqused_k, long sequences.
    cases.push_back({.dtype = kF16, .head_dim = 64, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK});
    cases.push_back({.dtype = kBF16, .nheads = 8, .nheads_k = 2, .head_dim = 128, .seqlens_q = kRaggedQ,
                     .seqlens_k = kRaggedK, .causal = true});
    cases.push_back({.dtype = kBF16, .head_dim = 256, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK,
                     .alibi = Alibi::per_batch_head});
    cases.push_back({.dtype = kF16, .head_dim = 128, .seqlens_q = kUsedQ, .seqlens_k = kUsedK,
                     .seqused_k = kUsedUsed, .softcap = 5.0f});
    // Rows past seqused_k hold NaN: the last key tile's V rows there must not reach the output.
    cases.push_back({.dtype = kBF16, .head_dim = 64, .seqlens_q = kUsedQ, .seqlens_k = kUsedK, .seqused_k = kUsedUsed,
                     .causal = true, .nan_past_used = true});
    cases.push_back({.dtype = kF16, .nheads = 8, .nheads_k = 2, .head_dim = 256, .seqlens_q = kUsedQ,
                     .seqlens_k = kUsedK, .seqused_k = kUsedUsed, .nan_past_used = true});
    cases.push_back({.dtype = kBF16, .head_dim = 72, .seqlens_q = kLongQ, .seqlens_k = kLongK, .causal = true,
                     .window_left = 300, .window_right = 100});
    // One-row sequences: the API gives their row dimension stride 0, the tensor maps a stand-in.
    cases.push_back({.dtype = kBF16, .batch = 3, .seqlen_q = 1, .seqlen_k = 1, .head_dim = 128});
    cases.push_back({.dtype = kF16, .seqlen_q = 1, .seqlen_k = 1000, .nheads = 8, .nheads_k = 1, .head_dim = 256});
    // q/k head dim 192 with v head dim 128 (and 160 / 96, zero-filled up to that bucket).
    cases.push_back({.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 192,
                     .head_dim_v = 128, .causal = true});
    cases.push_back({.dtype = kF16, .head_dim = 160, .head_dim_v = 96, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK,
                     .softcap = 5.0f});
    // Head dim 256 with masks and GQA.
    cases.push_back({.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2,
                     .head_dim = 256, .causal = true});
    // Enough work tiles (288 of 128 rows) that the persistent kernel's blocks (one an SM) run up to three: both of
    // its Q tiles are reused and their mbarriers change phase; the last row block of each head is partial.
    cases.push_back({.dtype = kBF16, .batch = 4, .seqlen_q = 301, .seqlen_k = 301, .nheads = 24, .nheads_k = 24,
                     .head_dim = 128, .tag = "many_tiles"});
    cases.push_back({.dtype = kF16, .batch = 4, .seqlen_q = 301, .seqlen_k = 517, .nheads = 24, .nheads_k = 8,
                     .head_dim = 64, .causal = true, .tag = "many_tiles"});
    // Causal with more query rows than keys: the first row blocks see no key, so the persistent kernel's blocks run
    // work tiles without key tiles among ones with; each such tile stores zeros and an LSE of +inf, not the rows of the
    // tile before it.
    cases.push_back({.dtype = kBF16, .batch = 4, .seqlen_q = 700, .seqlen_k = 150, .nheads = 24, .nheads_k = 8,
                     .head_dim = 128, .causal = true, .tag = "many_tiles"});
    cases.push_back({.dtype = kF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 256, .window_left = 32,
                     .window_right = 16});
    // A softmax scale of 1 spreads the scores (standard deviation sqrt(head_dim)), so rows' maxima keep growing by
    // more than 2^8 past their first key tiles: the lazy rescale (head dim 256, and the persistent kernel at 128)
    // must then rescale mid-row.
    cases.push_back({.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 128, .softmax_scale = 1.0f,
                     .tag = "spread_scores"});
    cases.push_back({.dtype = kF16, .seqlen_q = 300, .seqlen_k = 1000, .nheads = 4, .nheads_k = 2, .head_dim = 256,
                     .softmax_scale = 1.0f, .causal = true, .tag = "spread_scores"});
    // Scores that rise along the keys for about half of the rows (key_ramp): their maxima grow by more than 2^8 at
    // every key tile, so the speculative softmax computes every step after the first again (the other half falls:
    // its maxima stay in the first tile). Head dims of each instance family, masks, GQA, varlen.
    cases.push_back({.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 128, .key_ramp = 0.2f});
    cases.push_back({.dtype = kF16, .seqlen_q = 300, .seqlen_k = 1000, .nheads = 4, .nheads_k = 2, .head_dim = 64,
                     .causal = true, .key_ramp = 0.2f});
    cases.push_back({.dtype = kBF16, .seqlen_q = 700, .seqlen_k = 700, .head_dim = 256, .window_left = 300,
                     .key_ramp = 0.2f});
    cases.push_back({.dtype = kF16, .seqlen_q = 500, .seqlen_k = 500, .nheads = 4, .nheads_k = 2, .head_dim = 192,
                     .head_dim_v = 128, .key_ramp = 0.2f});
    cases.push_back({.dtype = kBF16, .nheads = 8, .nheads_k = 2, .head_dim = 128, .seqlens_q = kRaggedQ,
                     .seqlens_k = kRaggedK, .causal = true, .key_ramp = 0.2f});
    return cases;
}

// Not the Hopper forward's: dropout and the attention-probabilities output stay with the Ampere-class kernel, which
// must compute them by the same rule when the Hopper path is asked for.
void check_falls_back(const AttnCase& c) {
    if (const char* why = sm90_unavailable()) GTEST_SKIP() << why;
    ScopedEnv path("FLASHATTN_FORWARD_PATH", "sm90");
    ScopedEnv unpacked("FLASHATTN_FORWARD_PACKED", "0");
    const int64_t before = kernels::sm90_forward_launches();
    check_forward(c);
    EXPECT_EQ(kernels::sm90_forward_launches(), before) << "expected the Ampere-class kernel";
}

std::vector<AttnCase> fallback_cases() {
    return {{.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 113, .head_dim = 128, .dropout_p = 0.1f},
            {.dtype = kF16, .seqlen_q = 17, .seqlen_k = 64, .head_dim = 64, .attn_probs = true}};
}

// The last wave's split (fwd_tail_split.cuh), forced onto the last 7 work tiles in 4 parts (wide key tiles, the
// instances with a split form): a partial last row block among them, GQA and ALiBi (scores that depend on the key's
// position, so each part must see its own keys), head dims of the three buckets; checked to have split.
TEST(GpuForwardSm90Split, LastWave) {
    if (const char* why = sm90_unavailable()) GTEST_SKIP() << why;
    ScopedEnv path("FLASHATTN_FORWARD_PATH", "sm90");
    ScopedEnv unpacked("FLASHATTN_FORWARD_PACKED", "0");
    ScopedEnv schedule("FLASHATTN_SM90_SCHEDULE", "specialised");
    ScopedEnv persistent("FLASHATTN_SM90_PERSISTENT", "0");
    ScopedEnv wide("FLASHATTN_SM90_BLOCK_N", "wide");  // the instances with a split form (fwd_launch.cu)
    ScopedEnv tail("FLASHATTN_SM90_TAIL_SPLIT", "7,4");
    for (DType dt : kDtypes)
        for (int64_t d : {64, 128, 256}) {
            const AttnCase c{.dtype = dt, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 4, .nheads_k = 2,
                             .head_dim = d, .alibi = Alibi::per_head};
            SCOPED_TRACE(c.label());
            const int64_t before = kernels::sm90_forward_tail_splits();
            check_forward(c);
            EXPECT_GT(kernels::sm90_forward_tail_splits(), before) << "the last wave was not split";
        }
    // Without the workspace it asks for, the launch runs the tiles whole.
    const AttnCase whole{.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 128, .no_workspace = true};
    const int64_t before = kernels::sm90_forward_tail_splits();
    check_forward(whole);
    EXPECT_EQ(kernels::sm90_forward_tail_splits(), before) << "split without a workspace";
}

[[maybe_unused]] const bool registered = [] {
    register_cases("GpuForwardSm90", "Cases", sm90_cases(), check_on_sm90, __FILE__, __LINE__);
    register_cases("GpuForwardSm90", "FallsBack", fallback_cases(), check_falls_back, __FILE__, __LINE__);
    return true;
}();

}  // namespace
}  // namespace flashattn::testing
