// A diagnostic for the Hopper forward: per-block timestamps of its phases, to see where a short block's time goes
// (bench/NOTES_sm90.md, v9). Compiled in only by a build with -DFLASHATTN_TIMELINE=1; in every other build each
// call below is empty and nothing is stored.
//
// Block x (x < kTimelineBlocks) of the one-block-a-tile specialised kernel writes row x of g_timeline: the SM's cycle
// counter (clock64; comparable between blocks of one SM) at each event, the SM's index, and the global nanosecond
// timer at the block's start. flashattn_debug_timeline (fwd_launch.cu, same build only) copies the rows out.
#pragma once

#include <cstdint>

namespace flashattn::kernels {

enum TimelineEvent : int {
    kTlStart,       // the producer's first instruction
    kTlQIssued,     // the producer has issued Q's copy
    kTlQArrived,    // consumer warpgroup 0 has seen Q land
    kTlFirstS,      // ... its first S product is done
    kTlLastPv,      // ... its last P V product is done
    kTlStored0,     // ... its output is written
    kTlStored1,     // consumer warpgroup 1's output is written
    kTlProducerDone,  // the producer has issued its last copy
    kTlEpilogueSynced,  // consumer warpgroup 0's warps are all past their last product (the output's first barrier)
    kTlEpilogueStaged,  // ... its output is in shared memory (the second barrier)
    kTlPlaced,      // the producer has its work tile's place (before it waits for Q's buffer and issues Q)
    kTlLseWritten,  // consumer warpgroup 0, thread 0: its LSE rows are written (before the output's first barrier)
    kTlSm,          // the SM's index
    kTlGlobalStart,  // %globaltimer at the block's start (ns)
    kTlEvents
};
constexpr int kTimelineBlocks = 16384;

// The persistent kernel (several work tiles a block): per block (blockIdx.x < kTileTimelineBlocks) and work tile of
// the block (its ordinal, < kTileTimelineTiles), g_tile_timeline holds clock64 at each event below and the global
// nanosecond timer beside the output's store (to turn a block's cycles into time). flashattn_debug_tile_timeline
// (fwd_launch.cu, same build only) copies them out.
enum TileEvent : int {
    kTtQIssued,   // the producer has issued the tile's Q copy
    kTtQArrived,  // consumer warpgroup 0 has seen it land
    kTtFirstS,    // ... its first S product is done
    kTtLastPv,    // ... its last P V product is done
    kTtStored,    // ... its output's stores are issued
    kTtEntered,   // ... it has the tile's place and starts on it (before Q's wait)
    kTtK0Landed,  // ... the tile's first K tile has landed
    kTtLastVLanded,  // ... the tile's last V tile has landed
    kTtGlobalNs,  // %globaltimer at kTtStored
    kTtEvents
};
constexpr int kTileTimelineBlocks = 1024, kTileTimelineTiles = 64;

// The kv-cache kernel (kvcache_sm90_kernel.cuh): per block (its linear index over the 3-D grid, below
// kKvcTimelineBlocks), g_kvc_timeline holds clock64 at each event below, the SM's index, and the global nanosecond
// timer at the block's start and end (to turn its cycles into time and to place blocks against each other).
// flashattn_debug_kvc_timeline (kvcache_sm90.cu, same build only) copies them out.
enum KvcEvent : int {
    kKvStart,       // thread 0 starts setting up the barriers (its first instruction but the block's geometry)
    kKvFirstIssue,  // the (K) producer warp has issued the first tile's K copies
    kKvQReady,      // the consumers have gathered Q (consumer thread 0's view from here on)
    kKvFirstK,      // ... the first K tile has landed
    kKvFirstPv,     // ... the first P V product is done
    kKvLastK,       // ... the last K tile has landed
    kKvLastV,       // ... the last V tile has landed
    kKvLastPv,      // ... the last P V product is done
    kKvStored,      // ... its output rows and LSE are written
    kKvInitDone,    // thread 0 has set up the barriers (after its fence)
    kKvSynced,      // thread 0 is past the block-wide barrier after that
    kKvSm,          // the SM's index
    kKvGlobalStart,  // %globaltimer at kKvStart (ns)
    kKvGlobalEnd,    // %globaltimer at kKvStored (ns)
    kKvUnit,         // the block's unit (blockIdx.y: batch x kv-head group) and split (blockIdx.z), to set a block
    kKvSplit,        // beside the others of its unit (its cluster's, where the splits merge in one)
    kKvEpilogue,     // consumer thread 0 starts the epilogue (its rows' sums, then the stores), after its loop
    kKvProducer,     // the (K) producer warp's lane 0 enters the producers' branch
    kKvPieces,       // ... has the first tile's piece count (the sequence's length in hand)
    kKvPageRead,     // ... has the first tile's block (its page's, read from the block table, where paged)
    kKvOrderBegin0,   // ... (pages in address order) reaches the first window's sort
    kKvOrderRead0,    // ... has that window's block numbers (read a window ahead) in hand
    kKvOrderSorted0,  // ... has sorted the window and stored it
    kKvOrderBegin1,   // the same for the second window
    kKvOrderRead1,
    kKvOrderSorted1,
    kKvMerging,        // consumer thread 0: every split of its unit has written its partial rows (its cluster's
                       // barrier passed, or this block arrived last: KvcPlan::merge_by_last)
    kKvGlobalMerging,  // %globaltimer at kKvMerging (ns)
    kKvProgress0,      // consumer thread 0: %globaltimer (ns) as K tile j lands, for nine tiles evenly spaced from the
                       // first to the last (kvc_progress): a block's rate through its stream, and the grid's together
    kKvProgress8 = kKvProgress0 + 8,
    kKvTiles,          // the block's key tiles (a count, not a time)
    kKvEvents
};
constexpr int kKvcTimelineBlocks = 8192;

#if defined(FLASHATTN_TIMELINE) && FLASHATTN_TIMELINE
__device__ unsigned long long g_timeline[kTimelineBlocks][kTlEvents];

__device__ __forceinline__ void timeline_mark(int event) {
    if (blockIdx.x >= kTimelineBlocks) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    g_timeline[blockIdx.x][event] = t;
    if (event == kTlStart) {
        unsigned sm;
        unsigned long long g;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
        g_timeline[blockIdx.x][kTlSm] = sm;
        g_timeline[blockIdx.x][kTlGlobalStart] = g;
    }
}
__device__ unsigned long long g_tile_timeline[kTileTimelineBlocks][kTileTimelineTiles][kTtEvents];

__device__ __forceinline__ void tile_mark(int tile, int event) {
    if (blockIdx.x >= kTileTimelineBlocks || tile >= kTileTimelineTiles) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    g_tile_timeline[blockIdx.x][tile][event] = t;
    if (event == kTtStored) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        g_tile_timeline[blockIdx.x][tile][kTtGlobalNs] = t;
    }
}
__device__ unsigned long long g_kvc_timeline[kKvcTimelineBlocks][kKvEvents];

// The value in hand before the next mark: a comparison that reads it and a trap on an impossible value, so the mark
// (after it in program order, both volatile) times the value's arrival (a load's, for example) and not only its
// issue. An empty asm with the value as an input emits no instruction, and nothing then waits for a load.
__device__ __forceinline__ void kvc_hold(int value) {
    asm volatile(
        "{\n .reg .pred never;\n setp.eq.s32 never, %0, -2147483648;\n @never trap;\n}\n" ::"r"(value)
        : "memory");
}

__device__ __forceinline__ void kvc_mark(int event) {
    const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (block >= kKvcTimelineBlocks) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    g_kvc_timeline[block][event] = t;
    if (event == kKvStart || event == kKvStored || event == kKvMerging) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        const int slot = event == kKvStart ? kKvGlobalStart : event == kKvStored ? kKvGlobalEnd : kKvGlobalMerging;
        g_kvc_timeline[block][slot] = t;
    }
    if (event == kKvStart) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        g_kvc_timeline[block][kKvSm] = sm;
        g_kvc_timeline[block][kKvUnit] = blockIdx.y;
        g_kvc_timeline[block][kKvSplit] = blockIdx.z;
        // Events a launch may not mark (the page order's): an earlier launch's left in this row would read as this
        // one's.
        for (int e = kKvOrderBegin0; e <= kKvOrderSorted1; ++e) g_kvc_timeline[block][e] = 0;
        g_kvc_timeline[block][kKvMerging] = g_kvc_timeline[block][kKvGlobalMerging] = 0;  // unsplit blocks have none
        for (int e = kKvProgress0; e <= kKvTiles; ++e) g_kvc_timeline[block][e] = 0;  // a block of no tiles
    }
}

// K tile j of a block's `tiles` has landed: where j is the k-th of nine evenly spaced tiles (k (tiles - 1) / 8, k = 0
// ... 8), %globaltimer into kKvProgress0 + k; and the count into kKvTiles.
__device__ __forceinline__ void kvc_progress(int j, int tiles) {
    const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (block >= kKvcTimelineBlocks) return;
    if (j == 0) g_kvc_timeline[block][kKvTiles] = tiles;
    constexpr int kMarks = kKvProgress8 - kKvProgress0 + 1;
    unsigned long long t = 0;
    for (int k = 0; k < kMarks; ++k) {
        if (j != k * (tiles - 1) / (kMarks - 1)) continue;
        if (t == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        g_kvc_timeline[block][kKvProgress0 + k] = t;
    }
}
#else
__device__ __forceinline__ void timeline_mark(int) {}
__device__ __forceinline__ void tile_mark(int, int) {}
__device__ __forceinline__ void kvc_hold(int) {}
__device__ __forceinline__ void kvc_mark(int) {}
__device__ __forceinline__ void kvc_progress(int, int) {}
#endif

}  // namespace flashattn::kernels
