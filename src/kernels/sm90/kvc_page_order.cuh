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
// read window after window gains nothing (each window's pages spread over the whole pool again), so a range of up to
// kKvcOrderMergeWindows wide windows is sorted whole before its first tile (each window on its own, the two producer
// warps sharing them) and the windows merged as the tiles are read (KvcMerge): the block then sweeps the pool once.
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
// A merged range's windows (KvcPageOrder::merged): all sorted before its first tile, in one buffer each, the two
// producer warps' buffers taken together (kKvcOrderProducers x kKvcOrderBuffers of them).
constexpr int kKvcOrderProducers = 2;
constexpr int kKvcOrderMergeWindows = kKvcOrderProducers * kKvcOrderBuffers;
static_assert(1 << kKvcOrderStages == kKvcOrderPages && 1 << kKvcOrderWideStages == kKvcOrderWidePages,
              "a stage a power of two");
static_assert(kKvcOrderWidePages == kKvcOrderWindowPages &&
                  kKvcOrderMergeWindows * kKvcOrderWidePages == kKvcOrderMergedPages,
              "the planner's rule counts windows of this many pages");

// The range of a block's tiles read in address order, and how its pieces map to its pages.
struct KvcPageOrder {
    bool active = false;
    bool wide = false;                 // windows of kKvcOrderWidePages, else of kKvcOrderPages
    bool merged = false;               // wide windows, every one sorted before tile_begin and merged as read (KvcMerge)
    int producers = 1;                 // the warps sharing a merged range's sorts: warp p sorts windows p, p + 2, ...
    int window_shift = 0;              // log2 of a window's pages: also its sort's stages
    int tile_begin = 0, tile_end = 0;  // the block's tiles (counted from its first) whose pages are sorted
    int first_page = 0;                // the sequence's page (block-table column) of tile_begin's first key
    int pages = 0;                     // pages in the range
    int pieces_per_tile = 0, pieces_per_page = 0, piece_rows = 0;
    int tiles_per_window = 0;

    __device__ __forceinline__ int windows() const { return (pages + (1 << window_shift) - 1) >> window_shift; }
    __device__ __forceinline__ int stages() const { return window_shift; }
    // The tile after whose copies window w's sort runs its stage `stage` (one stage a tile, while the producer would
    // wait for a free stage of its ring anyway): tiles 1 to stages() for the first window (read at tile 0), and for
    // window w > 0 the same tiles counted from window w - 1's first (read once window w - 1 is stored). Merged, a
    // warp's windows one after the other from tile 1 (each read once the one before it is stored).
    __device__ __forceinline__ int stage_tile(int w, int stage) const {
        if (merged) return 1 + w / producers * stages() + stage;
        return (w == 0 ? 0 : tile_begin + (w - 1) * tiles_per_window) + 1 + stage;
    }
    // The windows producer warp `producer` sorts: from first_window(producer) on, every window_step()-th.
    __device__ __forceinline__ int first_window(int producer) const { return merged ? producer : 0; }
    __device__ __forceinline__ int window_step() const { return merged ? producers : 1; }
};

// keys_per_tile and piece_rows are powers of two up to 64; piece_rows divides page_size (kvc_box_rows). natural: the
// first tiles that go out in table order whatever the order (the rings' depth); the first window's sort takes more.
// producers: the block's producer warps (1 or 2), which share a merged range's sorts. In 32-bit arithmetic: the
// producers work this out between their first copies, where code of its own is fetched cold (an L2 flushed before
// the call) and every instruction counts.
__device__ __forceinline__ KvcPageOrder kvc_page_order(bool enabled, const KvcBlock& blk, int keys_per_tile,
                                                       int page_size, int piece_rows, int natural, int producers) {
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
        // Several wide windows: the range starts once every warp has sorted its share of the most a merge takes
        // (more windows than that are read one after the other, as the narrow ones are).
        o.producers = producers;
        begin = begin_after((kKvcOrderMergeWindows + producers - 1) / producers * kKvcOrderWideStages + 1);
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
// (from the sorted window in `buffers`) and its first row in that page.
struct KvcPiece {
    int block, row;
};
__device__ __forceinline__ KvcPiece kvc_ordered_piece(const KvcPageOrder& o,
                                                      const int32_t (*buffers)[kKvcOrderWidePages], int i, int lane) {
    const int piece = (i - o.tile_begin) * o.pieces_per_tile + lane;
    const int page = piece / o.pieces_per_page;
    return KvcPiece{buffers[(page >> o.window_shift) % kKvcOrderBuffers][page & ((1 << o.window_shift) - 1)],
                    piece % o.pieces_per_page * o.piece_rows};
}

// A merged range (KvcPageOrder::merged): its windows, each sorted into one of `windows`, merged as the tiles are read,
// in order. Every lane runs the same merge (the state is warp-uniform): a tile's pages come out one at a time, the
// smallest of the windows' heads, and each lane keeps its own piece's. A page that a tile begins and a later one
// goes on with (pages longer than a tile) is the last one merged.
struct KvcMerge {
    int next[kKvcOrderMergeWindows];  // each window's next entry
    int head[kKvcOrderMergeWindows];  // ... its value (INT_MAX past the window's pages, or past the windows)
    int merged;                       // the range's pages merged so far
    int last;                         // the last one's block number

    __device__ __forceinline__ void start(const KvcPageOrder& o, const int32_t (*windows)[kKvcOrderWidePages]) {
#pragma unroll
        for (int w = 0; w < kKvcOrderMergeWindows; ++w) {
            next[w] = 1;
            head[w] = w < o.windows() ? windows[w][0] : INT_MAX;
        }
        merged = 0, last = 0;
    }

    // Lane `lane`'s piece of tile i, as kvc_ordered_piece gives it for a range of one window. Tiles in order.
    __device__ __forceinline__ KvcPiece piece(const KvcPageOrder& o, const int32_t (*windows)[kKvcOrderWidePages],
                                              int i, int lane) {
        const int first_piece = (i - o.tile_begin) * o.pieces_per_tile, piece = first_piece + lane;
        const int mine = piece / o.pieces_per_page;                                // this lane's page in the range
        const int upto = (first_piece + o.pieces_per_tile - 1) / o.pieces_per_page;  // the tile's last page
        int block = last;
        while (merged <= upto) {
            int v = head[0], which = 0;
#pragma unroll
            for (int w = 1; w < kKvcOrderMergeWindows; ++w)
                if (head[w] < v) v = head[w], which = w;
            if (mine == merged) block = v;
#pragma unroll
            for (int w = 0; w < kKvcOrderMergeWindows; ++w)
                if (w == which) {
                    head[w] = next[w] < kKvcOrderWidePages ? windows[w][next[w]] : INT_MAX;
                    ++next[w];
                }
            last = v, ++merged;
        }
        return KvcPiece{block, piece % o.pieces_per_page * o.piece_rows};
    }
};

}  // namespace flashattn::kernels
