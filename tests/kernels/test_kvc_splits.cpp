// The kv-cache forward's split heuristic (host code, no GPU needed): decode blocks all take about as long, so the
// count is chosen by how full the last wave of blocks is.
#include <gtest/gtest.h>

#include "common/build_config.h"

#if FLASHATTN_WITH_CUDA
#include "kernels/launch.h"

namespace flashattn::kernels {
namespace {

constexpr int64_t kSms = 132;  // an H100's

TEST(KvcSplits, EnoughFullWavesNeedNoSplit) {
    // 512 blocks on 264 slots: 1.94 waves, the last one nearly full.
    EXPECT_EQ(kvc_splits(512, 256, kSms * 2), 1);
}

TEST(KvcSplits, ASparseLastWaveIsFilledBySplitting) {
    // 512 blocks on 396 slots: 1.29 waves (65% efficient); 2 splits make 2.59 waves (86%), within reach of the
    // best (3 splits, 97%), and fewer splits win.
    EXPECT_EQ(kvc_splits(512, 256, kSms * 3), 2);
}

TEST(KvcSplits, FewBlocksSplitAsFarAsTheTilesAllow) {
    // Batch 1, 8 kv heads, 64 key tiles: at most 64 / 2 splits; 32 x 8 = 256 blocks fill 97% of 264 slots, the
    // best on offer; 28 splits (85%) is the fewest within 85% of it, and as 28 splits take 3 tiles each, 22 of
    // them hold every tile.
    EXPECT_EQ(kvc_splits(8, 64, kSms * 2), 22);
    // A short cache: never fewer than 2 tiles a split.
    EXPECT_EQ(kvc_splits(8, 3, kSms * 2), 1);
    EXPECT_EQ(kvc_splits(8, 4, kSms * 2), 2);
}

TEST(KvcSplits, CappedAt128) {
    EXPECT_LE(kvc_splits(1, 1 << 20, kSms * 4), 128);
}

TEST(KvcSplits, DegenerateInputsGiveOne) {
    EXPECT_EQ(kvc_splits(0, 100, kSms), 1);
    EXPECT_EQ(kvc_splits(10, 0, kSms), 1);
    EXPECT_EQ(kvc_splits(10, 100, 0), 1);
}

}  // namespace
}  // namespace flashattn::kernels
#endif
