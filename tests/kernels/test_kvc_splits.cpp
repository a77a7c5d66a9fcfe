// The kv-cache forward's split heuristic (host code, no GPU needed): a grid of about a block an SM or more is left
// whole; a smaller one is split by how full the last wave of resident blocks is (decode blocks all take about as
// long). And the Hopper kv-cache kernel's kv heads a block on paged caches (kvc_head_group), its evict-first copies
// (kvc_reads_once), the tiles it keeps in flight (kvc_tiles_ahead) and its placement clusters (kvc_place_blocks).
#include <gtest/gtest.h>

#include "common/build_config.h"

#if FLASHATTN_WITH_CUDA
#include "kernels/launch.h"
#include "kernels/sm80/kvcache_plan.h"

namespace flashattn::kernels {
namespace {

constexpr int64_t kSms = 132;  // an H100's

TEST(KvcSplits, AGridThatFillsTheSmsIsLeftWhole) {
    // 512 blocks on 264 slots: 1.94 waves, the last one nearly full.
    EXPECT_EQ(kvc_splits(512, 256, kSms, kSms * 2), 1);
    // 512 blocks on 396 slots (1.29 waves, 65% efficient): still a block an SM and more, so no split either.
    EXPECT_EQ(kvc_splits(512, 256, kSms, kSms * 3), 1);
    // Batch 16 x 8 kv heads: 128 blocks, 97% of the SMs; splitting would fill the 264 slots but add the combine.
    EXPECT_EQ(kvc_splits(128, 16, kSms, kSms * 2), 1);
}

TEST(KvcSplits, ASmallGridIsSplitToFillTheSlots) {
    // 64 blocks on 264 slots: 4 splits make 256 blocks (97%), the best; 3 (73%) are not within 85% of it.
    EXPECT_EQ(kvc_splits(64, 64, kSms, kSms * 2), 4);
}

TEST(KvcSplits, FewBlocksSplitAsFarAsTheTilesAllow) {
    // Batch 1, 8 kv heads, 64 key tiles: at most 64 / 2 splits; 32 x 8 = 256 blocks fill 97% of 264 slots, the
    // best on offer; 28 splits (85%) is the fewest within 85% of it, and as 28 splits take 3 tiles each, 22 of
    // them hold every tile.
    EXPECT_EQ(kvc_splits(8, 64, kSms, kSms * 2), 22);
    // A short cache: never fewer than 2 tiles a split.
    EXPECT_EQ(kvc_splits(8, 3, kSms, kSms * 2), 1);
    EXPECT_EQ(kvc_splits(8, 4, kSms, kSms * 2), 2);
}

TEST(KvcSplits, FillingTheWavesTakesTheFullerCount) {
    // batch 1 x 8 kv heads, 64k keys: 29 splits reach 0.88 of a full wave; 32 reach 0.97 (33 would fill it)
    EXPECT_EQ(kvc_splits(8, 1024, kSms, kSms * 2), 29);
    EXPECT_EQ(kvc_splits(8, 1024, kSms, kSms * 2, kKvcFillWaves), 32);
    EXPECT_EQ(kvc_splits(512, 256, kSms, kSms * 2, kKvcFillWaves), 1);  // a full grid stays whole either way
}

TEST(KvcSplits, CappedAt128) {
    EXPECT_LE(kvc_splits(1, 1 << 20, kSms, kSms * 4), 128);
}

TEST(KvcSplits, DegenerateInputsGiveOne) {
    EXPECT_EQ(kvc_splits(0, 100, kSms, kSms), 1);
    EXPECT_EQ(kvc_splits(10, 0, kSms, kSms), 1);
    EXPECT_EQ(kvc_splits(10, 100, kSms, 0), 1);
}

// Clusters of 2-16 blocks resident at once at two blocks an SM, as an H100 reports them
// (bench/probe_cluster_capacity.cu).
int h100_cluster_capacity(int splits) {
    constexpr int kCapacity[17] = {0, 0, 132, 79, 62, 47, 39, 32, 30, 23, 21, 16, 16, 14, 14, 14, 14};
    return splits >= 0 && splits <= 16 ? kCapacity[splits] : 0;
}

TEST(KvcSplits, ClustersThatDoNotFitTradeForAFittingCount) {
    // Batch 4 x 8 kv heads (32 units) at 8 splits of 16k keys (256 tiles): 30 clusters of 8 fit, 32 of 7 do.
    EXPECT_EQ(kvc_cluster_fitting_splits(8, 32, 256, h100_cluster_capacity), 7);
    // 30 units fit at 8: unchanged.
    EXPECT_EQ(kvc_cluster_fitting_splits(8, 30, 256, h100_cluster_capacity), 8);
    // 16 units at 16 splits: clusters of 12 are the most that fit (16 of them), but 12 is less than 0.85 of 16 (14
    // fit 14 clusters): the combine keeps 16.
    EXPECT_EQ(kvc_cluster_fitting_splits(16, 16, 256, h100_cluster_capacity), 16);
    // 31 units at 8 splits: 7 (32 clusters) is the one count tried.
    EXPECT_EQ(kvc_cluster_fitting_splits(8, 31, 256, h100_cluster_capacity), 7);
    // 64 units: 7 does not fit (32 clusters): the combine keeps 8.
    EXPECT_EQ(kvc_cluster_fitting_splits(8, 64, 256, h100_cluster_capacity), 8);
    // Counts no cluster takes are left alone.
    EXPECT_EQ(kvc_cluster_fitting_splits(1, 32, 256, h100_cluster_capacity), 1);
    EXPECT_EQ(kvc_cluster_fitting_splits(22, 8, 256, h100_cluster_capacity), 22);
}

TEST(KvcSplits, LongSplitsKeepTheirCount) {
    // 64k keys (1024 tiles): 7 splits would read 147 tiles each, past kKvcFitClusterMaxTiles: 8 and the combine.
    EXPECT_EQ(kvc_cluster_fitting_splits(8, 32, 1024, h100_cluster_capacity), 8);
    // At the limit (7 x 64 tiles) the trade is made; one tile more and it is not.
    EXPECT_EQ(kvc_cluster_fitting_splits(8, 32, 7 * kKvcFitClusterMaxTiles, h100_cluster_capacity), 7);
    EXPECT_EQ(kvc_cluster_fitting_splits(8, 32, 7 * kKvcFitClusterMaxTiles + 1, h100_cluster_capacity), 8);
    // A caller's own limit (FLASHATTN_KVC_FIT_CLUSTER=1: none).
    EXPECT_EQ(kvc_cluster_fitting_splits(8, 32, 1024, h100_cluster_capacity, int64_t(1) << 40), 7);
}

// The Hopper kernel's kv heads a block (kvc_head_group): 64 rows x 64 key-rows tiles.
constexpr int kTileRows = 64, kTileKeys = 64;

TEST(KvcHeadGroup, PagesOfSixteenRowsTakeFourKvHeadsABlock) {
    EXPECT_EQ(kvc_piece_rows(16, kTileKeys), 16);
    EXPECT_EQ(kvc_head_group(16, 8, 4, kTileRows, kTileKeys), 4);   // decode, 32 query heads on 8
    EXPECT_EQ(kvc_head_group(48, 32, 1, kTileRows, kTileKeys), 4);  // any odd multiple of 16
    EXPECT_EQ(kvc_head_group(16, 8, 16, kTileRows, kTileKeys), 4);  // 4 query rows of 4 heads: 64 rows, full
}

TEST(KvcHeadGroup, FewerWhereTheHeadsOrTheRowsDoNotAllowFour) {
    EXPECT_EQ(kvc_head_group(16, 2, 4, kTileRows, kTileKeys), 2);   // 2 kv heads
    EXPECT_EQ(kvc_head_group(16, 6, 4, kTileRows, kTileKeys), 2);   // 4 does not divide 6
    EXPECT_EQ(kvc_head_group(16, 8, 20, kTileRows, kTileKeys), 2);  // 4 x 20 rows > 64
    EXPECT_EQ(kvc_head_group(16, 8, 40, kTileRows, kTileKeys), 1);
    EXPECT_EQ(kvc_head_group(16, 7, 4, kTileRows, kTileKeys), 1);
}

TEST(KvcHeadGroup, OneForDenseCachesAndLargerPieces) {
    EXPECT_EQ(kvc_head_group(0, 8, 4, kTileRows, kTileKeys), 1);    // dense
    EXPECT_EQ(kvc_head_group(32, 8, 4, kTileRows, kTileKeys), 1);   // 32-row pieces
    EXPECT_EQ(kvc_head_group(64, 8, 4, kTileRows, kTileKeys), 1);
    EXPECT_EQ(kvc_head_group(256, 8, 4, kTileRows, kTileKeys), 1);
}

TEST(KvcHeadGroup, TheLargestGroupWhoseGridStillFillsTheSlots) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_head_group_for_grid(4, 64 * 32, kSlots), 4);  // 512 blocks of 4 kv heads
    EXPECT_EQ(kvc_head_group_for_grid(4, 64 * 8, kSlots), 2);   // 256 blocks of 2 (128 of 4 would be one an SM)
    EXPECT_EQ(kvc_head_group_for_grid(4, 32 * 8, kSlots), 1);   // 256 blocks of one
    EXPECT_EQ(kvc_head_group_for_grid(4, 16 * 8, kSlots), 1);   // none fills it: one kv head a block
    EXPECT_EQ(kvc_head_group_for_grid(1, 64 * 32, kSlots), 1);
}

TEST(KvcHeadGroup, EightKvHeadsWhereTheyDivideTheHeadsAndTheirRowsFit) {
    EXPECT_EQ(kvc_wide_head_group(32, 1, kTileRows, kTileKeys), 8);   // decode, no GQA: 8 rows
    EXPECT_EQ(kvc_wide_head_group(8, 4, kTileRows, kTileKeys), 8);    // 32 query heads on 8: 32 rows
    EXPECT_EQ(kvc_wide_head_group(32, 8, kTileRows, kTileKeys), 8);   // 64 rows, full
    EXPECT_EQ(kvc_wide_head_group(8, 16, kTileRows, kTileKeys), 1);   // 4 query rows of 4 heads: 128 rows > 64
    EXPECT_EQ(kvc_wide_head_group(12, 1, kTileRows, kTileKeys), 1);   // 8 does not divide 12
    EXPECT_EQ(kvc_wide_head_group(4, 1, kTileRows, kTileKeys), 1);
    EXPECT_EQ(kvc_wide_head_group(32, 1, kTileRows, 32), 1);          // a 32-key tile: 4 keys of each, not an n8 tile
}

TEST(KvcHeadGroup, DenseCachesTakeTheSmallestGroupWhoseGridFitsTheSlots) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_head_group(kPageBoxRows, 8, 4, kTileRows, kTileKeys), 4);  // a dense cache's most: pieces of 16
    EXPECT_EQ(kvc_dense_head_group(1, 4, 64 * 8, kSlots), 2);   // 256 blocks of 2: two an SM (128 of 4 fit too)
    EXPECT_EQ(kvc_dense_head_group(1, 4, 16 * 32, kSlots), 2);
    EXPECT_EQ(kvc_dense_head_group(1, 4, 32 * 32, kSlots), 4);  // 512 of 2 would be more than the slots; 256 of 4
    EXPECT_EQ(kvc_dense_head_group(1, 4, 64 * 32, kSlots), 1);  // 512 of 4 would be more than the slots
    EXPECT_EQ(kvc_dense_head_group(1, 4, 32 * 8, kSlots), 1);   // 64 of 4: splits would fill most of the GPU
    EXPECT_EQ(kvc_dense_head_group(1, 4, 1 * 8, kSlots), 1);
    EXPECT_EQ(kvc_dense_head_group(1, 2, 64 * 6, kSlots), 2);   // pairs (6 kv heads): 192 blocks
}

TEST(KvcHeadGroup, DenseCachesTakeEightWhereTheirGridFitsElseTheSmallestThatDoes) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_dense_head_group(8, 4, 32 * 32, kSlots), 8);  // 128 blocks of 8 (256 of 4 also fit: 8 first)
    EXPECT_EQ(kvc_dense_head_group(8, 4, 64 * 32, kSlots), 8);  // 256 of 8 (512 of 4 would not fit)
    EXPECT_EQ(kvc_dense_head_group(8, 4, 64 * 8, kSlots), 2);   // 64 of 8: too few; 256 of 2
    EXPECT_EQ(kvc_dense_head_group(8, 4, 16 * 32, kSlots), 2);
    EXPECT_EQ(kvc_dense_head_group(8, 4, 32 * 8, kSlots), 1);   // 32 of 8, 64 of 4: neither
    EXPECT_EQ(kvc_dense_head_group(8, 4, 128 * 32, kSlots), 1); // 512 of 8: more than the slots
}

TEST(KvcOneProducer, OneProducerWarpWhereABlocksTilesAllFitTheRings) {
    constexpr int kRingStages = 2;
    EXPECT_TRUE(kvc_one_producer(16, 8, kRingStages));     // batch 1 x 8 kv heads, 1k keys, 8 splits: 2 tiles a block
    EXPECT_TRUE(kvc_one_producer(3, 2, kRingStages));      // 2 and 1
    EXPECT_TRUE(kvc_one_producer(1, 1, kRingStages));
    EXPECT_FALSE(kvc_one_producer(64, 16, kRingStages));   // 4k keys, 16 splits: 4 tiles a block
    EXPECT_FALSE(kvc_one_producer(17, 8, kRingStages));    // one split of 3
    EXPECT_FALSE(kvc_one_producer(64, 1, kRingStages));    // the 128-block grids: 64 tiles a block
    EXPECT_FALSE(kvc_one_producer(0, 1, kRingStages));     // nothing to read: the default
    EXPECT_FALSE(kvc_one_producer(16, 0, kRingStages));
}

TEST(KvcPagesInAddressOrder, PagedBlocksOfThirtyTwoTilesUpToOneWindowOrFourOnTwoBlocksAnSmWithoutAlibi) {
    constexpr int kKeys = 64;  // a tile's keys, one kv head a block
    auto order = [&](int64_t key_tiles, int splits, int keys, int page, int64_t blocks = 128, bool paged = true,
                     bool alibi = false) {
        return kvc_pages_in_address_order(paged, alibi, key_tiles, splits, keys, page, blocks, kSms);
    };
    EXPECT_TRUE(order(64, 1, kKeys, 16));     // 16 x 8 kv heads x 4k: 64 tiles
    EXPECT_TRUE(order(1024, 32, kKeys, 16));  // 32 tiles a split
    EXPECT_TRUE(order(1000, 32, kKeys, 16));  // 32 (31.25 rounded up)
    EXPECT_FALSE(order(992, 32, kKeys, 16));  // 31
    EXPECT_FALSE(order(256, 16, kKeys, 16));  // batch 1 x 8 x 16k: 16 a block
    EXPECT_TRUE(order(256, 1, kKeys, 16));    // 16 x 8 x 16k: 1024 pages
    EXPECT_TRUE(order(1024, 1, kKeys, 64));   // 64k keys: 1024 pages of 64
    EXPECT_TRUE(order(512, 1, 32, 16));       // two kv heads a block: 1024 pages
    // Past one window: sorted whole (up to 4096 pages) where the grid has more blocks than SMs.
    EXPECT_FALSE(order(257, 1, kKeys, 16));             // 1028 pages, 128 blocks
    EXPECT_FALSE(order(1024, 1, kKeys, 16));            // 16 x 8 x 64k page 16: 4096 pages, 128 blocks
    EXPECT_FALSE(order(1024, 1, kKeys, 16, kSms));      // one block an SM
    EXPECT_TRUE(order(2048, 1, 32, 16, 256));           // 64 x 8 x 64k page 16: 256 blocks of two kv heads
    EXPECT_TRUE(order(257, 1, kKeys, 16, kSms + 1));
    EXPECT_FALSE(order(1025, 1, kKeys, 16, 512));       // 4100 pages: past four windows
    EXPECT_TRUE(order(2048, 2, kKeys, 16, 512));        // two splits of 4096 pages
    EXPECT_FALSE(order(64, 1, kKeys, 256));             // pages of 256: not measured
    EXPECT_FALSE(order(64, 1, kKeys, 0, 128, false));   // dense
    EXPECT_FALSE(order(64, 1, kKeys, 16, 128, true, true));  // ALiBi needs the keys' positions
    EXPECT_FALSE(order(64, 0, kKeys, 16));
}

TEST(KvcManyWaves, OneKvHeadABlockFromSixWavesOfItWithOneQueryRowAKvHead) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_TRUE(kvc_many_waves(64 * 32, 1, kSlots));    // 2048 blocks: 7.8 waves
    EXPECT_FALSE(kvc_many_waves(64 * 32, 4, kSlots));   // four query rows a kv head (GQA, or 4 tokens)
    EXPECT_FALSE(kvc_many_waves(32 * 32, 1, kSlots));   // 1024: 3.9
    EXPECT_FALSE(kvc_many_waves(64 * 8, 1, kSlots));
    EXPECT_FALSE(kvc_many_waves(1 << 20, 1, 0));        // no slots known
}

TEST(KvcSmallPagePieces, PagesOfAnOddMultipleOfSixteenRows) {
    EXPECT_TRUE(kvc_small_page_pieces(true, 16, kTileKeys));
    EXPECT_TRUE(kvc_small_page_pieces(true, 48, kTileKeys));
    EXPECT_FALSE(kvc_small_page_pieces(true, 64, kTileKeys));   // pieces of 64
    EXPECT_FALSE(kvc_small_page_pieces(true, 32, kTileKeys));   // pieces of 32
    EXPECT_FALSE(kvc_small_page_pieces(false, 16, kTileKeys));  // dense
}

TEST(KvcManyWaves, SplitsOfAtLeastThirtyTwoTilesUpToFour) {
    EXPECT_EQ(kvc_many_wave_splits(16), 1);   // 1k keys of 64
    EXPECT_EQ(kvc_many_wave_splits(63), 1);
    EXPECT_EQ(kvc_many_wave_splits(64), 2);   // 4k
    EXPECT_EQ(kvc_many_wave_splits(96), 3);
    EXPECT_EQ(kvc_many_wave_splits(256), 4);  // 16k
    EXPECT_EQ(kvc_many_wave_splits(1024), 4);
    EXPECT_EQ(kvc_many_wave_splits(0), 1);
}

// Tiles ahead of the Hopper kernel's consumers: one where two blocks an SM each keep a tile in flight (about the two
// an SM the memory system reads fastest with), the rings' stages at one block an SM, on short blocks, and on many
// waves of blocks shorter than 32 tiles.
TEST(KvcTilesAhead, OneAheadWhereTwoBlocksAnSmReadLongEnough) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_tiles_ahead(256, 32, kSms, kSlots), 1);         // batch 1 x 8 kv heads x 64k: 32 splits of 32 tiles
    EXPECT_EQ(kvc_tiles_ahead(256, 8, kSms, kSlots), 1);          // batch 1 x 8 x 16k, 4 x 8 x 4k, 1 x 32 x 4k
    EXPECT_EQ(kvc_tiles_ahead(64 * 32 * 4, 64, kSms, kSlots), 1); // batch 64 x 32 x 16k: 4 splits, 31 waves
    EXPECT_EQ(kvc_tiles_ahead(128, 64, kSms, kSlots), 0);         // batch 16 x 8 x 4k: one block an SM
    EXPECT_EQ(kvc_tiles_ahead(176, 64, kSms, kSlots), 0);         // 1.33 blocks an SM: not more
    EXPECT_EQ(kvc_tiles_ahead(180, 64, kSms, kSlots), 1);
    EXPECT_EQ(kvc_tiles_ahead(64, 8, kSms, kSlots), 0);           // batch 1 x 8 x 4k: 8 splits of 8 tiles
    EXPECT_EQ(kvc_tiles_ahead(256, 4, kSms, kSlots), 0);          // short blocks
    EXPECT_EQ(kvc_tiles_ahead(64 * 32, 16, kSms, kSlots), 0);     // batch 64 x 32 x 1k: many waves of 16 tiles
    EXPECT_EQ(kvc_tiles_ahead(512, 16, kSms, kSms), 0);           // one block an SM resident
    EXPECT_EQ(kvc_tiles_ahead(256, 32, 0, kSlots), 0);            // nothing known of the GPU
}

// Fast memory: an H200's bandwidth an SM (4.8 TB/s over 132 SMs), not an H100's (3.35 TB/s), nor an unknown one.
TEST(KvcFastMemory, FromThirtyGigabytesASecondAnSm) {
    EXPECT_TRUE(kvc_fast_memory(4'800'000'000'000, kSms));
    EXPECT_FALSE(kvc_fast_memory(3'350'000'000'000, kSms));
    EXPECT_TRUE(kvc_fast_memory(3'960'000'000'000, kSms));  // exactly 30 GB/s an SM
    EXPECT_FALSE(kvc_fast_memory(0, kSms));
    EXPECT_FALSE(kvc_fast_memory(4'800'000'000'000, 0));
}

// Fast memory: a grid of about one block an SM, which kvc_splits leaves whole, splits to two blocks an SM where each
// split keeps 4k keys (64 tiles).
TEST(KvcTwoPerSmSplits, GridsOfAboutOneBlockAnSmTakeTwo) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 128, kSms, kSlots), 2);   // batch 16 x 8 kv heads x 8k: 64 tiles a split
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 1024, kSms, kSlots), 2);  // 16 x 8 x 64k, 4 x 32 x 64k
    EXPECT_EQ(kvc_two_per_sm_splits(1, kSms, 128, kSms, kSlots), 2);
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 64, kSms, kSlots), 1);    // 4k keys: one split of 64 tiles
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 127, kSms, kSlots), 1);   // splits of 63 tiles are too short
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 16, kSms, kSlots), 1);    // 1k keys
    EXPECT_EQ(kvc_two_per_sm_splits(1, 133, 128, kSms, kSlots), 1);   // over half the slots
    EXPECT_EQ(kvc_two_per_sm_splits(1, 256, 128, kSms, kSlots), 1);   // already two an SM
    EXPECT_EQ(kvc_two_per_sm_splits(1, 100, 128, kSms, kSlots), 1);   // below 0.9 of the SMs: kvc_splits' grids
    EXPECT_EQ(kvc_two_per_sm_splits(4, 64, 128, kSms, kSlots), 4);    // split by the wave rule already
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 128, kSms, kSms), 1);     // one block an SM resident
    EXPECT_EQ(kvc_two_per_sm_splits(1, 64, 256, 66, 66 * 4), 4);      // four blocks an SM resident: four
}

// Fast memory: paged caches of long pieces take pairs of kv heads in place of the wide group of 8 where its grid holds
// two blocks an SM and a pair's block reads 64 tiles or more.
TEST(KvcFastMemoryPagedGroup, PairsInPlaceOfEightOnGridsOfTwoAnSm) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_fast_memory_paged_group(8, 8, 64 * 32, kSlots, 128), 2);   // batch 64 x 32 x 4k: 256 blocks of 8
    EXPECT_EQ(kvc_fast_memory_paged_group(8, 8, 64 * 32, kSlots, 64), 2);    // 2k keys
    EXPECT_EQ(kvc_fast_memory_paged_group(8, 8, 64 * 32, kSlots, 32), 8);    // 1k keys: a pair's block reads 32 tiles
    EXPECT_EQ(kvc_fast_memory_paged_group(8, 8, 32 * 32, kSlots, 512), 8);   // 128 blocks of 8: one an SM
    EXPECT_EQ(kvc_fast_memory_paged_group(2, 1, 64 * 8, kSlots, 512), 2);    // not the wide group: as it was
    EXPECT_EQ(kvc_fast_memory_paged_group(4, 8, 64 * 32, kSlots, 512), 4);
    EXPECT_EQ(kvc_fast_memory_paged_group(1, 1, 64 * 32, kSlots, 512), 1);
}

// Fast memory: paged caches of long pieces take fours in place of pairs on grids of two pairs an SM (512 kv heads)
// where a four's rows stay within 16 and its blocks read 16k keys or more (1024 tiles of 16).
TEST(KvcFastMemoryPagedGroup, FoursInPlaceOfPairsOnLongCaches) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 4, 64 * 8, kSlots, 1024), 4);    // 64 x 8 x 16k, one query row
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 4, 64 * 8, kSlots, 512), 2);     // 8k keys: pages of 1 MiB and more
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 1, 16 * 32, kSlots, 4096), 4);   // 16 x 32 x 64k
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 4, 16 * 32, kSlots, 1024), 4);   // four query rows of a kv head: 16
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 16, 64 * 8, kSlots, 1024), 2);   // 64 rows a four: pairs
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 4, 64 * 8, kSlots, 256), 2);     // 4k keys
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 2, 4, 64 * 8, kSlots, 1024), 2);    // the instance allows no four
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 4, 32 * 8, kSlots, 1024), 2);    // 128 pairs: one an SM
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 4, 128 * 8, kSlots, 1024), 2);   // 512 pairs: more than the slots
    EXPECT_EQ(kvc_fast_memory_paged_quads(8, 8, 1, 64 * 32, kSlots, 1024), 8);   // not a pair: as it was
    EXPECT_EQ(kvc_fast_memory_paged_quads(1, 4, 1, 16 * 32, kSlots, 4096), 1);
}

// Pages below 1 MiB take fours from 8k keys (512 tiles of 16); pages of 1 MiB and more from 16k, as dense caches.
TEST(KvcFastMemoryPagedGroup, FoursFrom8kOnPagesBelowOneMiB) {
    constexpr int64_t kSlots = kSms * 2;
    constexpr int64_t kRowBytes = 128 * 2;                        // head dim 128, bf16
    const int64_t page64x32 = kvc_paged_quad_min_tiles(64 * 32 * kRowBytes);     // 512 KiB
    const int64_t page256x8 = kvc_paged_quad_min_tiles(256 * 8 * kRowBytes);     // 512 KiB
    const int64_t page256x32 = kvc_paged_quad_min_tiles(256 * 32 * kRowBytes);   // 2 MiB
    EXPECT_EQ(page64x32, 512);
    EXPECT_EQ(page256x8, 512);
    EXPECT_EQ(page256x32, 1024);
    EXPECT_EQ(kvc_paged_quad_min_tiles(16 * 32 * kRowBytes), 512);                // page 16
    EXPECT_EQ(kvc_page_bytes(true, 64 * 32 * 128), 64 * 32 * kRowBytes);          // a page's stride in elements
    EXPECT_EQ(kvc_page_bytes(false, 64 * 32 * 128), 0);                           // a dense cache
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 1, 16 * 32, kSlots, 512, page64x32), 4);    // 16 x 32 x 8k page 64
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 4, 64 * 8, kSlots, 512, page256x8), 4);     // 64 x 8 x 8k page 256
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 1, 16 * 32, kSlots, 512, page256x32), 2);   // 16 x 32 x 8k page 256
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 1, 16 * 32, kSlots, 1024, page256x32), 4);  // ... 16k
    EXPECT_EQ(kvc_fast_memory_paged_quads(2, 4, 1, 16 * 32, kSlots, 256, page64x32), 2);    // 4k keys
}

// The fours' rule on pages of 16-row pieces, whose grouping (kvc_head_group_for_grid) gives pairs on these grids: the
// same counts decide (the planner passes group_max 4 there).
TEST(KvcFastMemoryPagedGroup, FoursOnPagesOfSixteenRows) {
    constexpr int64_t kSlots = kSms * 2;
    const int pairs = kvc_head_group_for_grid(4, 16 * 32, kSlots);
    EXPECT_EQ(pairs, 2);
    EXPECT_EQ(kvc_fast_memory_paged_quads(pairs, 4, 1, 16 * 32, kSlots, 1024), 4);   // 16 x 32 x 16k page 16
    EXPECT_EQ(kvc_fast_memory_paged_quads(pairs, 4, 16, 64 * 8, kSlots, 1024), 2);   // 64 rows a four
}

// Fast memory: dense caches take the fours' rule where a cache position holds 32 kv heads or more (batch 16 x 32), and
// keep their pairs at 8 kv heads (batch 64 x 8).
TEST(KvcFastMemoryPagedGroup, DenseFoursWithThirtyTwoKvHeads) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_fast_memory_dense_quads(2, 4, 32, 1, 16 * 32, kSlots, 1024), 4);   // 16 x 32 x 16k
    EXPECT_EQ(kvc_fast_memory_dense_quads(2, 4, 32, 4, 16 * 32, kSlots, 4096), 4);   // four query rows, 64k
    EXPECT_EQ(kvc_fast_memory_dense_quads(2, 4, 32, 1, 16 * 32, kSlots, 512), 2);    // 8k keys: dense keeps pairs
    EXPECT_EQ(kvc_fast_memory_dense_quads(2, 4, 8, 4, 64 * 8, kSlots, 1024), 2);     // 64 x 8: 8 kv heads a position
    EXPECT_EQ(kvc_fast_memory_dense_quads(2, 4, 32, 8, 16 * 32, kSlots, 1024), 2);   // 32 rows a four
    EXPECT_EQ(kvc_fast_memory_dense_quads(8, 8, 32, 1, 32 * 32, kSlots, 1024), 8);   // not a pair: as it was
}

// Fast memory: paged caches of pages from 1 MiB split in two only where each split keeps 32k keys (512 tiles).
TEST(KvcTwoPerSmSplits, BigPagesStayWholeUpTo32kKeys) {
    constexpr int64_t kSlots = kSms * 2;
    constexpr int64_t kPage256x32 = 256 * 32 * 128 * 2;  // page 256, 32 kv heads of 128: 2 MiB
    constexpr int64_t kPage256x16 = 256 * 16 * 128 * 2;  // 1 MiB
    constexpr int64_t kPage256x8 = 256 * 8 * 128 * 2;    // 512 KiB
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 128, kSms, kSlots, kPage256x32), 1);   // 4 x 32 x 8k
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 512, kSms, kSlots, kPage256x32), 1);   // 4 x 32 x 32k
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 1024, kSms, kSlots, kPage256x32), 2);  // 4 x 32 x 64k
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 256, kSms, kSlots, kPage256x16), 1);   // 8 x 16 x 16k
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 256, kSms, kSlots, kPage256x8), 2);    // 16 x 8 x 16k: as dense
    EXPECT_EQ(kvc_two_per_sm_splits(1, 128, 256, kSms, kSlots, 0), 2);             // dense
}

// Fast memory: the whole ring on paged caches of long blocks in units of one or two splits (of any count with 16-row
// pieces; not unsplit blocks of several kv heads on longer pieces), and on many-wave grids; else the H100 rule's count.
TEST(KvcFastMemoryTilesAhead, WholeRingOnLongPagedBlocksAndManyWaves) {
    constexpr int64_t kSlots = kSms * 2;
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 512, 2, kSlots), 0);  // 16 x 8 x 64k, two splits
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 64, 2, kSlots), 0);
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 64, 1, kSlots), 0);   // 32 x 8 x 4k, unsplit
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 128, 8, kSlots), 1);  // 4 x 8 x 64k, 8 splits
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 32, 8, kSlots), 1);   // 4 x 8 x 16k, 8 splits
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 8, 32, kSlots), 1);   // 1 x 8 x 16k, 32 splits
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/false, 64 * 32 * 2, 32, 2, kSlots), 0);  // many waves
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 64 * 8 * 4, 256, 4, kSlots), 0);   // many waves
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/false, 256, 512, 2, kSlots), 1);  // dense, one wave
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(0, /*paged=*/false, 128, 64, 1, kSlots), 0);
    // Pages of 16-row pieces: the whole ring in units of any split count, on blocks as long as the others need.
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 128, 8, kSlots, /*small_pieces=*/true), 0);
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 32, 8, kSlots, /*small_pieces=*/true), 1);
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/false, 256, 128, 8, kSlots, /*small_pieces=*/true), 1);
    // Unsplit grids of several kv heads a block on longer pieces keep one ahead (64 x 32 x 1k page 64, eights; 16 x 32
    // x 4k page 256, pairs); split ones, and 16-row page pieces, the whole ring.
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 128, 1, kSlots, false, /*head_group=*/8), 1);
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 128, 1, kSlots, false, /*head_group=*/2), 1);
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 512, 2, kSlots, false, /*head_group=*/4), 0);
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 128, 1, kSlots, /*small_pieces=*/true, 4), 0);
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 256, 128, 1, kSlots, false, /*head_group=*/1), 0);
    EXPECT_EQ(kvc_fast_memory_tiles_ahead(1, /*paged=*/true, 1024, 128, 1, kSlots, false, /*head_group=*/2), 0);
}

// Balanced splits: the whole ring's page-16 one-wave grids of 4-16 splits merged by the combine kernel (4 x 8 and
// 1 x 32 kv heads x 64k, eight splits, 256 blocks of 264 slots), two tiles a claim; not two splits, a cluster's merge,
// one tile ahead, longer pieces, several waves.
TEST(KvcBalanceTiles, WholeRingPageSixteenOneWaveGridsOfFourToSixteenCombinedSplits) {
    constexpr int64_t kSlots = 264;
    EXPECT_EQ(kvc_balance_tiles(/*small_pieces=*/true, /*tiles_ahead=*/0, 8, /*merge_in_cluster=*/false, 256, kSlots),
              2);
    EXPECT_EQ(kvc_balance_tiles(true, 0, 4, false, 128, kSlots), 2);
    EXPECT_EQ(kvc_balance_tiles(true, 0, 16, false, 256, kSlots), 2);
    EXPECT_EQ(kvc_balance_tiles(true, 0, 2, false, 256, kSlots), 0);   // 16 x 8 x 16k-64k page 16: 4.9-19 us lost
    EXPECT_EQ(kvc_balance_tiles(true, 0, 32, false, 256, kSlots), 0);  // 1 x 8 x 64k: not measured
    EXPECT_EQ(kvc_balance_tiles(true, 0, 8, true, 256, kSlots), 0);    // merged in a cluster
    EXPECT_EQ(kvc_balance_tiles(true, 1, 8, false, 256, kSlots), 0);   // one tile ahead: its SMs read alike
    EXPECT_EQ(kvc_balance_tiles(false, 0, 8, false, 256, kSlots), 0);  // pages of 64, dense caches
    EXPECT_EQ(kvc_balance_tiles(true, 0, 4, false, 2048, kSlots), 0);  // 64 x 8 x 64k page 16: several waves
}

// Fast memory: batch 1 x 8 kv heads from 3k to 4k keys takes 16 splits of 3-4 tiles; the rest kvc_one_sm_splits.
TEST(KvcFastMemoryOneSmSplits, SixteenSplitsOfFourTilesOnEightUnits) {
    EXPECT_EQ(kvc_fast_memory_one_sm_splits(22, 8, 64, kSms), 16);  // 1 x 8 x 4k (the H100 rule: 8)
    EXPECT_EQ(kvc_fast_memory_one_sm_splits(22, 8, 48, kSms), 16);  // 3k
    EXPECT_EQ(kvc_fast_memory_one_sm_splits(11, 8, 32, kSms), kvc_one_sm_splits(11, 8, 32, kSms));    // 2k: 8
    EXPECT_EQ(kvc_fast_memory_one_sm_splits(32, 8, 128, kSms), kvc_one_sm_splits(32, 8, 128, kSms));  // 8k: 32
    EXPECT_EQ(kvc_fast_memory_one_sm_splits(6, 8, 16, kSms), 6);    // 1k: within a portable cluster already
    EXPECT_EQ(kvc_fast_memory_one_sm_splits(13, 16, 64, kSms), kvc_one_sm_splits(13, 16, 64, kSms));  // 2 x 8: 8
    // 16 splits of 8 units: over 100 SMs
    EXPECT_EQ(kvc_fast_memory_one_sm_splits(22, 8, 64, 100), kvc_one_sm_splits(22, 8, 64, 100));
}

// The next tile's S product beside P V: on grids of at most one block an SM, splits included.
TEST(KvcOverlapProducts, OnGridsOfOneBlockAnSm) {
    EXPECT_TRUE(kvc_overlap_products(128, kSms));    // batch 16 x 8 x 4k, 64 x 8 x 1k (4 kv heads a block)
    EXPECT_TRUE(kvc_overlap_products(kSms, kSms));
    EXPECT_TRUE(kvc_overlap_products(64, kSms));     // batch 1 x 8 x 4k: 8 splits
    EXPECT_FALSE(kvc_overlap_products(kSms + 1, kSms));
    EXPECT_FALSE(kvc_overlap_products(256, kSms));   // batch 4 x 8 x 64k: 8 splits, two blocks an SM
    EXPECT_FALSE(kvc_overlap_products(64 * 32, kSms));  // batch 64 x 32 x 1k: many waves
    EXPECT_FALSE(kvc_overlap_products(64, 0));       // nothing known of the GPU
}

// Latency-bound grids: splits of two tiles (the Hopper kernel's stages) where they fit a cluster of 8 and half the SMs,
// else the wave rule's count.
TEST(KvcLatencySplits, TwoTilesASplitWhereThatFitsACluster) {
    constexpr int kInFlight = 2;
    EXPECT_EQ(kvc_latency_splits(6, 8, 16, kInFlight, kSms), 8);    // batch 1 x 8 kv heads x 1k keys: 64 blocks
    EXPECT_EQ(kvc_latency_splits(4, 4, 16, kInFlight, kSms), 8);    // 4 kv heads: 32 blocks
    EXPECT_EQ(kvc_latency_splits(6, 16, 16, kInFlight, kSms), 6);   // batch 2: 128 blocks, over half the SMs
    EXPECT_EQ(kvc_latency_splits(6, 32, 16, kInFlight, kSms), 6);   // batch 4: 256 blocks, over one an SM
    EXPECT_EQ(kvc_latency_splits(4, 32, 16, kInFlight, kSms), 4);   // batch 1 x 32 kv heads
    EXPECT_EQ(kvc_latency_splits(32, 8, 64, kInFlight, kSms), 32);  // 4k keys: 32 splits of two, over a cluster
    EXPECT_EQ(kvc_latency_splits(11, 8, 32, kInFlight, kSms), 11);  // 2k keys: 16 splits of two, over 8
    EXPECT_EQ(kvc_latency_splits(1, 8, 1, kInFlight, kSms), 1);     // one tile: nothing to split
    EXPECT_EQ(kvc_latency_splits(8, 8, 15, kInFlight, kSms), 8);    // never fewer than asked
    EXPECT_EQ(kvc_latency_splits(6, 8, 16, 0, kSms), 6);            // not taken
}

// Latency-bound grids over one block an SM or a portable cluster: the most splits within both, where they stay short.
TEST(KvcOneSmSplits, AtMostOneBlockAnSmWhereSplitsStayShort) {
    EXPECT_EQ(kvc_one_sm_splits(11, 8, 32, kSms), 8);   // batch 1 x 8 kv heads x 2k keys: a cluster of 8, 4 tiles each
    EXPECT_EQ(kvc_one_sm_splits(32, 8, 64, kSms), 8);   // 4k: 8 splits of 8 tiles instead of 32 through the combine
    EXPECT_EQ(kvc_one_sm_splits(32, 8, 128, kSms), 32);  // 8k: splits of 16 tiles would be too long
    EXPECT_EQ(kvc_one_sm_splits(13, 16, 64, kSms), 8);  // batch 2 x 8 x 4k: 128 blocks
    EXPECT_EQ(kvc_one_sm_splits(6, 32, 16, kSms), 4);   // batch 1 x 32 x 1k (or 4 x 8): 128 blocks of 4 tiles
    EXPECT_EQ(kvc_one_sm_splits(4, 64, 16, kSms), 2);   // batch 2 x 32 x 1k: 2 splits of 8 tiles
    EXPECT_EQ(kvc_one_sm_splits(6, 8, 16, kSms), 6);    // batch 1 x 8 x 1k: within both already
    EXPECT_EQ(kvc_one_sm_splits(2, 128, 64, kSms), 2);  // no room for two splits a unit within the SMs
    EXPECT_EQ(kvc_one_sm_splits(1, 128, 64, kSms), 1);
    EXPECT_EQ(kvc_one_sm_splits(8, 0, 64, kSms), 8);    // nothing to launch
}

TEST(KvcBoxRows, SixteenWithSeveralKvHeadsElseAPieceOrTheTile) {
    EXPECT_EQ(kvc_box_rows(0, kTileKeys, 1), kTileKeys);     // dense, one kv head: the whole tile
    EXPECT_EQ(kvc_box_rows(0, kTileKeys, 4), kPageBoxRows);  // dense, 4 kv heads: 16 rows of each
    EXPECT_EQ(kvc_box_rows(0, kTileKeys, 8), 8);             // dense, 8 kv heads: the tile's 8 keys of each
    EXPECT_EQ(kvc_box_rows(256, kTileKeys, 1), kTileKeys);   // a page holds whole tiles
    EXPECT_EQ(kvc_box_rows(96, kTileKeys, 1), 32);           // the most rows dividing the page
    EXPECT_EQ(kvc_box_rows(256, kTileKeys, 2), kPageBoxRows);
    EXPECT_EQ(kvc_box_rows(16, kTileKeys, 4), kPageBoxRows);
    EXPECT_EQ(kvc_box_rows(64, kTileKeys, 8), 8);
}

// The Hopper kernel's evict-first K/V copies (kvc_reads_once): calls of up to four times the L2's bytes.
TEST(KvcReadsOnce, CallsUpToFourTimesTheL2) {
    constexpr int64_t kL2 = 50 * 1024 * 1024;                  // an H100's
    constexpr int64_t kDecode1k = 16LL * 8 * 1024 * 128 * 2 * 2;  // batch 16 x 8 kv heads x 1k keys, hdim 128: 64 MiB
    EXPECT_TRUE(kvc_reads_once(kDecode1k, kL2));
    EXPECT_TRUE(kvc_reads_once(2 * kDecode1k, kL2));   // batch 32: 128 MiB
    EXPECT_TRUE(kvc_reads_once(4 * kL2, kL2));
    EXPECT_FALSE(kvc_reads_once(4 * kL2 + 1, kL2));
    EXPECT_FALSE(kvc_reads_once(4 * kDecode1k, kL2));  // batch 64: 256 MiB
    EXPECT_FALSE(kvc_reads_once(1, 0));                // no L2 size known: never
}

// The Hopper kernel's placement clusters (kvc_place_blocks): pairs along y on paged caches of one kv head a block, none
// on dense caches, grouped blocks or splits merged in clusters; a count asked for wins where it divides the grid's y.
TEST(KvcPlaceBlocks, PairsOnPagedCachesOfOneKvHeadABlock) {
    constexpr int kUnset = -1;
    EXPECT_EQ(kvc_place_blocks(true, 1, false, 128, kUnset), 2);    // batch 16 x 8 kv heads
    EXPECT_EQ(kvc_place_blocks(true, 1, false, 32, kUnset), 2);     // 4 x 8, splits along z merged by the combine
    EXPECT_EQ(kvc_place_blocks(false, 1, false, 128, kUnset), 1);   // dense
    EXPECT_EQ(kvc_place_blocks(true, 4, false, 128, kUnset), 1);    // four kv heads a block
    EXPECT_EQ(kvc_place_blocks(true, 1, true, 128, kUnset), 1);     // splits merged in their own clusters
    EXPECT_EQ(kvc_place_blocks(true, 1, false, 3, kUnset), 1);      // batch 3 x 1 kv head: pairs do not divide y
}

TEST(KvcPlaceBlocks, ACountAskedForWhereItDividesTheGrid) {
    EXPECT_EQ(kvc_place_blocks(false, 1, false, 128, 8), 8);  // any cache, any group
    EXPECT_EQ(kvc_place_blocks(true, 4, false, 32, 4), 4);
    EXPECT_EQ(kvc_place_blocks(true, 1, false, 128, 1), 1);   // none
    EXPECT_EQ(kvc_place_blocks(true, 1, false, 128, 0), 1);
    EXPECT_EQ(kvc_place_blocks(true, 1, false, 32, 16), 1);   // past kKvcPlaceMax
    EXPECT_EQ(kvc_place_blocks(true, 1, false, 12, 8), 1);    // 8 does not divide 12
    EXPECT_EQ(kvc_place_blocks(true, 1, true, 128, 8), 1);    // never beside a cluster merge
}

}  // namespace
}  // namespace flashattn::kernels
#endif
