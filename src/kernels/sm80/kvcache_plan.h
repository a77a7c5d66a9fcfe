// How a kv-cache forward runs: the split count and where its scratch buffers live in the workspace. Computed on the
// host (kernels/dispatch.cpp), passed by value to the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"

namespace flashattn::kernels {

struct KvcPlan {
    int num_splits = 1;
    // kv heads a block (the Hopper kernel's, on some grids: kvc_head_group, kvc_dense_head_group); 1 elsewhere
    int head_group = 1;
    void* q_rot = nullptr;         // rotated queries, contiguous (batch, seqlen_q, nheads, head_dim); null: no rotary
    // The Hopper kernel's splits merged inside a thread block cluster (the splits of a unit are one cluster, their
    // partial results read from each other's shared memory): no workspace for them, no combine kernel.
    bool merge_in_cluster = false;
    // The Hopper kernel's K/V copies marked evict-first in L2 (kvc_reads_once): the call reads few enough bytes that
    // the lines it would otherwise push out of L2 (others' writes, not yet written back) cost it a share of its time.
    bool kv_read_once = false;
    // The Hopper kernel's copies: tiles issued ahead of the consumers (kvc_tiles_ahead; 0: as many as the rings hold).
    int tiles_ahead = 0;
    // The Hopper kernel's consumers issue tile i + 1's S product beside tile i's P V (kvc_overlap_products).
    bool overlap_products = false;
    // The Hopper kernel's softmax on every packed row, the padding rows past the block's too (measurements only,
    // FLASHATTN_KVC_ALL_ROWS=1; by default a warp with none of the block's rows skips it and gives P = 0, and one
    // whose second rows are all padding runs the first half alone).
    bool softmax_all_rows = false;
    // The Hopper kernel on a paged cache with one producer warp issuing K's and V's copies (kvc_one_producer), where
    // it otherwise has two.
    bool one_producer = false;
    // The Hopper kernel's two producer warps: V's first tile issued once K's first tile has gone out, in the order one
    // warp issues them (the consumers wait for K first); false (FLASHATTN_KVC_K_FIRST=0): each warp at once.
    bool k_first = true;
    // The Hopper kernel on a paged cache: each block's middle tiles read with their pages in address order, a window
    // at a time (sm90/kvc_page_order.cuh), where kvc_pages_in_address_order says or FLASHATTN_KVC_PAGE_ORDER asks
    // (kernels/dispatch.cpp).
    bool pages_in_address_order = false;
    // The Hopper kernel's V pieces copied both 64-column halves at once (kvcache_sm90.cu, kvc_v_fold_rows): a piece of
    // v_fold_rows rows (16, or a whole tile) lands as its two halves one after the other; 0: one copy a half.
    int v_fold_rows = 0;
    // The Hopper kernel's paged K pieces copied both 64-column halves at once (kvcache_sm90.cu, kvc_k_fold): a piece
    // lands as [8-row group][half][8 rows][64 columns], the S product reading K's 8-row groups 2 KB apart and its
    // halves 1 KB apart; false: one copy a half, each half's rows together.
    bool k_fold = false;
    // The Hopper kernel's splits not merged in a cluster merged by the last of a unit's blocks to finish (an arrival
    // flag a split of each unit in the workspace, merge_flags, holding this launch's merge_epoch once set), not by
    // the combine kernel (FLASHATTN_KVC_LAST_MERGE=1; kvc_all_arrived in sm90/kvcache_sm90_kernel.cuh).
    bool merge_by_last = false;
    uint32_t merge_epoch = 0;
    uint32_t* merge_flags = nullptr;  // (row blocks x kv-head groups of the grid, num_splits)
    // The Hopper kernel's splits taking their unit's key tiles from a counter, balance_tiles tiles a claim, rather
    // than a fixed share each (asked for only: FLASHATTN_KVC_BALANCE, kvc_balance_tiles; kvc_claim_take in
    // sm90/kvcache_sm90_kernel.cuh): the blocks of SMs the memory system serves faster then read more of their unit.
    // 0: a fixed share. The counters, one 64-bit word a unit in the workspace, hold the launch's claim_epoch (never 0)
    // in their high half.
    int balance_tiles = 0;
    uint32_t claim_epoch = 0;
    unsigned long long* tile_claims = nullptr;  // (row blocks x kv-head groups of the grid)
    // The Hopper kernel's cluster merge taking the splits merge_group (2) at a time rather than 8
    // (FLASHATTN_KVC_MERGE_GROUP=2; 0: 8). Less code at the call's end (kvc_cluster_merge_grouped).
    int merge_group = 0;
    float* o_accum = nullptr;      // split, not in a cluster: partial outputs (num_splits, batch, nheads, seqlen_q,
                                   // head_dim_v)
    float* lse_accum = nullptr;    // ... and their LSEs (num_splits, batch, nheads, seqlen_q)
    size_t workspace_bytes = 0;
};

// A kv head's query rows in a block: the query rows times the query heads that share that kv head.
FLASHATTN_HD constexpr int64_t kvc_kv_rows(int64_t seqlen_q, int64_t nheads, int64_t nheads_k) {
    return seqlen_q * (nheads / nheads_k);
}

// The most splits a cluster merges: 16, the largest cluster an H100 launches (with the non-portable size allowed).
constexpr int kKvcClusterMax = 16;

// The kv-cache attention kernels' grid (both kinds): x packed row blocks of block_m (a block's rows are the query
// rows of head_group kv heads, seqlen_q x query heads a kv head each), y batch x groups of head_group kv heads; the
// splits are z. The planner counts its blocks with this, the launch sizes its grid with it.
struct KvcGrid {
    int64_t row_blocks, kv_groups;
};
FLASHATTN_HD constexpr KvcGrid kvc_grid(int64_t batch, int64_t seqlen_q, int64_t nheads, int64_t nheads_k,
                                        int head_group, int block_m) {
    const int64_t packed_rows = seqlen_q * (nheads / (nheads_k > 1 ? nheads_k : 1)) * head_group;
    return KvcGrid{(packed_rows + block_m - 1) / block_m, batch * (nheads_k / head_group)};
}

// A paged cache is read in pieces: the most rows (a power of two, kPageBoxRows up to `block_n`) that divide the page
// size, so that a tile of block_n keys (block_n a power of two, cache positions aligned to it) is whole pieces, each
// inside one page.
constexpr int kPageBoxRows = 16;  // every page size is a multiple of 16
// The rows of one 128-byte swizzle block (1 KB): the unit folded K pieces interleave their halves by (KvcPlan::k_fold).
constexpr int kKvcFoldGroupRows = 8;
// Key tiles of a cache of seqlen_k positions for a kernel of block_n key-rows a tile, shared out among head_group kv
// heads (block_n / head_group keys a tile).
FLASHATTN_HD constexpr int64_t kvc_key_tiles(int64_t seqlen_k, int block_n, int head_group) {
    const int64_t keys_per_tile = block_n / head_group;
    return (seqlen_k + keys_per_tile - 1) / keys_per_tile;
}
FLASHATTN_HD constexpr int kvc_piece_rows(int64_t page_size, int block_n) {
    int rows = block_n;
    while (rows > kPageBoxRows && page_size % rows != 0) rows /= 2;
    return rows;
}

// Whether a paged cache's pages hold an odd multiple of kPageBoxRows rows, so that it is read in pieces of that many
// rows whatever the kv heads a block (the Hopper kernel's head-group and many-waves rules treat those apart).
FLASHATTN_HD constexpr bool kvc_small_page_pieces(bool paged, int64_t page_size, int block_n) {
    return paged && kvc_piece_rows(page_size, block_n) == kPageBoxRows;
}

// Rows a copy of the Hopper kv-cache kernel (its box): with several kv heads a block, kPageBoxRows, or the keys of
// each kv head a tile where fewer (8 of 8 kv heads in a 64-key tile); else a page piece (paged, page_size > 0) or
// the whole tile (dense). KvcTileCols places a tile's key-rows from it.
FLASHATTN_HD constexpr int kvc_box_rows(int64_t page_size, int block_n, int head_group) {
    return head_group > 1 ? (block_n / head_group < kPageBoxRows ? block_n / head_group : kPageBoxRows)
           : page_size > 0 ? kvc_piece_rows(page_size, block_n)
                           : block_n;
}

// The Hopper kv-cache kernel's kv heads a block on a paged cache of 16-row pieces (1 for longer pieces: those caches,
// and dense ones, are passed as pages of kPageBoxRows rows and kvc_dense_head_group decides).
// Why: with pages shorter than a tile, a tile of one kv head is several small copies from scattered pages (16 rows of
// 256 bytes, 2 KB apart, at page 16), and the memory system serves those 1-4% slower than a dense cache's
// (bench/probe_kv_stream.cu; four kv heads a copy took half of that back). The cache's (position, kv head) rows of
// one page are contiguous, so a block of G kv heads takes each page piece of all G heads in one copy; its tile is
// then block_n key-rows of G heads, block_n / G keys each. G is a power of two up to block_n / kPageBoxRows that
// divides nheads_k and keeps the block's query rows (G x kv_rows, kv_rows = query rows x query heads a kv head) within
// block_m.
FLASHATTN_HD constexpr int kvc_head_group(int64_t page_size, int64_t nheads_k, int64_t kv_rows, int block_m,
                                           int block_n) {
    // Only pieces of kPageBoxRows (page sizes that are odd multiples of 16): the kernel's tile arithmetic knows the
    // piece size at compile time (KvcTileCols). Pages of 64 rows and more read within 1% of dense on average.
    if (page_size <= 0 || nheads_k <= 0 || kvc_piece_rows(page_size, block_n) != kPageBoxRows) return 1;
    int group = block_n / kPageBoxRows;
    while (group > 1 && (nheads_k % group != 0 || group * kv_rows > block_m)) group /= 2;
    return group;
}

// Of the groups up to group_max (kvc_head_group), the largest whose grid (kv_blocks / group blocks: kv_blocks the
// grid of one kv head a block) still fills kKvcGroupFilled of the GPU's resident slots (SMs x blocks an SM); 1 where
// none does. Measured on an H100 (bench/NOTES.md, "kv-cache: several kv heads a block"): where the grouped grid keeps
// two blocks an SM, page-16 decode read 0.98-1.02x the dense time against 1.01-1.03x with one kv head a block; where
// grouping made the grid small enough to need splits (or more of them) it read 1.03-1.22x against 1.01-1.07x.
constexpr double kKvcGroupFilled = 0.9;
FLASHATTN_HD constexpr int kvc_head_group_for_grid(int group_max, int64_t kv_blocks, int64_t slots) {
    for (int group = group_max; group > 1; group /= 2)
        if (double(kv_blocks / group) >= kKvcGroupFilled * double(slots)) return group;
    return 1;
}

// A block of kKvcWideGroup kv heads reads 8-row pieces of each (kvc_box_rows: 8 rows x 8 heads, one 4 KB contiguous
// run of the cache a copy, where 4 kv heads read 1 KB runs). kvc_wide_head_group: kKvcWideGroup where it divides
// nheads_k and its rows (kKvcWideGroup x kv_rows) fit block_m, and the tile has at least one n8 tile of each (block_n
// / kKvcWideGroup >= 8); else 1.
constexpr int kKvcWideGroup = 8;
FLASHATTN_HD constexpr int kvc_wide_head_group(int64_t nheads_k, int64_t kv_rows, int block_m, int block_n) {
    return nheads_k % kKvcWideGroup == 0 && kKvcWideGroup * kv_rows <= block_m && block_n / kKvcWideGroup >= 8
               ? kKvcWideGroup
               : 1;
}

// Dense caches and pages of longer pieces: kv heads a block, wide_group (kvc_wide_head_group) where its grouped grid is
// between kKvcDenseGroupFilled of the slots and all of them, else group_max (kvc_head_group with pages of kPageBoxRows
// rows) where its grid is, or the smallest of its halves whose grid is too, else 1. Why: a block of 4 kv heads reads 1
// KB runs of the (batch, seq, head, dim) cache (16 rows of 4 heads), one of 8 kv heads 4 KB runs, where one of one kv
// head reads 256-byte rows 2 KB apart. On an H100 (bench/NOTES.md, "kv-cache: dense caches several kv heads a block")
// groups of 4 read 0.5-2.3% faster than one where the grouped grid held about a block an SM (batch 64 x 8 kv heads and
// 16 x 32: 128 blocks of 4, split to fill), and 1-7% slower where splits had to fill most of the GPU (batch 1-32 x 8 kv
// heads, 1-8 x 32). Since the consumers skip the padding rows' softmax, pairs there (256 blocks, two an SM) read faster
// still ("kv-cache: pairs on the 512-kv-head grids"): against 4, batch 64 x 8 dense 1.0-1.8% (1k-4k) and 0.6% (16k),
// pages of 64 and 256 0.5-1.6%, four query rows 1.3-3.0%; 16 x 32 within 0.3% with one query row, 0.3-1.4% with four.
// Groups of 8 ("kv-cache: dense caches 8 kv heads a block"): 1.3-1.7% faster than 4 at batch 32 x 32 (128 blocks of 8
// against 256 of 4; measured again with the padding skip, 4 was 0.9% faster at 1k and 0.5% slower at 4k), -0.6% to
// +0.9% against one at 64 x 32 (256 of 8), and 2-7% slower than 4 where 8 left the grid below kKvcDenseGroupFilled (64
// x 8, 16 x 32: 64 blocks, split to fill).
constexpr double kKvcDenseGroupFilled = 0.45;
FLASHATTN_HD constexpr bool kvc_dense_grid_fits(int64_t grouped_blocks, int64_t slots) {
    return double(grouped_blocks) >= kKvcDenseGroupFilled * double(slots) && grouped_blocks <= slots;
}
FLASHATTN_HD constexpr int kvc_dense_head_group(int wide_group, int group_max, int64_t kv_blocks, int64_t slots) {
    if (wide_group > 1 && kvc_dense_grid_fits(kv_blocks / wide_group, slots)) return wide_group;
    if (group_max <= 1 || !kvc_dense_grid_fits(kv_blocks / group_max, slots)) return 1;
    int group = group_max;  // fits; a smaller group whose grid fits too is taken instead
    while (group > 2 && kvc_dense_grid_fits(kv_blocks / (group / 2), slots)) group /= 2;
    return group;
}

// The Hopper kernel's producer warps on a paged cache: one (KvcPlan::one_producer) where a block's key tiles (at most
// key_tiles over num_splits) all fit its rings at once (ring_stages, the fewer of K's and V's), else two, one issuing
// K's copies and one V's. Why: with every tile in a stage of its own the producer issues all its copies without waiting
// for a stage, and the second warp only delays the first copy. On an H100 (bench/NOTES.md, "kv-cache: pairs on the
// 512-kv-head grids, ...") batch 1 x 8 kv heads with 1k keys (2 tiles a block) read 0.4-0.6 us faster with one
// (12.2-12.4 -> 11.7-11.8 us, pages of 16, 64 and 256; dense 11.3), where with 4 tiles a block (4k keys) one was up
// to 2.4 us slower, and on the 128-block grids of page 16 3%.
FLASHATTN_HD constexpr bool kvc_one_producer(int64_t key_tiles, int num_splits, int ring_stages) {
    return num_splits > 0 && key_tiles > 0 && (key_tiles + num_splits - 1) / num_splits <= ring_stages;
}

// Pages in address order (KvcPlan::pages_in_address_order, the Hopper kernel's paged caches), by default where it
// pays (FLASHATTN_KVC_PAGE_ORDER=0 turns it off, =1 on for every paged call without ALiBi): blocks of at least
// kKvcOrderMinTiles key tiles (key_tiles over num_splits, of keys_per_tile keys) whose pages fit one window of the
// kernel's sort (kKvcOrderWindowPages, its wide window), or, on grids of more `blocks` than the `sm_count` SMs, the
// windows it sorts whole before its range (kKvcOrderMergedPages); pages of at most kKvcOrderMaxPageRows rows, and no
// ALiBi slope (it needs the keys' positions). Measured on an H100 (bench/NOTES.md, "kv-cache: the page order, read
// ahead and sorted a stage a tile", and "... sorted whole"), graph-replayed, by this rule against table order: 16 x 8
// kv heads x 4k keys, page 16: 105.1 against 106.2 us; 16 x 8 x 16k page 16 (one window of 1024 pages): 365.9 against
// 370.4; 64 x 8 x 4k page 16: 362.9 against 368.0; 16 x 8 x 64k page 64: 1399.2 against 1405.7. Windows read one after
// another do not gain (16 x 8 x 64k page 16 in windows of 1024: 1435.6 against 1420.7): each sweeps the pool from its
// start again. Sorted whole (4096 pages a block), 64 x 8 x 64k page 16 read 5569.7 against 5582.1 and 16 x 32 x 64k
// 5565.8 against 5581.5 (256 blocks of two kv heads), but grids of one block an SM lost: 16 x 8 x 64k 1433.4 against
// 1417.2, 4 x 32 x 64k 1419.5 against 1403.4 (128 blocks). Blocks of 16 tiles gained nothing even with the block
// tables themselves sorted, nor did pages of 256 rows in address order (16 x 8 x 4k: 104.6 against 104.5).
constexpr int64_t kKvcOrderMinTiles = 32;
constexpr int64_t kKvcOrderWindowPages = 1024;                      // the kernel's kKvcOrderWidePages
constexpr int64_t kKvcOrderMergedPages = 4 * kKvcOrderWindowPages;  // ... times its kKvcOrderMergeWindows
constexpr int kKvcOrderMaxPageRows = 64;
FLASHATTN_HD constexpr bool kvc_pages_in_address_order(bool paged, bool alibi, int64_t key_tiles, int num_splits,
                                                       int keys_per_tile, int page_size, int64_t blocks,
                                                       int64_t sm_count) {
    if (!paged || alibi || num_splits <= 0 || page_size <= 0 || page_size > kKvcOrderMaxPageRows) return false;
    const int64_t tiles = (key_tiles + num_splits - 1) / num_splits;
    if (tiles < kKvcOrderMinTiles) return false;
    const int64_t keys = tiles * keys_per_tile;
    return keys <= kKvcOrderWindowPages * page_size || (keys <= kKvcOrderMergedPages * page_size && blocks > sm_count);
}

// Many waves (the Hopper kernel's dense caches and long pages): where the grid of one kv head a block is at least
// kKvcManyWaves x the resident slots and a kv head has one query row (kv_rows: query rows x query heads a kv head),
// one kv head a block (kvc_sm90_head_group) and, with splits left to the planner, kvc_many_wave_splits of them: a
// split of at least kKvcManyWaveSplitTiles tiles, at most kKvcManyWaveSplitsMax. Why: at batch 64 x 32 kv heads, one
// query row, on an H100 (2048 blocks of one kv head, 7.8 waves of 264 slots) that read 0.5-0.8% faster than the 256
// blocks of 8 kv heads kvc_dense_head_group takes, on dense caches and pages of 256 (dense: 1k unsplit 363.2 against
// 365.0 us, 4k 2 splits 1393.1 against 1401.9, 16k 4 splits 5513.7 against 5548.1), and the same on pages of 64
// (bench/NOTES.md, "kv-cache: many waves"). With four query rows a kv head it was 0.9% faster at 1k and up to 0.9%
// slower at 4k; at 32 x 32 (1024 blocks, 3.9 waves) 128 blocks of 8 stay 1-2% faster than any split of one kv head.
constexpr int64_t kKvcManyWaves = 6;
constexpr int kKvcManyWaveSplitTiles = 32, kKvcManyWaveSplitsMax = 4;
FLASHATTN_HD constexpr bool kvc_many_waves(int64_t kv_blocks, int64_t kv_rows, int64_t slots) {
    return kv_rows == 1 && slots > 0 && kv_blocks >= kKvcManyWaves * slots;
}
FLASHATTN_HD constexpr int kvc_many_wave_splits(int64_t key_tiles) {
    const int64_t splits = key_tiles / kKvcManyWaveSplitTiles;
    return splits < 1 ? 1 : splits > kKvcManyWaveSplitsMax ? kKvcManyWaveSplitsMax : static_cast<int>(splits);
}

// Latency-bound grids (the Hopper kernel's, its splits merged in a cluster): splits of `tiles_in_flight` key tiles
// each (the kernel's stages, so that a block issues every copy it makes at its start and waits for one round trip),
// where that count is more than `splits`, fits a portable cluster (kKvcPortableCluster) and keeps the grid of `blocks`
// x splits within half the SMs; else `splits`. Measured on an H100 (bench/NOTES.md, "kv-cache: the cluster barrier's
// fence"): batch 1 x 8 kv heads, one query row, 1k keys (16 tiles): 6 splits of 2-3 tiles 12.3 us, 8 of 2 tiles 11.7
// (cuDNN 13.0); 512 keys 10.8 -> 10.5; four query rows 13.6 -> 13.4. At batch 2 x 8 (128 blocks of 2 tiles) one row
// gained 0.1 us and four rows lost 0.8 (16.0 against 15.2 us); at batch 4 x 8 and 1 x 32 (256 blocks) 8 splits were
// 4-8% slower than the wave rule's count; clusters of 16 were slower than of 8.
constexpr int kKvcPortableCluster = 8;
FLASHATTN_HD constexpr int64_t kvc_latency_splits(int64_t splits, int64_t blocks, int64_t key_tiles,
                                                  int tiles_in_flight, int64_t sm_count) {
    if (tiles_in_flight <= 0 || key_tiles <= 0 || blocks <= 0) return splits;
    const int64_t whole = (key_tiles + tiles_in_flight - 1) / tiles_in_flight;
    return whole > splits && whole <= kKvcPortableCluster && 2 * blocks * whole <= sm_count ? whole : splits;
}

// One block an SM (the Hopper kernel, its splits merged in a cluster): where the count so far puts more than one
// block on an SM or needs a cluster above the portable size, `fit` splits instead (the most that keep the grid of
// `blocks` x splits within the SMs and a portable cluster, kKvcPortableCluster), when splits of that many stay short
// (at most kKvcShortSplitTiles key tiles each); else `splits`. Why: a latency-bound split reads a few tiles and waits
// for them, so a second block on its SM adds little, while a larger cluster merges more partial rows (a cluster of 9-16
// is also non-portable, placed on fewer GPCs) and more than 16 splits need the combine. Measured on an H100
// (bench/NOTES.md, "kv-cache: one block an SM"), one query row, graph-replayed: batch 1 x 8 kv heads 2k keys 8 splits
// 13.7 us against the wave rule's 14.5, 4k 17.5 against 18.4 (page 256 17.7 against 18.7), batch 2 x 8 x 4k 22.8
// against 24.3, batch 1 x 32 x 1k 4 splits 16.8 against 16.9 (page 16 16.8 against 17.4); with longer splits it
// loses (batch 1 x 8 x 16k: 8 splits of 32 tiles 38.8 against 37.6). Against the rule's removal over 144 decode
// records: one query row 0.5-2.3 us faster wherever it acts; four query rows faster on grids of 8-16 and 64 blocks,
// 0.2-1.4 us slower on those of 32 (batch 1 x 32 x 1k, 4 x 8 x 1k-2k).
constexpr int kKvcShortSplitTiles = 8;
FLASHATTN_HD constexpr int64_t kvc_one_sm_splits(int64_t splits, int64_t blocks, int64_t key_tiles,
                                                 int64_t sm_count) {
    if (blocks <= 0 || key_tiles <= 0) return splits;
    const int64_t fit = sm_count / blocks < kKvcPortableCluster ? sm_count / blocks : kKvcPortableCluster;
    if (fit < 2 || splits <= fit) return splits;
    return (key_tiles + fit - 1) / fit <= kKvcShortSplitTiles ? fit : splits;
}

// Splits whose clusters do not all fit (units > capacity(splits): the combine kernel merges them) traded for the most
// splits from kKvcClusterFitShare of that count whose clusters do fit, one a unit, where each of those splits reads at
// most max_tiles of the key_tiles; `splits` otherwise. `capacity(s)`: the clusters of s blocks resident at once.
// Why: clusters of 8 at two blocks an SM fit 30 at once on an H100/H200 (bench/probe_cluster_capacity.cu), so the
// 32-unit grids of 4 x 8 and 1 x 32 kv heads split 8 ways go to the combine kernel, whose end (the partial rows and
// the second kernel) costs 3.9-4.1 us a call where a whole cluster merge costs 1.3-1.7 (bench/NOTES.md, "kv-cache:
// what the end of an eight-split call costs"); 32 clusters of 7 fit. But 7 splits leave 20 SMs idle, and the stream
// pays for it in proportion to its length. Measured on an H200 (bench/NOTES.md, "kv-cache: clusters of 7"), one query
// row, 7 splits against 8: at 16k keys (37 tiles a split) 78.0-78.4 us against 79.6-80.2 dense, 79.3-80.7 against
// 80.1-81.5 paged; at 64k (147 tiles) 258.3-258.9 against 256.3-256.7 dense and 277.8-279.0 against 262.9-266.0 on
// pages of 16; at 32k (74 tiles) 137.3 against 138.1 dense and 148.3 against 142.2 on pages of 16.
// kKvcFitClusterMaxTiles sits between 37 and 74. A larger cut pays less: the 16-unit grids at 16k keys, 15 splits
// (14 such clusters fit) taken down to 12, read 0.2-0.7 us slower on pages of 16 and within 0.2 dense, hence
// kKvcClusterFitShare's 0.85, which takes 8 to 7 and no further.
constexpr double kKvcClusterFitShare = 0.85;
constexpr int64_t kKvcFitClusterMaxTiles = 64;
template <class Capacity>
constexpr int64_t kvc_cluster_fitting_splits(int64_t splits, int64_t units, int64_t key_tiles, Capacity capacity,
                                             int64_t max_tiles = kKvcFitClusterMaxTiles) {
    if (splits < 2 || splits > kKvcClusterMax || units <= 0 || units <= capacity(int(splits))) return splits;
    const int64_t fewest = static_cast<int64_t>(splits * kKvcClusterFitShare + 0.999);
    for (int64_t s = splits - 1; s >= fewest && s >= 2; --s)
        if (units <= capacity(int(s))) return (key_tiles + s - 1) / s <= max_tiles ? s : splits;
    return splits;
}

// Tiles the Hopper kernel's producer keeps ahead of its consumers (KvcPlan::tiles_ahead): 1 (a tile is copied once the
// one before it has been used) where the resident blocks are more than kKvcAheadBlocksPerSm an SM, each with at least
// kKvcAheadMinTiles key tiles, and the grid is one wave of them or long blocks (kKvcAheadManyWaveTiles tiles); else 0
// (as many as its rings hold: two K and two V tiles). `blocks`: the whole grid (splits included), `slots`: the blocks
// resident at once. Why: the memory system reads fastest with about two tiles in flight an SM. On an H100
// (bench/NOTES.md, "kv-cache: tiles in flight"), one query row, 256-block split grids (two blocks an SM) read 1.6-2.4%
// faster with one tile ahead (batch 1 x 32 kv heads x 64k: 358.3 against 366.9 us, cuDNN 364.9; batch 4 x 8 x 64k:
// 360.3 against 366.6), while the 128-block grids (one block an SM) read 6-18% slower with one, and four stages of
// each at one block an SM were 1.5-5% slower than two; at batch 64 x 32 x 1k (2048 blocks of 16 tiles) one ahead was
// 0.8% slower, at 64 x 32 x 16k (8192 blocks of 64 tiles) 0.5% faster; batch 1 x 8 x 4k (64 blocks of 8 tiles) 9%
// slower.
constexpr double kKvcAheadBlocksPerSm = 4.0 / 3.0;
constexpr int64_t kKvcAheadMinTiles = 8, kKvcAheadManyWaveTiles = 32;
FLASHATTN_HD constexpr int kvc_tiles_ahead(int64_t blocks, int64_t tiles_per_block, int64_t sm_count, int64_t slots) {
    if (sm_count <= 0 || slots <= 0) return 0;
    const int64_t resident = blocks < slots ? blocks : slots;
    if (double(resident) <= kKvcAheadBlocksPerSm * double(sm_count) || tiles_per_block < kKvcAheadMinTiles) return 0;
    return blocks <= slots || tiles_per_block >= kKvcAheadManyWaveTiles ? 1 : 0;
}

// Whether the Hopper kernel's consumers issue the next tile's S product beside this tile's P V
// (KvcPlan::overlap_products): on grids of at most one block an SM (`blocks`, splits included). Why: there a tile's
// products are on the stream's path (nothing else on the SM hides them). The overlap read 0.5-0.7 us faster on the
// 100 us calls at batch 16 x 8 x 4k, 64 x 8 x 1k, 4 x 32 x 4k and 16 x 32 x 1k, and 0.5-0.8 us on the short split
// blocks at batch 1 x 8 x 4k (17 us), one query row or four; on grids of two blocks an SM (batch 4 x 8 x 64k,
// 1 x 8 x 64k, 64 x 32 x 1k) it was 0.3-0.6 us slower (bench/NOTES.md, "kv-cache: the padding rows").
FLASHATTN_HD constexpr bool kvc_overlap_products(int64_t blocks, int64_t sm_count) {
    return sm_count > 0 && blocks <= sm_count;
}

// Fast memory (the Hopper kernel's plan): where the memory's peak bandwidth an SM (dram_bytes_per_s over sm_count) is
// at least kKvcFastMemoryPerSm, a block must keep more bytes in flight to draw its share, and the rules below replace
// the H100-measured ones (the planner also drops the many-waves rule and the pages' address order there). An H100
// SXM has 3.35 TB/s over 132 SMs (25 GB/s an SM), an H200 4.8 TB/s over 132 (36 GB/s an SM): the threshold lies
// between. Measured on an H200 (bench/NOTES.md, "kv-cache on the H200").
constexpr double kKvcFastMemoryPerSm = 30e9;  // bytes a second
FLASHATTN_HD constexpr bool kvc_fast_memory(int64_t dram_bytes_per_s, int64_t sm_count) {
    return sm_count > 0 && double(dram_bytes_per_s) >= kKvcFastMemoryPerSm * double(sm_count);
}

// Fast memory, grids of about one block an SM (from kKvcFilled of the SMs, at most half the resident `slots`, which
// kvc_splits leaves whole): slots / blocks splits, two blocks an SM merged in clusters, where each split keeps at least
// kKvcTwoPerSmMinTiles key tiles; else `splits`. Why: one block an SM keeps two K and two V tiles in flight, which
// draws an H100's share of the bandwidth but not an H200's on long caches. On an H200, graph-replayed, one query row, 2
// splits against 1: batch 16 x 8 kv heads x 64k page 16 1016 against 1164 us, 16k page 16 262 against 301, 4 x 32 x 16k
// page 16 260 against 301, 16 x 8 x 64k page 64 983 against 1001, dense 64k 957 against 990, 4 x 32 x 64k dense 960
// against 1001 (cuDNN 952-953); 3 splits (more blocks than slots) were slower than one. Up to 4k keys (64 tiles) one
// split (one block an SM, whose products overlap: kvc_overlap_products) reads faster, as measured once K's pieces were
// folded and the plain loop compiled apart: at 4k by 0.3-1.1 us on all eight 16 x 8 and 4 x 32 caches (dense, pages 16,
// 64, 256; 16 x 8 x 4k page 256 75.9 against 76.7, 4 x 32 x 4k page 64 75.3 against 76.3), at 1k by 0.4-0.9 us, at 2k
// on three of four (16 x 8 x 2k dense 44.3 against 43.4 the exception), and with four query rows at 1k-4k on all seven;
// from 8k two splits are equal or faster on 16 x 8 caches (8k page 16 136.1 against 139.3, 32k page 64 483.5 against
// 494.7). bench/NOTES.md, "kv-cache: one split up to 4k keys".
//
// Paged caches of pages of at least kKvcBigPageBytes (a page's stride in bytes: rows x kv heads x head dim x 2) split
// only where each split keeps kKvcBigPageTwoPerSmMinTiles (32k keys): one split read faster up to 32k there. On an H200
// graph-replayed, one query row, 1 against 2 splits: 2 MiB pages (4 x 32 kv heads, page 256) 8k 132.3 against 134.3
// us, 16k 248.0 against 250.3 and 252.1 against 256.3 (another machine), 32k 479.9 against 482.4, 64k 969.5 against
// 968.9; 1 MiB pages (8 x 16, page 256) 8k 132.7 against 134.4, 16k 248.5 against 250.0, 32k 482.2 against 482.4.
// Pages of 512 KiB went either way (4 x 32 page 64 16k 248.7 against 250.2, 32k 483.2 against 481.9; 16 x 8 page
// 256 32k 484.6 against 480.6), smaller ones and dense caches read faster split from 8k (32 x 4 x 32k page 256 490.0
// against 479.2). bench/NOTES.md, "kv-cache: one split on large pages, pairs on paged many-wave grids".
constexpr double kKvcFilled = 0.9;  // blocks per SM from which kvc_splits leaves a grid unsplit
constexpr int64_t kKvcTwoPerSmMinTiles = 64;
constexpr int64_t kKvcElemBytes = 2;  // the kv-cache kernels' caches: fp16 or bf16
constexpr int64_t kKvcBigPageBytes = int64_t(1) << 20;
// A paged cache's page in bytes (its stride: rows x kv heads x head dim x kKvcElemBytes), or 0 for a dense cache: what
// kvc_two_per_sm_splits and kvc_paged_quad_min_tiles compare with kKvcBigPageBytes.
FLASHATTN_HD constexpr int64_t kvc_page_bytes(bool paged, int64_t page_stride) {
    return paged ? page_stride * kKvcElemBytes : 0;
}
constexpr int64_t kKvcBigPageTwoPerSmMinTiles = 512;
FLASHATTN_HD constexpr int64_t kvc_two_per_sm_splits(int64_t splits, int64_t blocks, int64_t key_tiles,
                                                     int64_t sm_count, int64_t slots, int64_t page_bytes = 0) {
    if (splits != 1 || blocks <= 0 || double(blocks) < kKvcFilled * double(sm_count) || 2 * blocks > slots)
        return splits;
    const int64_t fit = slots / blocks;
    const int64_t min_tiles = page_bytes >= kKvcBigPageBytes ? kKvcBigPageTwoPerSmMinTiles : kKvcTwoPerSmMinTiles;
    return key_tiles / fit >= min_tiles ? fit : splits;
}

// Fast memory, paged caches of long pieces (pages of 64 rows and more, which kvc_dense_head_group decides): pairs of kv
// heads a block in place of its wide group (kvc_wide_head_group) where the wide group's grid holds two blocks an SM (at
// least kKvcFilled of the slots) and a pair's block reads at least kKvcPagedPairMinTiles key tiles (pair_tiles);
// else `group`. Why: on an H200, graph-replayed, batch 64 x 32 kv heads (2048 one-head blocks: 256 of 8 against 1024
// of 2), one query row, page 64 / 256: 4k 963.8 against 975.2 us and 962.6 against 974.2 (three runs alike; cuDNN
// 957-958), 16k page 256 3786 against 3858, 64k 15211 against 15393 and 15192 against 15413; four query rows 4k
// 967.5 against 987.0, 16k page 256 3800 against 3882. Dense caches keep 8 (4k 961-963 against 965-966 with pairs),
// as do grids of one block of 8 an SM (32 x 32 x 16k page 256 1906.6 against 1930.7); at 1k keys (32 tiles a pair)
// pairs were 0-1.5 us slower (bench/NOTES.md, "kv-cache: one split on large pages, pairs on paged many-wave grids").
constexpr int kKvcPagedPair = 2;
constexpr int64_t kKvcPagedPairMinTiles = 64;
FLASHATTN_HD constexpr int kvc_fast_memory_paged_group(int group, int wide_group, int64_t kv_blocks, int64_t slots,
                                                       int64_t pair_tiles) {
    if (group != wide_group || wide_group <= kKvcPagedPair) return group;
    if (double(kv_blocks / wide_group) < kKvcFilled * double(slots)) return group;
    return pair_tiles >= kKvcPagedPairMinTiles ? kKvcPagedPair : group;
}

// Fast memory, paged caches where `group` is a pair on a grid of two blocks an SM (kv_blocks / 2 from kKvcFilled of the
// slots to all of them: batch 64 x 8 and 16 x 32 kv heads): fours, where the instance allows them (group_max,
// kvc_head_group's), a four's query rows stay within kKvcPagedQuadMaxRows (4 x kv_rows) and its blocks read at least
// min_tiles key tiles (quad_tiles; kKvcQuadMinTiles, 16k keys, or kvc_paged_quad_min_tiles'); else `group`. The grid of
// fours (128 blocks) is then split in two by kvc_two_per_sm_splits. On an H200, graph-replayed, one query row, fours
// against pairs, pages 64 / 256: 16 x 32 x 16k 966.7 against 973.0 us and 967.3 against 978.5, 64k 3794 against 3835
// and 3810 against 3847; 64 x 8 x 16k 969.3 against 972.9 and 964.4 against 971.9 (two runs before alike), 64k 3805
// against 3841 and 3807 against 3832. At 4k they went either way (16 x 32 page 256 254.9 against 256.6, 64 x 8 page 64
// 258.4 against 257.2); with four query rows 64 x 8 (64 rows a four) read slower (16k page 256 983.8 against 980.3, 4k
// 269.1 against 262.0) and 16 x 32 (16 rows) the same (975.5 against 977.3). bench/NOTES.md, "kv-cache: one split on
// large pages, pairs on paged many-wave grids". Pages of 16-row pieces (kvc_head_group_for_grid's pairs there) gain as
// much: 16 x 32 x 16k page 16 968.5 and 974.2 against 978.4 and 981.6, 64k 3818 and 3823 against 3872 and 3862, 64 x 8
// x 16k 975.8 and 977.6 against 980.2 and 981.6, 64k 3827 against 3856; four query rows 16 x 32 x 16k 976.5 against
// 983.0, 64 x 8 (64 rows a four) 994.5 against 991.6; 8k 497.7 against 498.7 ("kv-cache: fours on the dense 16 x 32
// grids and on page 16").
//
// Pages below kKvcBigPageBytes take fours from 8k keys (kvc_paged_quad_min_tiles: 512 tiles), fours against pairs
// there in two runs, one query row: 16 x 32 page 64 490.9 and 490.6 against 494.3 and 494.7 us, page 16 497.7 against
// 498.9, 64 x 8 page 64 493.2 and 495.9 against 494.6 and 496.6, page 256 (512 KiB) 492.6 and 494.7 against 494.4 and
// 494.5, page 16 499.8 against 499.8; four query rows (16 rows a four) 16 x 32 page 64 494.6 against 494.9, page 16
// 498.4 against 500.4. Pages of 1 MiB and more keep 16k: their grid of fours stays one split at 8k
// (kvc_two_per_sm_splits), and 16 x 32 page 256 with four query rows read 519.5 against 495.1 (one query row 493.0
// against 495.3). bench/NOTES.md, "kv-cache: the code's layout, and fours from 8k on pages".
constexpr int kKvcPagedQuad = 4;
constexpr int64_t kKvcPagedQuadMaxRows = 16;
constexpr int64_t kKvcQuadMinTiles = 1024, kKvcSmallPageQuadMinTiles = 512;
FLASHATTN_HD constexpr int64_t kvc_paged_quad_min_tiles(int64_t page_bytes) {
    return page_bytes < kKvcBigPageBytes ? kKvcSmallPageQuadMinTiles : kKvcQuadMinTiles;
}
FLASHATTN_HD constexpr int kvc_fast_memory_paged_quads(int group, int group_max, int64_t kv_rows, int64_t kv_blocks,
                                                       int64_t slots, int64_t quad_tiles,
                                                       int64_t min_tiles = kKvcQuadMinTiles) {
    if (group != kKvcPagedPair || group_max < kKvcPagedQuad || kKvcPagedQuad * kv_rows > kKvcPagedQuadMaxRows)
        return group;
    const int64_t pairs = kv_blocks / kKvcPagedPair;
    if (double(pairs) < kKvcFilled * double(slots) || pairs > slots) return group;
    return quad_tiles >= min_tiles ? kKvcPagedQuad : group;
}

// Fast memory, dense caches: kvc_fast_memory_paged_quads' fours (in place of kvc_dense_head_group's pairs, on grids of
// two pairs an SM, a four's rows within 16, 16k keys or more) where a cache position holds at least
// kKvcDenseQuadMinHeads kv heads, so a four's rows are an eighth of the position's or less; else `group`. On an H200,
// graph-replayed, dense, fours against pairs in two runs: batch 16 x 32 x 16k 961.7 and 961.1 us against 968.0 and
// 968.6 (cuDNN 964.5, 963.7), 64k 3815 and 3828 against 3891 and 3884 (cuDNN 3805, 3806); four query rows (16 rows a
// four) 16k 966.0 against 969.1, 64k 3854 against 3883; at 8k 489.4 and 489.1 against 490.2 and 490.0. Batch 64 x 8
// (a four half of a position's 8 kv heads) read slower with fours: 16k 972.9 and 970.6 against 966.0 and 967.7, 8k
// 495.6 and 496.1 against 492.1 and 492.0, 64k 3875 and 3848 against 3842 and 3844 (bench/NOTES.md, "kv-cache: fours
// on the dense 16 x 32 grids and on page 16").
// (At 8k, dense 16 x 32, fours read as pairs: 490.0 against 490.0.)
constexpr int kKvcDenseQuadMinHeads = 32;
FLASHATTN_HD constexpr int kvc_fast_memory_dense_quads(int group, int group_max, int64_t nheads_k, int64_t kv_rows,
                                                       int64_t kv_blocks, int64_t slots, int64_t quad_tiles) {
    if (nheads_k < kKvcDenseQuadMinHeads) return group;
    return kvc_fast_memory_paged_quads(group, group_max, kv_rows, kv_blocks, slots, quad_tiles);
}

// Fast memory, tiles ahead (KvcPlan::tiles_ahead): as many as the rings hold (0) on paged caches whose blocks read at
// least kKvcFullRingMinTiles key tiles in units of at most kKvcFullRingMaxSplits splits, and on grids of more blocks
// than slots; else kvc_tiles_ahead's `ahead`. On an H200, the whole ring against one tile ahead: paged, two splits, 16
// x 8 x 64k page 16 1004 against 1016 us, page 64 970 against 983, 16 x 8 x 16k page 16 260.8 against 262.5; many
// waves, 64 x 32 x 4k dense 966 against 997, 64 x 32 x 16k page 64 3784 against 3915, 64 x 8 x 64k page 16 (4 splits)
// 3831 against 3923. One tile ahead was faster on the paged grids of more splits a unit: eight, 4 x 8 x 64k page 64
// 260.1 against 263.0, 1 x 32 x 64k page 64 257.5 against 261.3, page 16 260.6 against 264.1 (4 x 8 x 64k page 16:
// 265.4 both); over 19 paged shapes 1.0-2.7% at pages 64 and 256 and 0.1-1.6% at page 16 on grids of 4-16 splits, but
// for 8 x 8 x 64k page 16 (4 splits: 497.3 against 496.0). Dense one-wave grids read 0.4-2% slower with the whole ring
// (16 x 8 x 64k, two splits: 964 against 957; 4 x 8 x 64k: 261.5 against 255.8), and paged grids of short split blocks
// (batch 1 x 8 x 16k, 8 tiles a block; 4 x 8 x 16k, 32) 1-3% slower. Pages of 16-row pieces (small_pieces,
// kvc_small_page_pieces) take the whole ring in units of any split count since their K pieces are one copy each
// (KvcPlan::k_fold): then 4 x 8 x 64k page 16 262.9 against 265.7 us, 1 x 32 x 64k page 16 260.6 against 263.0.
// Unsplit grids of several kv heads a block (head_group) on pieces longer than 16 rows keep `ahead`: their boxes are
// runs of a row's kv heads, read as a dense cache's are. On an H200, one query row, one tile ahead against the whole
// ring: 64 x 32 x 1k (eight kv heads a block) page 64 250.3 against 253.4 us, page 256 249.5 against 253.8; 16 x 32
// x 4k (pairs) page 64 250.3 against 252.5, page 256 249.2 against 253.6; 64 x 8 x 4k page 256 251.5 against 251.4
// (four rows 255.2 against 257.0); while their two-split grids read slower with it (16 x 32 x 16k page 64, fours,
// 953.6 against 945.6; 64 x 8 x 16k page 64 962.2 against 953.1), as one kv head a block does (16 x 8 x 16k page 64
// 251.8 against 249.6) (bench/NOTES.md, "kv-cache: the paged path apart from where pages lie").
constexpr int64_t kKvcFullRingMinTiles = 64;
constexpr int64_t kKvcFullRingMaxSplits = 2;
FLASHATTN_HD constexpr int kvc_fast_memory_tiles_ahead(int ahead, bool paged, int64_t blocks, int64_t tiles_per_block,
                                                       int64_t splits, int64_t slots, bool small_pieces = false,
                                                       int head_group = 1) {
    if (blocks > slots) return 0;
    const bool units_fit = splits <= kKvcFullRingMaxSplits || small_pieces;
    const bool grouped_unsplit = head_group > 1 && splits == 1 && !small_pieces;
    return paged && tiles_per_block >= kKvcFullRingMinTiles && units_fit && !grouped_unsplit ? 0 : ahead;
}

// Balanced splits (KvcPlan::balance_tiles) where they pay, when asked for (FLASHATTN_KVC_BALANCE=rule: not by
// default, since they make a call's last bits vary from call to call; kernels/dispatch.cpp): one-wave grids (at most
// `slots` blocks, so a unit's splits run together) keeping the whole ring (tiles_ahead 0) on paged caches of 16-row
// pieces (small_pieces), whose kKvcBalanceMinSplits to kKvcClusterMax splits a unit merge in the combine kernel;
// kKvcBalanceTiles tiles a claim.
// Why: on an H200 the whole ring reads faster on some groups of SMs than on others on paged grids (bench/NOTES.md,
// "kv-cache: the SM groups of the paged grids"): at 4 x 8 and 1 x 32 kv heads x 64k page 16 (eight splits, 256
// blocks) the last blocks ended 12-19 us after the mean, the grid's rate falling over that tail. Measured
// (graph-replayed, cuDNN 250.0-250.6 us): 4 x 8 x 64k page 16 254.2 against 257.8, 1 x 32 x 64k page 16 254.0 against
// 256.8; a tile a claim 274.4 and 268.8 (the claim's round trip on the copies' path), four 256.0 and 254.8; the
// two-split grids of pages of 16 lost 4.9-19 us (16 x 8 x 16k 258.5 against 253.6, 16 x 8 x 64k 965.0 against 953.5,
// 64 x 8 x 16k 980.4 against 961.2), 4 x 8 x 64k page 64 (one tile ahead, its SMs alike) 0.6 us. Grids of several
// waves are left out unmeasured: blocks start in split order last, so a unit's first split would claim most of it
// before the others start.
constexpr int kKvcBalanceTiles = 2, kKvcBalanceMinSplits = 4;
FLASHATTN_HD constexpr int kvc_balance_tiles(bool small_pieces, int tiles_ahead, int64_t splits, bool merge_in_cluster,
                                             int64_t grid_blocks, int64_t slots) {
    return small_pieces && tiles_ahead == 0 && !merge_in_cluster && splits >= kKvcBalanceMinSplits &&
                   splits <= kKvcClusterMax && grid_blocks <= slots
               ? kKvcBalanceTiles
               : 0;
}

// Fast memory, in place of kvc_one_sm_splits: on grids of at most kKvcWideFitUnits units (batch x kv heads: 1 x 8),
// kKvcWideFitSplits splits where that keeps the grid within the SMs and each split kKvcWideFitMinTiles to
// kKvcWideFitMaxTiles key tiles (3k-4k keys); else kvc_one_sm_splits. On an H200, batch 1 x 8 x 4k: 16 splits
// against the H100 rule's 8, page 16 16.9 against 18.2 us, dense 16.3 against 16.6, pages of 64 and 256 the same
// (cuDNN 16.9-17.6); at 1k keys 16 splits of one tile were 1 us slower than 8. Other lengths are not measured.
constexpr int64_t kKvcWideFitUnits = 8;
constexpr int kKvcWideFitSplits = 16;
constexpr int64_t kKvcWideFitMinTiles = 3, kKvcWideFitMaxTiles = 4;
FLASHATTN_HD constexpr int64_t kvc_fast_memory_one_sm_splits(int64_t splits, int64_t blocks, int64_t key_tiles,
                                                             int64_t sm_count) {
    if (blocks > 0 && blocks <= kKvcWideFitUnits && key_tiles > 0 && blocks * kKvcWideFitSplits <= sm_count &&
        splits > kKvcPortableCluster) {
        const int64_t tiles = (key_tiles + kKvcWideFitSplits - 1) / kKvcWideFitSplits;
        if (tiles >= kKvcWideFitMinTiles && tiles <= kKvcWideFitMaxTiles) return kKvcWideFitSplits;
    }
    return kvc_one_sm_splits(splits, blocks, key_tiles, sm_count);
}

// The Hopper kv-cache kernel's placement clusters (kvcache_sm90.cu, kvc_place_cluster): the blocks along the grid's y
// (a sequence's kv heads, consecutive) launched this many a cluster, for where they run (the kernel reads nothing of
// the cluster). `asked` (FLASHATTN_KVC_PLACE; -1 unset) overrides the rule, pairs on paged caches of one kv head a
// block; none (1) where the splits merge in clusters of their own, or where the count is outside 2..kKvcPlaceMax or
// does not divide the grid's y. On an H200 pairs read the split 64k page-16 grids 0.6-0.8% faster and the rest within
// noise; clusters of 4 and 8 were slower on every shape, up to 1.6x (bench/NOTES.md, "kv-cache: translations warmed,
// deeper rings, dense folds, placement clusters").
constexpr int kKvcPlaceMax = 8;          // the largest cluster every Hopper part places
constexpr int kKvcPlacePagedBlocks = 2;  // the rule's clusters on paged caches
FLASHATTN_HD constexpr int kvc_place_blocks(bool paged, int head_group, bool merge_in_cluster, int64_t grid_y,
                                            int asked) {
    if (merge_in_cluster) return 1;
    const int placed = asked >= 0 ? asked : paged && head_group == 1 ? kKvcPlacePagedBlocks : 1;
    return placed < 2 || placed > kKvcPlaceMax || grid_y % placed != 0 ? 1 : placed;
}

}  // namespace flashattn::kernels
