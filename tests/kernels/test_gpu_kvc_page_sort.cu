// The kv-cache page order's window sort (src/kernels/sm90/kvc_page_order.cuh) on its own: one warp reads a window of
// a block-table row into registers (kvc_read_window), runs every stage of the bitonic sort (warp_sort_stage), stores
// it (kvc_store_window), and the test checks the buffer against std::sort. The attention tests cannot see this: any
// compare-exchange network gives a permutation of the pages, and attention does not depend on the keys' order, so a
// wrong network would only read slower. Both window sizes (8 and 32 values a lane), full and partial windows (the
// rest INT_MAX), a second window of a row, and repeated values. Then a merged range (KvcMerge): two to four wide
// windows sorted, then merged a tile at a time, for pages of one or several pieces and pages longer than a tile,
// checked piece by piece against the whole range sorted. The functions use warp shuffles and shared memory alone, so
// this runs on any GPU the tests run on.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/gpu_test_util.h"
#include "kernels/sm90/kvc_page_order.cuh"

namespace flashattn::testing {
namespace {

constexpr int kWarp = 32;

// Window `window` of a row of `pages` block numbers, sorted into `out` (32 x kPerLane entries).
template <int kPerLane>
__global__ void __launch_bounds__(kWarp) sort_window_kernel(const int32_t* row, int pages, int window, int32_t* out) {
    constexpr int kPages = kWarp * kPerLane;
    constexpr int kStages = __builtin_ctz(kPages);
    __shared__ alignas(16) int32_t buffer[kPages];
    const int lane = threadIdx.x;
    kernels::KvcPageOrder order;
    order.pages = pages;
    int r[kPerLane];
    kernels::kvc_read_window(order, row, window, r, lane);
    for (int stage = 0; stage < kStages; ++stage) kernels::warp_sort_stage(r, lane, stage);
    kernels::kvc_store_window(r, buffer, lane);
    for (int i = lane; i < kPages; i += kWarp) out[i] = buffer[i];
}

// A merged range of `pages` block numbers (from the row's start): every window sorted and stored, then `tiles` tiles
// of pieces_per_tile pieces merged; piece j's block number to blocks[j], its first row to rows[j].
__global__ void __launch_bounds__(kWarp) merge_kernel(const int32_t* row, int pages, int tiles, int pieces_per_tile,
                                                      int pieces_per_page, int32_t* blocks, int32_t* rows) {
    __shared__ alignas(16) int32_t windows[kernels::kKvcOrderMergeWindows][kernels::kKvcOrderWidePages];
    const int lane = threadIdx.x;
    kernels::KvcPageOrder order;
    order.active = order.wide = order.merged = true;
    order.window_shift = kernels::kKvcOrderWideStages;
    order.pages = pages;
    order.piece_rows = 16;
    order.pieces_per_tile = pieces_per_tile, order.pieces_per_page = pieces_per_page;
    for (int w = 0; w < order.windows(); ++w) {
        int r[kernels::kKvcOrderWidePerLane];
        kernels::kvc_read_window(order, row, w, r, lane);
        for (int stage = 0; stage < order.stages(); ++stage) kernels::warp_sort_stage(r, lane, stage);
        kernels::kvc_store_window(r, windows[w], lane);
    }
    kernels::KvcMerge merge;
    merge.start(order, windows);
    for (int i = 0; i < tiles; ++i) {
        const kernels::KvcPiece piece = merge.piece(order, windows, i, lane);
        if (lane < pieces_per_tile) {
            blocks[i * pieces_per_tile + lane] = piece.block;
            rows[i * pieces_per_tile + lane] = piece.row;
        }
    }
}

class GpuKvcPageSort : public GpuTest {
  protected:
    template <int kPerLane>
    void check(int pages, int window, bool repeats, uint64_t seed) {
        constexpr int kPages = kWarp * kPerLane;
        SCOPED_TRACE(std::to_string(kPerLane) + " a lane, a row of " + std::to_string(pages) + " pages, window " +
                     std::to_string(window) + (repeats ? ", repeated values" : ""));
        std::mt19937_64 rng(seed);
        std::vector<int32_t> row(static_cast<size_t>(pages));
        if (repeats) {
            std::uniform_int_distribution<int32_t> few(0, 9);
            for (int32_t& v : row) v = few(rng);
        } else {  // a block table's row: distinct block numbers of a larger pool, in no order
            std::vector<int32_t> pool(static_cast<size_t>(4 * pages));
            std::iota(pool.begin(), pool.end(), 0);
            std::shuffle(pool.begin(), pool.end(), rng);
            std::copy_n(pool.begin(), pages, row.begin());
        }
        DeviceBuffer d_row(row.size() * sizeof(int32_t)), d_out(kPages * sizeof(int32_t));
        d_row.upload(row.data(), row.size() * sizeof(int32_t));
        d_out.poison();
        sort_window_kernel<kPerLane><<<1, kWarp>>>(static_cast<const int32_t*>(d_row.data()), pages, window,
                                                   static_cast<int32_t*>(d_out.data()));
        cuda_sync_check("the window sort");
        std::vector<int32_t> got(kPages);
        d_out.download(got.data(), kPages * sizeof(int32_t));

        const int first = window * kPages, count = std::min(kPages, pages - first);
        std::vector<int32_t> want(row.begin() + first, row.begin() + first + count);
        std::sort(want.begin(), want.end());
        want.resize(kPages, INT_MAX);
        for (int i = 0; i < kPages; ++i) ASSERT_EQ(got[i], want[i]) << "entry " << i;
    }

    // A merged range of `pages` distinct block numbers, read in tiles of pieces_per_tile pieces of 16 rows, pages of
    // pieces_per_page (whole tiles: the kernel's range is whole pages and whole tiles).
    void check_merge(int pages, int pieces_per_tile, int pieces_per_page, uint64_t seed) {
        SCOPED_TRACE("a merged range of " + std::to_string(pages) + " pages, " + std::to_string(pieces_per_tile) +
                     " pieces a tile, " + std::to_string(pieces_per_page) + " a page");
        std::mt19937_64 rng(seed);
        std::vector<int32_t> pool(static_cast<size_t>(4 * pages));
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        const std::vector<int32_t> row(pool.begin(), pool.begin() + pages);
        const int pieces = pages * pieces_per_page, tiles = pieces / pieces_per_tile;
        ASSERT_EQ(tiles * pieces_per_tile, pieces) << "the range is whole tiles";
        DeviceBuffer d_row(row.size() * sizeof(int32_t)), d_blocks(pieces * sizeof(int32_t)),
            d_rows(pieces * sizeof(int32_t));
        d_row.upload(row.data(), row.size() * sizeof(int32_t));
        d_blocks.poison(), d_rows.poison();
        merge_kernel<<<1, kWarp>>>(static_cast<const int32_t*>(d_row.data()), pages, tiles, pieces_per_tile,
                                   pieces_per_page, static_cast<int32_t*>(d_blocks.data()),
                                   static_cast<int32_t*>(d_rows.data()));
        cuda_sync_check("the merge");
        std::vector<int32_t> blocks(pieces), rows(pieces);
        d_blocks.download(blocks.data(), pieces * sizeof(int32_t));
        d_rows.download(rows.data(), pieces * sizeof(int32_t));
        std::vector<int32_t> want(row);
        std::sort(want.begin(), want.end());
        for (int j = 0; j < pieces; ++j) {
            ASSERT_EQ(blocks[j], want[j / pieces_per_page]) << "piece " << j;
            ASSERT_EQ(rows[j], j % pieces_per_page * 16) << "piece " << j;
        }
    }
};

TEST_F(GpuKvcPageSort, WindowsOf256PagesComeOutAscending) {
    for (int pages : {1, 2, 17, 113, 255, 256}) check<kernels::kKvcOrderPerLane>(pages, 0, false, uint64_t(pages));
    check<kernels::kKvcOrderPerLane>(256 + 200, 1, false, 7);  // the second window of a row, partial
    check<kernels::kKvcOrderPerLane>(256, 0, true, 8);
}

TEST_F(GpuKvcPageSort, WindowsOf1024PagesComeOutAscending) {
    for (int pages : {1, 257, 1000, 1024}) check<kernels::kKvcOrderWidePerLane>(pages, 0, false, uint64_t(pages));
    check<kernels::kKvcOrderWidePerLane>(2 * 1024 + 300, 2, false, 9);  // the third window of a row, partial
    check<kernels::kKvcOrderWidePerLane>(1024, 0, true, 10);
}

TEST_F(GpuKvcPageSort, MergedWindowsComeOutAscending) {
    check_merge(1028, 4, 1, 11);      // two windows, one page a piece (pages of 16, tiles of 64 keys)
    check_merge(2000, 4, 4, 12);      // one page a tile
    check_merge(3 * 1024, 2, 1, 13);  // three full windows
    check_merge(4096, 4, 1, 14);      // four, the most
    check_merge(3000, 1, 2, 15);      // pages of two tiles (8 kv heads a block: tiles of 8 keys)
    check_merge(2400, 4, 2, 16);      // two pages a tile
    check_merge(1500, 4, 3, 17);      // pages of three pieces (48 rows): a page across two tiles
}

}  // namespace
}  // namespace flashattn::testing
