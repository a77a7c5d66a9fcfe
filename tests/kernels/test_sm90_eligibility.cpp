// Which problems the Hopper forward takes (sm90_forward_handles, host code: no GPU needed). What it refuses runs on
// the Ampere-class kernel, so a wrong "yes" computes garbage and a wrong "no" only costs speed: the cases below pin
// both sides of every rule.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/build_config.h"

#if FLASHATTN_WITH_CUDA
#include "common/params.h"
#include "kernels/sm90/fwd_sm90.h"

namespace flashattn::kernels {
namespace {

// Stand-in device addresses: never dereferenced by the eligibility check, 256-byte aligned like an allocation.
constexpr uintptr_t kBase = 0x7f0000000000;
constexpr uintptr_t kAlloc = uintptr_t(1) << 32;

// A dense (batch, seqlen, heads, dim) forward, contiguous, bf16.
AttnParams dense(int batch, int seqlen_q, int seqlen_k, int nheads, int nheads_k, int head_dim, int head_dim_v) {
    AttnParams p;
    p.op = OpKind::forward;
    p.dtype = ElemType::bf16;
    p.batch = batch, p.seqlen_q = seqlen_q, p.seqlen_k = seqlen_k;
    p.nheads = nheads, p.nheads_k = nheads_k, p.head_dim = head_dim, p.head_dim_v = head_dim_v;
    p.q = reinterpret_cast<const void*>(kBase);
    p.k = reinterpret_cast<const void*>(kBase + kAlloc);
    p.v = reinterpret_cast<const void*>(kBase + 2 * kAlloc);
    p.out = reinterpret_cast<void*>(kBase + 3 * kAlloc);
    auto strides = [](int64_t rows, int64_t heads, int64_t dim, int64_t& b, int64_t& r, int64_t& h) {
        h = dim, r = heads * dim, b = rows * heads * dim;
        // The API records a size-1 dimension's stride as 0 (never stepped).
        if (heads == 1) h = 0;
        if (rows == 1) r = 0;
    };
    strides(seqlen_q, nheads, head_dim, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    strides(seqlen_k, nheads_k, head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    strides(seqlen_k, nheads_k, head_dim_v, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    strides(seqlen_q, nheads, head_dim_v, p.out_batch_stride, p.out_row_stride, p.out_head_stride);
    if (batch == 1) p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.out_batch_stride = 0;
    p.scale = 0.125f;
    return p;
}

AttnParams dense(int head_dim, int head_dim_v) { return dense(2, 1000, 1000, 8, 2, head_dim, head_dim_v); }

TEST(Sm90Eligibility, HeadDimsUpTo256AndThe192To128Shape) {
    for (int d : {8, 40, 64, 72, 128, 136, 200, 256}) EXPECT_TRUE(sm90_forward_handles(dense(d, d))) << d;
    EXPECT_TRUE(sm90_forward_handles(dense(192, 128)));
    EXPECT_TRUE(sm90_forward_handles(dense(160, 96)));
    EXPECT_FALSE(sm90_forward_handles(dense(264, 264)));
    EXPECT_FALSE(sm90_forward_handles(dense(256, 128)));  // q/k above 192 with a narrower v
    EXPECT_FALSE(sm90_forward_handles(dense(128, 64)));   // unequal at or below 128
    EXPECT_FALSE(sm90_forward_handles(dense(192, 192 - 8)));
}

TEST(Sm90Eligibility, ScoreTransformsYesDropoutProbsAndFp32No) {
    AttnParams p = dense(128, 128);
    p.softcap = 30.f;
    float slopes[8] = {};
    p.alibi_slopes = slopes;
    EXPECT_TRUE(sm90_forward_handles(p));
    p.dropout_p = 0.1f;
    EXPECT_FALSE(sm90_forward_handles(p));
    p = dense(128, 128);
    float probs = 0.f;
    p.attn_probs = &probs;
    EXPECT_FALSE(sm90_forward_handles(p));
    p = dense(64, 64);
    p.dtype = ElemType::f32;
    EXPECT_FALSE(sm90_forward_handles(p));
}

TEST(Sm90Eligibility, VarlenNeedsRowsInItsTensorMaps) {
    AttnParams p = dense(2, 700, 900, 8, 8, 64, 64);
    p.is_varlen = true;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.out_batch_stride = 0;
    p.total_q = 1300, p.total_k = 1700;
    EXPECT_TRUE(sm90_forward_handles(p));
    p.total_k = 0;
    EXPECT_FALSE(sm90_forward_handles(p));
}

TEST(Sm90Eligibility, OneRowSequencesAndOneHeadTakeStandInStrides) {
    EXPECT_TRUE(sm90_forward_handles(dense(3, 1, 1, 4, 4, 128, 128)));
    EXPECT_TRUE(sm90_forward_handles(dense(1, 1, 1000, 8, 1, 256, 256)));
    EXPECT_TRUE(sm90_forward_handles(dense(1, 17, 17, 1, 1, 40, 40)));
}

TEST(Sm90Eligibility, TheCopyEngineNeedsSixteenByteStridesAndBases) {
    AttnParams p = dense(64, 64);
    p.k_row_stride += 4;  // 8 bytes off a 16-byte multiple
    EXPECT_FALSE(sm90_forward_handles(p));
    p = dense(64, 64);
    p.v_head_stride = 68;
    EXPECT_FALSE(sm90_forward_handles(p));
    p = dense(64, 64);
    p.q = reinterpret_cast<const void*>(kBase + 8);
    EXPECT_FALSE(sm90_forward_handles(p));
    p = dense(64, 64);
    p.k_head_stride = 0;  // a broadcast over more than one head: no tensor map steps by 0
    EXPECT_FALSE(sm90_forward_handles(p));
}

TEST(Sm90Eligibility, TheOutputIsWrittenAtLeastFourBytesAtATime) {
    AttnParams p = dense(64, 64);
    p.out = reinterpret_cast<void*>(kBase + 3 * kAlloc + 2);
    EXPECT_FALSE(sm90_forward_handles(p));
    p = dense(64, 64);
    p.out_row_stride += 1;
    EXPECT_FALSE(sm90_forward_handles(p));
    p = dense(64, 64);
    p.out_row_stride += 2;  // 4-byte aligned, not 16: the 4-byte output path
    EXPECT_TRUE(sm90_forward_handles(p));
}

TEST(Sm90Eligibility, WorkTilesMustBeCountableInAnInt) {
    AttnParams p = dense(1, 1 << 30, 1 << 30, 8, 8, 64, 64);
    p.batch = 16;
    EXPECT_FALSE(sm90_forward_handles(p));
}

// The default schedule (sm90_default_schedule): specialised above head dim 64; at head dim 64 serial1 unless rows see
// 4096 keys or more on average (causal halves the mean; a window bounds it), then three consumer warpgroups.
TEST(Sm90Eligibility, DefaultScheduleFollowsHeadDimAndMeanVisibleKeys) {
    auto schedule = [](int seqlen, int head_dim, int window_left, int window_right) {
        AttnParams p = dense(1, seqlen, seqlen, 8, 8, head_dim, head_dim);
        p.window_left = window_left, p.window_right = window_right;
        return std::string(sm90_default_schedule(p));
    };
    constexpr int kUnbounded = -1, kCausal = 0;
    EXPECT_EQ(schedule(512, 128, kUnbounded, kUnbounded), "specialised");
    EXPECT_EQ(schedule(512, 256, kUnbounded, kCausal), "specialised");
    EXPECT_EQ(schedule(2048, 64, kUnbounded, kUnbounded), "serial1");
    EXPECT_EQ(schedule(4096, 64, kUnbounded, kUnbounded), "specialised3");
    EXPECT_EQ(schedule(4096, 64, kUnbounded, kCausal), "serial1");        // 2048 keys a row on average
    EXPECT_EQ(schedule(8192, 64, kUnbounded, kCausal), "specialised3");   // 4096
    EXPECT_EQ(schedule(16384, 64, kUnbounded, kCausal), "specialised3");  // 8192
    EXPECT_EQ(schedule(16384, 64, 1024, kCausal), "serial1");             // a 1025-key window
    EXPECT_EQ(schedule(1, 64, kUnbounded, kUnbounded), "serial1");
}

// With ALiBi, long rows at head dim 64 take the two consumer warpgroups, whose softmax falls back to the exact form
// when speculation keeps failing (the bias rises toward each row's own key); short rows and other head dims as
// without.
TEST(Sm90Eligibility, DefaultScheduleWithAlibiAvoidsThreeWarpgroups) {
    static const float slopes[8] = {};
    auto schedule = [](int seqlen, int head_dim, bool alibi) {
        AttnParams p = dense(1, seqlen, seqlen, 8, 8, head_dim, head_dim);
        if (alibi) p.alibi_slopes = slopes;
        return std::string(sm90_default_schedule(p));
    };
    EXPECT_EQ(schedule(8192, 64, false), "specialised3");
    EXPECT_EQ(schedule(8192, 64, true), "specialised");
    EXPECT_EQ(schedule(2048, 64, true), "serial1");
    EXPECT_EQ(schedule(8192, 128, true), "specialised");
}

// The wide key tiles by default (sm90_wide_key_tiles, FLASHATTN_SM90_BLOCK_N unset): without masks from 4096 keys up
// to head dim 128 and at any length at 256; with a causal mask where rows see 1024 keys or more on average at 256,
// 4096 or more at 65-128 (not at 64); never with a window.
TEST(Sm90Eligibility, WideKeyTilesFollowMasksHeadDimAndLength) {
    if (std::getenv("FLASHATTN_SM90_BLOCK_N") || std::getenv("FLASHATTN_SM90_PERSISTENT"))
        GTEST_SKIP() << "FLASHATTN_SM90_BLOCK_N or FLASHATTN_SM90_PERSISTENT is set";
    auto wide = [](int seqlen, int head_dim, int window_left, int window_right) {
        AttnParams p = dense(1, seqlen, seqlen, 8, 8, head_dim, head_dim);
        p.window_left = window_left, p.window_right = window_right;
        return sm90_wide_key_tiles(p);
    };
    constexpr int kUnbounded = -1, kCausal = 0;
    EXPECT_FALSE(wide(2048, 128, kUnbounded, kUnbounded));
    EXPECT_TRUE(wide(4096, 128, kUnbounded, kUnbounded));
    EXPECT_FALSE(wide(4096, 128, kUnbounded, kCausal));   // 2048 keys a row on average
    EXPECT_TRUE(wide(8192, 128, kUnbounded, kCausal));    // 4096
    EXPECT_TRUE(wide(16384, 96, kUnbounded, kCausal));
    EXPECT_FALSE(wide(16384, 64, kUnbounded, kCausal));
    EXPECT_TRUE(wide(512, 256, kUnbounded, kUnbounded));
    EXPECT_FALSE(wide(1024, 256, kUnbounded, kCausal));  // 512 keys a row on average
    EXPECT_TRUE(wide(2048, 256, kUnbounded, kCausal));   // 1024
    EXPECT_FALSE(wide(16384, 256, 4096, kCausal));       // a window
}

// The persistent kernel by default (sm90_default_persistent): head dims 65-128, rows seeing fewer than 3072 keys on average
// (causal halves the mean), not varlen, an output whose strides the copy engine can step.
TEST(Sm90Eligibility, PersistentByDefaultForShortRowsAtHeadDims65To128) {
    auto persistent = [](int seqlen, int head_dim, int window_right) {
        AttnParams p = dense(2, seqlen, seqlen, 8, 8, head_dim, head_dim);
        p.window_right = window_right;
        return sm90_default_persistent(p);
    };
    constexpr int kUnbounded = -1, kCausal = 0;
    EXPECT_TRUE(persistent(512, 128, kUnbounded));
    EXPECT_TRUE(persistent(2048, 128, kUnbounded));
    EXPECT_FALSE(persistent(4096, 128, kUnbounded));
    EXPECT_TRUE(persistent(2048, 128, kCausal));
    EXPECT_TRUE(persistent(4096, 128, kCausal));   // 2049 keys a row on average (16 rows sampled)
    EXPECT_FALSE(persistent(6144, 128, kCausal));  // 3073
    EXPECT_FALSE(persistent(8192, 128, kCausal));
    EXPECT_TRUE(persistent(1000, 72, kUnbounded));
    EXPECT_FALSE(persistent(512, 64, kUnbounded));
    EXPECT_FALSE(persistent(512, 256, kUnbounded));
    AttnParams p = dense(2, 512, 512, 8, 8, 128, 128);
    p.out_row_stride += 2;  // 4-byte aligned rows: not a tensor map's stride
    EXPECT_FALSE(sm90_default_persistent(p));
    p = dense(2, 512, 512, 8, 8, 192, 128);
    EXPECT_FALSE(sm90_default_persistent(p));
}

// Turns between the consumer warpgroups (sm90_takes_turns): always up to head dim 128 and at 192/128; at head dim 256
// only where rows see fewer than 2048 keys on average (causal halves the mean).
TEST(Sm90Eligibility, TurnsUpTo128AndForShortRowsAt256) {
    if (std::getenv("FLASHATTN_SM90_SCHEDULE")) GTEST_SKIP() << "FLASHATTN_SM90_SCHEDULE is set";
    auto turns = [](int seqlen, int head_dim, int head_dim_v, int window_right) {
        AttnParams p = dense(2, seqlen, seqlen, 8, 8, head_dim, head_dim_v);
        p.window_right = window_right;
        return sm90_takes_turns(p);
    };
    constexpr int kUnbounded = -1, kCausal = 0;
    EXPECT_TRUE(turns(16384, 128, 128, kUnbounded));
    EXPECT_TRUE(turns(16384, 64, 64, kUnbounded));
    EXPECT_TRUE(turns(16384, 192, 128, kUnbounded));
    EXPECT_TRUE(turns(1024, 256, 256, kUnbounded));
    EXPECT_FALSE(turns(2048, 256, 256, kUnbounded));
    EXPECT_TRUE(turns(2048, 256, 256, kCausal));     // 1024 keys a row on average
    EXPECT_FALSE(turns(4096, 256, 256, kCausal));    // 2049 (16 rows sampled)
    EXPECT_FALSE(turns(16384, 256, 256, kCausal));
    EXPECT_FALSE(turns(16384, 200, 200, kUnbounded));  // padded to 256
}

}  // namespace
}  // namespace flashattn::kernels
#endif
