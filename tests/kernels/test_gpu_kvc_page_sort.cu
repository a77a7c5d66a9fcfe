// The kv-cache page order's window sort (src/kernels/sm90/kvc_page_order.cuh) on its own: one warp reads a window of
// a block-table row into registers (kvc_read_window), runs every stage of the bitonic sort (warp_sort_stage), stores
// it (kvc_store_window), and the test checks the buffer against std::sort. The attention tests cannot see this: any
// compare-exchange network gives a permutation of the pages, and attention does not depend on the keys' order, so a
// wrong network would only read slower. Both window sizes (8 and 32 values a lane), full and partial windows (the
// rest INT_MAX), a second window of a row, and repeated values. Then a merged range sorted whole (two to four wide
// windows sorted, then merged by kvc_merge_step's passes and cleans), by one warp and by two with their barriers.
// The functions use warp shuffles, shared memory and named barriers alone, so this runs on any GPU the tests run on.
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

// A merged range of `pages` block numbers (from the row's start) sorted whole by kWarps warps as the kernel's
// producers do it: each warp's windows sorted and stored, then its steps of the merge (kvc_merge_step) with their
// barriers; the run (kKvcOrderMergeWindows wide windows) to `out`.
template <int kWarps>
__global__ void __launch_bounds__(kWarp * kWarps) merge_kernel(const int32_t* row, int pages, int32_t* out) {
    constexpr int kBarrier = 1;
    __shared__ alignas(16) int32_t run[kernels::kKvcOrderMergeWindows][kernels::kKvcOrderWidePages];
    const int lane = threadIdx.x % kWarp;
    kernels::KvcPageOrder order;
    order.active = order.wide = order.merged = true;
    order.window_shift = kernels::kKvcOrderWideStages;
    order.pages = pages;
    order.producers = kWarps, order.producer = threadIdx.x / kWarp;
    int r[kernels::kKvcOrderWidePerLane];
    for (int w = order.first_window(); w < order.sort_end(); ++w) {
        kernels::kvc_read_window(order, row, w, r, lane);
        for (int stage = 0; stage < order.stages(); ++stage) kernels::warp_sort_stage(r, lane, stage);
        kernels::kvc_store_window(r, run[w], lane);
    }
    for (int step = 0; step < order.merge_steps(); ++step) {
        const kernels::KvcMergeStep m = kernels::kvc_merge_step(order, step);
        if (m.wait >= 0) kernels::kvc_merge_wait<kBarrier>(order, m.wait);
        if (m.pass_a >= 0) kernels::kvc_window_pass(run[0], m.pass_a, m.pass_b, m.reversed, lane);
        if (m.clean >= 0) {
            kernels::kvc_load_window(run[0], m.clean, r, lane);
            kernels::warp_sort_stage(r, lane, kernels::kKvcCleanStage);
            kernels::kvc_store_window(r, run[m.clean], lane);
        }
        if (m.arrive >= 0) kernels::kvc_merge_arrive<kBarrier>(order, m.arrive);
    }
    if (kWarps > 1) kernels::kvc_merge_wait<kBarrier>(order, 2);
    __syncthreads();
    for (int i = threadIdx.x; i < kernels::kKvcOrderMergedPages; i += blockDim.x) out[i] = run[0][i];
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

    // A merged range of `pages` distinct block numbers sorted whole by kWarps warps: the run is the range sorted,
    // then INT_MAX.
    template <int kWarps>
    void check_merge(int pages, uint64_t seed) {
        SCOPED_TRACE("a merged range of " + std::to_string(pages) + " pages, " + std::to_string(kWarps) + " warps");
        constexpr int kRun = static_cast<int>(kernels::kKvcOrderMergedPages);
        std::mt19937_64 rng(seed);
        std::vector<int32_t> pool(static_cast<size_t>(4 * pages));
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        const std::vector<int32_t> row(pool.begin(), pool.begin() + pages);
        DeviceBuffer d_row(row.size() * sizeof(int32_t)), d_out(kRun * sizeof(int32_t));
        d_row.upload(row.data(), row.size() * sizeof(int32_t));
        d_out.poison();
        merge_kernel<kWarps><<<1, kWarp * kWarps>>>(static_cast<const int32_t*>(d_row.data()), pages,
                                                    static_cast<int32_t*>(d_out.data()));
        cuda_sync_check("the merge");
        std::vector<int32_t> got(kRun);
        d_out.download(got.data(), kRun * sizeof(int32_t));
        std::vector<int32_t> want(row);
        std::sort(want.begin(), want.end());
        want.resize(kRun, INT_MAX);
        for (int i = 0; i < kRun; ++i) ASSERT_EQ(got[i], want[i]) << "entry " << i;
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

TEST_F(GpuKvcPageSort, MergedRangesComeOutAscending) {
    for (int pages : {1025, 2000, 2048, 3000, 4096}) {  // two to four windows, the last partial or full
        check_merge<1>(pages, uint64_t(pages));
        check_merge<2>(pages, uint64_t(pages) + 1);
    }
}

}  // namespace
}  // namespace flashattn::testing
