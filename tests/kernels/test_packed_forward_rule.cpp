// When the forward runs its query heads packed on the kv-cache kernel (packed_forward_pays, src/kernels/dispatch.cpp):
// sizes only, no GPU needed. The shapes are bench/bench_short_q.py's (32 query heads, head dim 128), each with the
// way the H100 measurement went (bench/results/2026-11-24_h100_session10.md).
#include <gtest/gtest.h>

#include "common/build_config.h"

#if FLASHATTN_WITH_CUDA
#include "kernels/launch.h"

namespace flashattn::kernels {
namespace {

constexpr int kHeads = 32;

TEST(PackedForwardRule, GqaPacksWhileTheQueryHeadsOfAKvHeadFitOneTile) {
    // 4 query heads a kv head: 1 and 16 query rows pack (1.4-4.6x) at any batch; 64 rows (256 packed) at batch 8 do
    // not (0.75-0.92x).
    EXPECT_TRUE(packed_forward_pays(32, 1, 16384, kHeads, 8));
    EXPECT_TRUE(packed_forward_pays(8, 16, 1024, kHeads, 8));
    EXPECT_FALSE(packed_forward_pays(8, 64, 4096, kHeads, 8));
}

TEST(PackedForwardRule, WithoutGqaOnlyASmallGridPacks) {
    // One query head a kv head: batch 1 (32 tiled blocks) packs (1.08-1.8x); batch 32 (1024 blocks) does not, the
    // tiled forward streaming K/V faster (packed 0.95x).
    EXPECT_TRUE(packed_forward_pays(1, 1, 4096, kHeads, kHeads));
    EXPECT_TRUE(packed_forward_pays(1, 64, 1024, kHeads, kHeads));
    EXPECT_FALSE(packed_forward_pays(32, 1, 4096, kHeads, kHeads));
}

TEST(PackedForwardRule, ManyQueryRowsNeedManyKeysEach) {
    // A small grid with 128 query rows: packed 1.09-1.3x at 4k-16k keys, 0.86x at 1k; 256 rows never.
    EXPECT_TRUE(packed_forward_pays(1, 128, 4096, kHeads, 8));
    EXPECT_FALSE(packed_forward_pays(1, 128, 1024, kHeads, 8));
    EXPECT_FALSE(packed_forward_pays(1, 256, 16384, kHeads, 8));
}

TEST(PackedForwardRule, TheHopperKvCacheKernelPacksMoreGqaRows) {
    // 64 query rows of 4 heads (256 packed rows) at batch 8 and 32, 4k keys: 1.34 / 1.37x on the Hopper kv-cache
    // kernel, 0.78 / 0.76x on the Ampere-class one; 256 query rows (1024 packed) 0.75-0.76x even there.
    EXPECT_TRUE(packed_forward_pays(8, 64, 4096, kHeads, 8, /*hopper_kvcache=*/true));
    EXPECT_FALSE(packed_forward_pays(8, 64, 4096, kHeads, 8, /*hopper_kvcache=*/false));
    EXPECT_FALSE(packed_forward_pays(32, 256, 4096, kHeads, 8, /*hopper_kvcache=*/true));
}

TEST(PackedForwardRule, FewKeysNeverPack) {
    EXPECT_FALSE(packed_forward_pays(1, 1, 255, kHeads, 8));
    EXPECT_FALSE(packed_forward_pays(2, 5, 7, 4, 4));
}

}  // namespace
}  // namespace flashattn::kernels
#endif
