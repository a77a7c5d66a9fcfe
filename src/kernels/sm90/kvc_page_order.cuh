// A paged cache's pages read in address order (KvcPlan::pages_in_address_order): the Hopper kv-cache kernel's
// producers take the pages of a block's middle tiles not in the block table's order but sorted by their block
// number, a window of kKvcOrderPages (or, for longer blocks, kKvcOrderWidePages) pages at a time.
//
// Why: a paged allocator scatters a sequence's pages over the pool, and read in table order each block's copies land
// anywhere in it at any moment. Sorted, every block sweeps the pool from its low addresses to its high ones, all at
// about the same pace, so the whole grid's copies in flight lie in a narrow band of the pool: few address
// translations and DRAM pages at a time. Measured on an H100 (bench/NOTES.md, "kv-cache: the page order, read ahead
// and sorted a stage a tile"): at batch 16 x 8 kv heads x 4k keys, random 16-row pages read 105.1 us in this order
// against 106.2 in table order; at 16 x 8 x 16k 365.9 against 370.4; at 64 x 8 x 4k 362.9 against 368.0. A block
// read window after window gains nothing (each window's pages spread over the whole pool again), so a range of two to
// kKvcOrderMergeWindows wide windows is sorted whole before its first tile: each window on its own, then the windows
// merged by the bitonic network's last stages (kvc_merge_step), the two producer warps sharing the work. The block
// then sweeps the pool once, and a tile's pages are looked up as in one window.
//
// Cost: each window's page numbers are read a window ahead (into registers), and sorted one bitonic stage a tile
// while the producer would wait for a free stage of its ring anyway; sorted whole at one tile, the 2.8-4.3 us of the
// sort held both producers' copies up longer than the rings cover.
//
// Which tiles: attention does not depend on the order its keys come in, only on which keys a row sees and, with
// ALiBi, on their positions (the host leaves the order off then). So the tiles every row of the block sees whole
// (no mask, no tail: the consumers use their positions on no other tile) may hold any of those tiles' pages. Their
// range is cut to whole pages and whole tiles, and starts after the block's first tiles, which go out in table order
// as before: at least the rings' depth, and the stages + 1 tiles during which the first window is sorted.
// Window w + 1 is sorted during window w's first tiles (two buffers). The consumers are not told: a tile of this
// range is used as it always was.
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/sm80/kvcache_common.cuh"
#include "kernels/sm80/kvcache_plan.h"
#include "kernels/common/ptx_sm90.cuh"

namespace flashattn::kernels {

// Two window sizes: a block's range of up to kKvcOrderPages pages is sorted in one window of that size, a longer one
// in windows of kKvcOrderWidePages (four times the registers and shuffles a stage, which blocks of one small window
// would pay for nothing: 16 x 8 kv heads x 4k keys read no faster in address order with the wide window).
constexpr int kKvcOrderPerLane = 8;                            // a window's pages a lane holds while sorting
constexpr int kKvcOrderPages = 32 * kKvcOrderPerLane;         // pages sorted at once
constexpr int kKvcOrderStages = 8;                             // the sort's merge stages: log2(kKvcOrderPages)
constexpr int kKvcOrderWidePerLane = 32;                       // the same for the wide window
constexpr int kKvcOrderWidePages = 32 * kKvcOrderWidePerLane;
constexpr int kKvcOrderWideStages = 10;
constexpr int kKvcOrderBuffers = 2;                            // window w in buffer w % 2: the next sorted while in use
// A merged range (KvcPageOrder::merged): kKvcOrderMergeWindows wide windows sorted whole, into the two producer warps'
// buffers taken together (kKvcOrderProducers x kKvcOrderBuffers of them); windows past the range's pages hold INT_MAX.
constexpr int kKvcOrderProducers = 2;
constexpr int kKvcOrderMergeWindows = kKvcOrderProducers * kKvcOrderBuffers;
// The merge's steps after a warp's windows are sorted (kvc_merge_step): with two warps, each merges its two windows
// (3 steps), then their halves of the last level (4); one warp does it all (14).
constexpr int kKvcMergeStepsTwoWarps = 7, kKvcMergeStepsOneWarp = 14;
static_assert(1 << kKvcOrderStages == kKvcOrderPages && 1 << kKvcOrderWideStages == kKvcOrderWidePages,
              "a stage a power of two");
static_assert(kKvcOrderWidePages == kKvcOrderWindowPages &&
                  kKvcOrderMergeWindows * kKvcOrderWidePages == kKvcOrderMergedPages,
              "the planner's rule counts windows of this many pages");

// The range of a block's tiles read in address order, and how its pieces map to its pages.
struct KvcPageOrder {
    bool active = false;
    bool wide = false;                 // windows of kKvcOrderWidePages, else of kKvcOrderPages
    bool merged = false;               // kKvcOrderMergeWindows wide windows sorted whole before tile_begin
    int producers = 1, producer = 0;   // merged: the warps sharing the sort, and this one's index
    int window_shift = 0;              // log2 of a window's pages: also its sort's stages
    int tile_begin = 0, tile_end = 0;  // the block's tiles (counted from its first) whose pages are sorted
    int first_page = 0;                // the sequence's page (block-table column) of tile_begin's first key
    int pages = 0;                     // pages in the range
    int pieces_per_tile = 0, pieces_per_page = 0, piece_rows = 0;
    int tiles_per_window = 0;

    __device__ __forceinline__ int windows() const { return (pages + (1 << window_shift) - 1) >> window_shift; }
    __device__ __forceinline__ int stages() const { return window_shift; }
    // The windows this warp sorts: [first_window(), sort_end()); merged, warp p of two its pair 2p and 2p + 1.
    __device__ __forceinline__ int first_window() const {
        return merged ? producer * (kKvcOrderMergeWindows / producers) : 0;
    }
    __device__ __forceinline__ int sort_end() const {
        return merged ? first_window() + kKvcOrderMergeWindows / producers : windows();
    }
    // The tile after whose copies window w's sort runs its stage `stage` (one stage a tile, while the producer would
    // wait for a free stage of its ring anyway): tiles 1 to stages() for the first window (read at tile 0), and for
    // window w > 0 the same tiles counted from window w - 1's first (read once window w - 1 is stored). Merged, a
    // warp's windows one after the other from tile 1 (each read once the one before it is stored), then the merge's
    // steps, one a tile (merge_tile).
    __device__ __forceinline__ int stage_tile(int w, int stage) const {
        if (merged) return 1 + (w - first_window()) * stages() + stage;
        return (w == 0 ? 0 : tile_begin + (w - 1) * tiles_per_window) + 1 + stage;
    }
    __device__ __forceinline__ int merge_steps() const {
        return producers == 1 ? kKvcMergeStepsOneWarp : kKvcMergeStepsTwoWarps;
    }
    __device__ __forceinline__ int merge_tile(int step) const {
        return 1 + (sort_end() - first_window()) * stages() + step;
    }
};

// keys_per_tile and piece_rows are powers of two up to 64; piece_rows divides page_size (kvc_box_rows). natural: the
// first tiles that go out in table order whatever the order (the rings' depth); the first window's sort takes more.
// producers: the block's producer warps (1 or 2), which share a merged range's sort; producer: this warp's index. In
// 32-bit arithmetic: the producers work this out between their first copies, where code of its own is fetched cold
// (an L2 flushed before the call) and every instruction counts.
__device__ __forceinline__ KvcPageOrder kvc_page_order(bool enabled, const KvcBlock& blk, int keys_per_tile,
                                                       int page_size, int piece_rows, int natural, int producers,
                                                       int producer) {
    KvcPageOrder o;
    // Positions are keys from 0 (pages start at whole keys); lengths near 2^31 keys, and pages whose window's keys
    // would be past it, are left in table order.
    if (!enabled || blk.seq.leftpad != 0 || blk.seq.seqlen_k > INT_MAX / 4 ||
        page_size > (INT_MAX >> kKvcOrderWideStages))
        return o;
    const int kpt = keys_per_tile;
    // Whole pages and whole tiles: multiples of lcm(page_size, kpt) (kpt a power of two, so page_size times its
    // share of kpt that page_size's factors of two leave).
    const int twos = page_size & -page_size;
    const int align = page_size * (kpt > twos ? kpt / twos : 1);
    const int hi = min(min(blk.tiles.end * kpt, int(blk.first.end)), blk.seq.seqlen_k);
    const int end = hi / align * align;
    // Keys every row of the block sees (no tile here is masked), of whole tiles past the first `first_tiles`: the
    // rings' depth, and the first window sorted, one stage a tile, before its first tile.
    auto begin_after = [&](int first_tiles) {
        const int lo = max((blk.tiles.begin + max(natural, first_tiles)) * kpt, int(blk.last.begin));
        return (lo + align - 1) / align * align;
    };
    int begin = begin_after(kKvcOrderStages + 1);
    o.wide = (end - begin) / page_size > kKvcOrderPages;
    if (o.wide) begin = begin_after(kKvcOrderWideStages + 1);
    if (o.wide && (end - begin) / page_size > kKvcOrderWidePages) {
        // Several wide windows: sorted whole where they are at most kKvcOrderMergeWindows, the range starting once
        // every warp has sorted its windows and merged them (more are read one window after another, as narrow ones).
        o.producers = producers, o.producer = producer;
        begin = begin_after(kKvcOrderMergeWindows / producers * kKvcOrderWideStages + o.merge_steps() + 1);
        const int pages = (end - begin) / page_size;
        o.merged = pages > kKvcOrderWidePages && pages <= kKvcOrderMergeWindows * kKvcOrderWidePages;
    }
    o.window_shift = o.wide ? kKvcOrderWideStages : kKvcOrderStages;
    o.tiles_per_window = (page_size << o.window_shift) / kpt;
    // A window of fewer tiles than the sort's stages (pages of 1 or 2 keys) would be needed before it is sorted.
    if (end <= begin || o.tiles_per_window <= o.stages()) return o;
    o.tile_begin = begin / kpt - blk.tiles.begin;
    o.tile_end = end / kpt - blk.tiles.begin;
    o.first_page = begin / page_size;
    o.pages = (end - begin) / page_size;
    o.piece_rows = piece_rows;
    o.pieces_per_tile = kpt / piece_rows;
    o.pieces_per_page = page_size / piece_rows;
    o.active = true;
    return o;
}

// Stage `stage` of one warp's ascending sort of its kPerLane x 32 values (a bitonic network, merging runs of
// 2 << stage): after the last stage lane l's r[j] is element l * kPerLane + j (the input's places do not matter).
// The distances shorter than kPerLane go between a lane's own registers, the longer ones across lanes by shuffles:
// with a lane's elements side by side, 8 a lane take 15 rounds of shuffles in all (laid out j * 32 + l, 30), and the
// rounds are what a sort waits on (each a round trip). Run a stage a tile (KvcPageOrder::stage_tile), a sort costs
// the producer nothing it would not spend waiting for a free stage; sorted whole at one tile, it held the copies up
// 3-4 us (bench/NOTES.md, "kv-cache: the page order, read ahead and sorted a stage a tile").
template <int kPerLane>
__device__ __forceinline__ void warp_sort_stage(int (&r)[kPerLane], int lane, int stage) {
    static_assert((kPerLane & (kPerLane - 1)) == 0 && kPerLane <= 32, "a power of two up to 32 a lane");
    const int k = 2 << stage;
    // Across lanes (k > kPerLane): the elements' direction, (element & k) == 0, is the lane's alone.
    const bool lane_ascending = ((lane * kPerLane) & k) == 0;
#pragma unroll 1
    for (int d = k >> 1; d >= kPerLane; d >>= 1) {
        const int lanes_apart = d / kPerLane;
        const bool keep_min = ((lane & lanes_apart) == 0) == lane_ascending;
        // Every shuffle issued before any result is used: each waits only for its own round trip.
        int other[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) other[j] = __shfl_xor_sync(0xffffffffu, r[j], lanes_apart);
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) r[j] = keep_min ? min(r[j], other[j]) : max(r[j], other[j]);
    }
    // Within a lane's registers.
#pragma unroll
    for (int d = kPerLane / 2; d >= 1; d >>= 1) {
        if (d > (k >> 1)) continue;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            if (j & d) continue;
            const bool ascending = ((lane * kPerLane + j) & k) == 0;
            const int lo = min(r[j], r[j | d]), hi = max(r[j], r[j | d]);
            r[j] = ascending ? lo : hi;
            r[j | d] = ascending ? hi : lo;
        }
    }
}

// Window w of the order's block numbers, read from the table row into registers (kPerLane a lane, the window's size
// 32 x kPerLane; past the range's pages INT_MAX, which sort last and are never read). Read a window ahead of its sort:
// the table's lines come from memory as slowly as the grid's copies (they queue behind them).
template <int kPerLane>
__device__ __forceinline__ void kvc_read_window(const KvcPageOrder& o, const int32_t* table_row, int w,
                                                int (&r)[kPerLane], int lane) {
    constexpr int kPages = 32 * kPerLane;
    const int first = w * kPages, count = min(kPages, o.pages - first);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
        const int at = j * 32 + lane;  // coalesced: the sort does not care where a value starts
        r[j] = at < count ? table_row[o.first_page + first + at] : INT_MAX;
    }
}

// A window sorted by all the stages of warp_sort_stage, stored into `buffer` (32 x kPerLane entries). Every lane of
// the producer warp takes part.
template <int kPerLane>
__device__ __forceinline__ void kvc_store_window(const int (&r)[kPerLane], int32_t* buffer, int lane) {
    static_assert(kPerLane % 4 == 0, "a lane's sorted values stored 4 at a time");
    __syncwarp();  // every lane's reads of the window this buffer held are done
    // Lane l's values are elements l * kPerLane on: 16-byte stores (with bank conflicts, two-way at 8 a lane and
    // eight-way at 32: once a window, off the copies' path).
#pragma unroll
    for (int j = 0; j < kPerLane; j += 4)
        *reinterpret_cast<int4*>(buffer + lane * kPerLane + j) = make_int4(r[j], r[j + 1], r[j + 2], r[j + 3]);
    __syncwarp();
}

// Calls f with the window's registers at the order's size: all kKvcOrderWidePerLane of `window` for a wide window,
// else its first kKvcOrderPerLane.
template <class F>
__device__ __forceinline__ void kvc_with_window(const KvcPageOrder& o, int (&window)[kKvcOrderWidePerLane], F f) {
    if (o.wide)
        f(window);
    else
        f(reinterpret_cast<int(&)[kKvcOrderPerLane]>(window));
}

// Lane `lane`'s piece of tile i (counted from the block's first; o.tile_begin <= i < o.tile_end): its block number
// (from the sorted window in `buffers`, or a merged range's run over all of them) and its first row in that page.
struct KvcPiece {
    int block, row;
};
__device__ __forceinline__ KvcPiece kvc_ordered_piece(const KvcPageOrder& o,
                                                      const int32_t (*buffers)[kKvcOrderWidePages], int i, int lane) {
    const int piece = (i - o.tile_begin) * o.pieces_per_tile + lane;
    const int page = piece / o.pieces_per_page;
    const int window = (page >> o.window_shift) % kKvcOrderBuffers, entry = page & ((1 << o.window_shift) - 1);
    const int32_t* at = o.merged ? buffers[0] + page : &buffers[window][entry];  // merged: one run over the buffers
    return KvcPiece{ptx::ld_shared_s32(ptx::smem_addr(at)), piece % o.pieces_per_page * o.piece_rows};
}

// A merged range's sort, after each window is sorted (ascending, into `run`: kKvcOrderMergeWindows x
// kKvcOrderWidePages entries): the bitonic network's last two levels over the windows. Two sorted windows become one
// sorted run of two by a pass that compares the first with the second reversed (the smaller of each pair to the
// first: each window is then bitonic, the first's all below the second's) and a clean of each (warp_sort_stage's
// last stage: the distances within a window); two runs of two windows the same way, the pass across the runs
// (windows 0 and 3, 1 and 2 reversed), a pass at the distance of a window (0 and 1, 2 and 3), and a clean of each.
// Every step is one tile's (KvcPageOrder::merge_tile), a pass or a clean; with two producer warps each takes its pair
// of windows, and named barriers (kBarrier: three pairs, one a warp) order the steps that read the other's windows.
// `window`: the sort's registers, free by then.

// One compare-exchange pass between windows a and b of `run`, the smaller of each pair to a: b's entries from its
// last where `reversed`, else the same places. Lane l takes a's entries [32 l, 32 l + 32), 4 at a time.
__device__ __forceinline__ void kvc_window_pass(int32_t* run, int a, int b, bool reversed, int lane) {
    const uint32_t base = ptx::smem_addr(run);
    __syncwarp();  // every lane's stores of the step before
#pragma unroll 1
    for (int c = 0; c < kKvcOrderWidePerLane; c += 4) {
        const int e = lane * kKvcOrderWidePerLane + c;
        const uint32_t at_a = base + (a * kKvcOrderWidePages + e) * 4;
        const uint32_t at_b = base + (b * kKvcOrderWidePages + (reversed ? kKvcOrderWidePages - 4 - e : e)) * 4;
        const uint4 x = ptx::ld_shared_16(at_a), y4 = ptx::ld_shared_16(at_b);
        const uint4 y = reversed ? make_uint4(y4.w, y4.z, y4.y, y4.x) : y4;  // y.x pairs with x.x
        auto lo = [](uint32_t u, uint32_t v) { return uint32_t(min(int(u), int(v))); };
        auto hi = [](uint32_t u, uint32_t v) { return uint32_t(max(int(u), int(v))); };
        const uint4 small = make_uint4(lo(x.x, y.x), lo(x.y, y.y), lo(x.z, y.z), lo(x.w, y.w));
        const uint4 large = make_uint4(hi(x.x, y.x), hi(x.y, y.y), hi(x.z, y.z), hi(x.w, y.w));
        ptx::st_shared_16(at_a, small);
        ptx::st_shared_16(at_b, reversed ? make_uint4(large.w, large.z, large.y, large.x) : large);
    }
    __syncwarp();
}

// Window w of `run` into a warp's registers as the sort holds them (lane l's r[j] is entry 32 l + j), for a clean: the
// bitonic network's last stage within the window (warp_sort_stage, stage kKvcOrderWideStages - 1), which sorts a
// bitonic window ascending, then kvc_store_window. The clean's stage runs where the sort's stages do (one call in the
// kernel: a second copy of the stage's code made the kernel spill).
__device__ __forceinline__ void kvc_load_window(const int32_t* run, int w, int (&r)[kKvcOrderWidePerLane], int lane) {
    const uint32_t base = ptx::smem_addr(run + w * kKvcOrderWidePages + lane * kKvcOrderWidePerLane);
    __syncwarp();  // every lane's stores of the step before
#pragma unroll
    for (int j = 0; j < kKvcOrderWidePerLane; j += 4) {
        const uint4 v = ptx::ld_shared_16(base + j * 4);
        r[j] = int(v.x), r[j + 1] = int(v.y), r[j + 2] = int(v.z), r[j + 3] = int(v.w);
    }
}
constexpr int kKvcCleanStage = kKvcOrderWideStages - 1;

// Step `step` (0 to merge_steps() - 1) of this warp's share of the merge: a pass, or a clean (its window's index, else
// -1), with the barriers around it: `wait` (before: the other warp's level, else -1) and `arrive` (after: this warp's
// level, else -1). With two warps, warp p takes windows a = 2p and a + 1; level 0: its pair merged; 1: its pass across
// the runs; 2: all of its share (waited for at the range's first tile).
struct KvcMergeStep {
    int pass_a = -1, pass_b = -1;
    bool reversed = false;
    int clean = -1;
    int wait = -1, arrive = -1;
};
__device__ __forceinline__ KvcMergeStep kvc_merge_step(const KvcPageOrder& o, int step) {
    static_assert(kKvcOrderMergeWindows == 4, "two levels of merge");
    KvcMergeStep m;
    auto pass = [&](int a, int b, bool reversed) { m.pass_a = a, m.pass_b = b, m.reversed = reversed; };
    if (o.producers == 1) {
        // Windows 0 and 1, then 2 and 3 (a pass and two cleans each); the passes across the runs and at a window's
        // distance; the four cleans.
        if (step < 6) {
            const int pair = step / 3, part = step % 3;
            if (part == 0)
                pass(2 * pair, 2 * pair + 1, true);
            else
                m.clean = 2 * pair + part - 1;
        } else if (step < 8) {
            pass(step - 6, 3 - (step - 6), true);
        } else if (step < 10) {
            pass(2 * (step - 8), 2 * (step - 8) + 1, false);
        } else {
            m.clean = step - 10;
        }
        return m;
    }
    const int p = o.producer, a = 2 * p;
    switch (step) {
        case 0: pass(a, a + 1, true); break;
        case 1: m.clean = a; break;
        case 2: m.clean = a + 1, m.arrive = 0; break;
        case 3: m.wait = 0, m.arrive = 1, pass(p, 3 - p, true); break;  // windows 0 and 3, 1 and 2
        case 4: m.wait = 1, pass(a, a + 1, false); break;
        case 5: m.clean = a; break;
        default: m.clean = a + 1, m.arrive = 2; break;
    }
    return m;
}

// The merge's named barriers, kBarrier + 2 level + warp: this warp's level stored / the other warp's awaited.
constexpr int kKvcMergeBarriers = 6;
template <int kBarrier>
__device__ __forceinline__ void kvc_merge_arrive(const KvcPageOrder& o, int level) {
    __syncwarp();
    ptx::named_barrier_arrive_nth<kBarrier, kKvcMergeBarriers>(2 * level + o.producer, 64);
}
template <int kBarrier>
__device__ __forceinline__ void kvc_merge_wait(const KvcPageOrder& o, int level) {
    ptx::named_barrier_sync_nth<kBarrier, kKvcMergeBarriers>(2 * level + 1 - o.producer, 64);
}

}  // namespace flashattn::kernels
