// A paged cache's pages read in address order (KvcPlan::pages_in_address_order): the Hopper kv-cache kernel's
// producers take the pages of a block's middle tiles not in the block table's order but sorted by their block
// number, a window of kKvcOrderPages pages at a time.
//
// Why: a paged allocator scatters a sequence's pages over the pool, and read in table order each block's copies land
// anywhere in it at any moment. Sorted, every block sweeps the pool from its low addresses to its high ones, all at
// about the same pace, so the whole grid's copies in flight lie in a narrow band of the pool: few address
// translations and DRAM pages at a time. Measured with the block tables themselves sorted (bench_decode.py
// --page-order sorted), random 16-row pages read as fast as the dense cache at batch 16 x 8 kv heads x 4k keys (103.0
// against 103.3 us; 106.7 in table order) and 1.0-3.9% faster than in table order on every call of 64+ tiles a
// block. As built here, though, each window's table read and sort cost the call 5-6 us (the sort alone, on tables
// already sorted: 109.5 against 103.6 us at 16 x 8 x 4k), more than the order gains, so the plan leaves it off
// unless FLASHATTN_KVC_PAGE_ORDER asks (bench/NOTES.md, "kv-cache: pages in address order").
//
// Which tiles: attention does not depend on the order its keys come in, only on which keys a row sees and, with
// ALiBi, on their positions (the host leaves the order off then). So the tiles every row of the block sees whole
// (no mask, no tail: the consumers use their positions on no other tile) may hold any of those tiles' pages. Their
// range is cut to whole pages and whole tiles, and starts after the block's first `natural` tiles (the rings'
// depth), which go out in table order as before: the first window is sorted once they have gone out, while the
// producer would wait for a free stage anyway, and window w + 1 once window w's first tile has gone out (two
// buffers). The consumers are not told: a tile of this range is used as it always was.
#pragma once

#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/sm80/kvcache_common.cuh"

namespace flashattn::kernels {

constexpr int kKvcOrderPerLane = 8;                        // a window's pages a lane holds while sorting
constexpr int kKvcOrderPages = 32 * kKvcOrderPerLane;     // pages sorted at once
constexpr int kKvcOrderBuffers = 2;                        // window w in buffer w % 2: the next sorted while in use

// The range of a block's tiles read in address order, and how its pieces map to its pages.
struct KvcPageOrder {
    bool active = false;
    int tile_begin = 0, tile_end = 0;  // the block's tiles (counted from its first) whose pages are sorted
    int first_page = 0;                // the sequence's page (block-table column) of tile_begin's first key
    int pages = 0;                     // pages in the range
    int pieces_per_tile = 0, pieces_per_page = 0, piece_rows = 0;
    int tiles_per_window = 0;

    __device__ __forceinline__ int windows() const { return (pages + kKvcOrderPages - 1) / kKvcOrderPages; }
    // The tile after which window w is sorted: the last table-order tile before the first window, else the first
    // tile of window w - 1.
    __device__ __forceinline__ int sort_after(int w) const {
        return w == 0 ? tile_begin - 1 : tile_begin + (w - 1) * tiles_per_window;
    }
};

// keys_per_tile and piece_rows are powers of two up to 64; piece_rows divides page_size (kvc_box_rows).
__device__ __forceinline__ KvcPageOrder kvc_page_order(bool enabled, const KvcBlock& blk, int keys_per_tile,
                                                       int page_size, int piece_rows, int natural) {
    KvcPageOrder o;
    if (!enabled || blk.seq.leftpad != 0) return o;  // positions are keys from 0: pages start at whole keys
    const int64_t kpt = keys_per_tile;
    // Keys every row of the block sees (no tile here is masked), of whole tiles past the first `natural`.
    const int64_t lo = max(int64_t(blk.tiles.begin + natural) * kpt, blk.last.begin);
    const int64_t hi = min(min(int64_t(blk.tiles.end) * kpt, blk.first.end), int64_t(blk.seq.seqlen_k));
    // Whole pages and whole tiles: multiples of lcm(page_size, kpt) (kpt a power of two, so page_size times its
    // share of kpt that page_size's factors of two leave).
    const int64_t twos = page_size & -page_size;
    const int64_t align = page_size * (kpt > twos ? kpt / twos : 1);
    const int64_t begin = (lo + align - 1) / align * align, end = hi / align * align;
    if (end <= begin) return o;
    o.tile_begin = int(begin / kpt) - blk.tiles.begin;
    o.tile_end = int(end / kpt) - blk.tiles.begin;
    o.first_page = int(begin / page_size);
    o.pages = int((end - begin) / page_size);
    o.piece_rows = piece_rows;
    o.pieces_per_tile = keys_per_tile / piece_rows;
    o.pieces_per_page = page_size / piece_rows;
    o.tiles_per_window = int(int64_t(kKvcOrderPages) * page_size / kpt);
    o.active = true;
    return o;
}

// One warp sorts r (lane l's element j is element j * 32 + l of the window) ascending: a bitonic network, the
// distances of 32 and more between a lane's own registers, the shorter ones across lanes by shuffles.
template <int kPerLane>
__device__ __forceinline__ void warp_sort_ascending(int (&r)[kPerLane], int lane) {
    static_assert((kPerLane & (kPerLane - 1)) == 0 && kPerLane <= 8, "a power of two up to 8 a lane");
    constexpr int kCount = 32 * kPerLane;
    auto between_registers = [&](auto distance_tag, int k) {
        constexpr int dj = decltype(distance_tag)::value;  // registers apart
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            if (j & dj) continue;
            const bool ascending = ((j * 32 + lane) & k) == 0;
            const int lo = min(r[j], r[j | dj]), hi = max(r[j], r[j | dj]);
            r[j] = ascending ? lo : hi;
            r[j | dj] = ascending ? hi : lo;
        }
    };
#pragma unroll 1
    for (int k = 2; k <= kCount; k <<= 1) {
        for (int d = k >> 1; d >= 32; d >>= 1) {
            if constexpr (kPerLane >= 8)
                if (d == 128) between_registers(std::integral_constant<int, 4>{}, k);
            if constexpr (kPerLane >= 4)
                if (d == 64) between_registers(std::integral_constant<int, 2>{}, k);
            if constexpr (kPerLane >= 2)
                if (d == 32) between_registers(std::integral_constant<int, 1>{}, k);
        }
#pragma unroll 1
        for (int d = min(k >> 1, 16); d >= 1; d >>= 1) {
            const bool lower = (lane & d) == 0;
            // Every shuffle issued before any result is used: each waits only for its own round trip.
            int other[kPerLane];
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) other[j] = __shfl_xor_sync(0xffffffffu, r[j], d);
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) {
                const bool ascending = ((j * 32 + lane) & k) == 0;
                r[j] = (lower == ascending) ? min(r[j], other[j]) : max(r[j], other[j]);
            }
        }
    }
}

// Window w of the order: its pages' block numbers from the table row, sorted, into `buffer` (kKvcOrderPages
// entries; past the range's pages INT_MAX, never read). Every lane of the producer warp takes part.
__device__ __forceinline__ void kvc_sort_window(const KvcPageOrder& o, const int32_t* table_row, int w,
                                                int32_t* buffer, int lane) {
    const int first = w * kKvcOrderPages, count = min(kKvcOrderPages, o.pages - first);
    __syncwarp();  // every lane's reads of the window this buffer held are done
    int r[kKvcOrderPerLane];
#pragma unroll
    for (int j = 0; j < kKvcOrderPerLane; ++j) {
        const int at = j * 32 + lane;
        r[j] = at < count ? table_row[o.first_page + first + at] : INT_MAX;
    }
    warp_sort_ascending(r, lane);
#pragma unroll
    for (int j = 0; j < kKvcOrderPerLane; ++j) buffer[j * 32 + lane] = r[j];
    __syncwarp();
}

// Lane `lane`'s piece of tile i (counted from the block's first; o.tile_begin <= i < o.tile_end): its block number
// (from the sorted window in `buffers`) and its first row in that page.
struct KvcPiece {
    int block, row;
};
__device__ __forceinline__ KvcPiece kvc_ordered_piece(const KvcPageOrder& o, const int32_t (*buffers)[kKvcOrderPages],
                                                      int i, int lane) {
    const int piece = (i - o.tile_begin) * o.pieces_per_tile + lane;
    const int page = piece / o.pieces_per_page;
    return KvcPiece{buffers[(page / kKvcOrderPages) % kKvcOrderBuffers][page % kKvcOrderPages],
                    piece % o.pieces_per_page * o.piece_rows};
}

}  // namespace flashattn::kernels
