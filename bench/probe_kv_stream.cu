// Probe: how fast the copy engine streams a decode KV cache with different box shapes and layouts, no compute.
//
// Question it answers: is the kv-cache kernel's remaining gap to cuDNN on (batch, seq, head, dim) caches the memory
// system's response to the access pattern (per-head boxes of 64 rows, 256 bytes a row and nheads_k * 256 bytes
// apart), and would boxes that take several heads of the same rows at once (a contiguous run of the cache) stream
// faster? Every mode reads the same bytes (K and V of batch x seqlen x nheads_k x 128, bf16) with the same copies in
// flight (two stages of 16 KB K + 16 KB V a block, two blocks an SM, like the kernel), one thread a block issuing them;
// the data is never read back.
//
//   mode 0  per head, (batch, seq, head, dim): boxes of 64 rows x 1 head (the kernel's dense tiles)
//   mode 1  (batch, seq, head, dim): boxes of 16 rows x 4 heads
//   mode 2  (batch, seq, head, dim): boxes of 8 rows x 8 heads (all heads of 8 rows: one contiguous 16 KB run)
//   mode 3  per head, (batch, head, seq, dim) (the layout cuDNN's timings use): boxes of 64 rows
//   mode 4  paged, page 16, pages in random order: per head, four 16-row pieces a tile (the kernel's paged tiles)
//   mode 5  paged, page 16, random order: boxes of 16 rows x 4 heads (half a page's heads, one piece a tile)
//   mode 6  per head, (batch, seq, head, dim), no copy engine: 128 threads issue 16-byte cp.async copies (the load
//           path of cuDNN's Ampere-style decode kernel), the same 64-row tiles and two stages in flight
//   mode 7  paged, page 16, random order: cp.async by 128 threads, each 16-byte chunk at its row's page
//   mode 8  as mode 6 with 32 threads (one warp: what a producer warp of the kernel could issue)
//   mode 9  as mode 6 with 64 threads
//   mode 10 as mode 7 with 64 threads (the kernel's two producer warps on paged caches)
//   mode 12 as mode 4, the blocks launched in clusters of 4 (the kv heads of a sequence 4 at a time in one GPC, which
//           read the same pages, so that they share the GPC's address translations)
//   mode 13 as mode 12 with clusters of 8 (all 8 kv heads of a sequence at nheads_k 8)
//   mode 14 as mode 12, one block an SM (shared memory for one), all 32 threads kept to the end
//   mode 15 as mode 14, the cluster's blocks in step: a block issues tile i once every block of its cluster has issued
//           tile i - 1 (each arrives on every block's pace barrier after its issue), so that the kv heads of a
//           sequence read each page at about the same time, as one block reading 4 kv heads a box does (mode 5)
//   mode 16 as mode 15 on the dense cache (mode 0's boxes)
//   mode 17 as mode 5, K's copies issued by one warp and V's by another (the kv-cache kernel's two producers)
//   mode 18 as mode 5, four consumer warps giving each stage back before it is copied again (the kernel's hand-off)
//   mode 19 as mode 5, both; mode 20 as mode 4, both; mode 21 as mode 19, the blocks in the kernel's order (the
//           split slowest)
//   mode 22-24 as mode 4 (per head, paged 16), the blocks of a sequence's kv heads paced through global memory: a
//           block issues tile i once every sibling (same sequence and slice) has issued tile i - slack (slack 1, 2, 4),
//           each block's count of issued tiles a word its warp's lanes read for all siblings at once; no cluster, so
//           any grid (the wait gives up after kPaceMaxPolls polls: pacing is a hint, never a deadlock)
//   mode 25-26 as mode 0 (per head, dense), paced so with slack 1 and 2
//   mode 11 as mode 4, with one L2 prefetch of each K and V piece's first row kWarmAhead tiles before its copy (the
//           row is read by the copy anyway: no extra bytes, but the page's address translation is made early)
//
// The fourth argument orders the pages of the paged modes: 0 a random permutation of the whole pool (default, as
// bench_decode.py), 1 the pool in order (the dense cache's addresses), 2 random within each 2 MB of the pool (the
// pages a sequence reads are as scattered at the DRAM's scale, but every 2 MB translation is used for a run of
// kTranslationBytes / page bytes consecutive pages). 1 against 0 is what random placement costs; 2 against 0 is how
// much of that is the address translation's reach.
//
// Build and run (on an H100):  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude \
//     bench/probe_kv_stream.cu -o /tmp/probe && /tmp/probe [batch] [seqlen] [nheads_k] [page order] [splits]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/common/ptx.cuh"
#include "kernels/common/ptx_sm90.cuh"

namespace {

namespace ptx = flashattn::ptx;

constexpr int kHeadDim = 128, kBoxCols = 64, kHalves = kHeadDim / kBoxCols;
constexpr int kTileRowsTimesHeads = 64;  // a K tile: 64 (row, head) pairs x 256 bytes = 16 KB, and the same of V
constexpr int kTileBytes = kTileRowsTimesHeads * kHeadDim * 2;
constexpr int kStages = 2;
constexpr int kPage = 16;
constexpr int kRepeats = 10;
constexpr size_t kFlushBytes = size_t(256) << 20;
constexpr int kOneBlockSmem = 200 * 1024;  // modes 14-16: more than half an SM's shared memory, so one block an SM
constexpr size_t kTranslationBytes = size_t(2) << 20;  // the large pages the driver maps device allocations with
constexpr int kWarmAhead = 2;                           // mode 11: tiles between a piece's prefetch and its copy

struct Mode {
    const char* name;
    int rows, heads;  // of a box
    bool head_major;  // (batch, head, seq, dim)
    bool paged;
    int copy_threads;  // cp.async by this many threads instead of the copy engine (0: the copy engine)
    bool warm = false;  // mode 11: prefetch each piece's first row kWarmAhead tiles ahead
    int cluster = 1;    // modes 12-16: blocks a cluster (consecutive blocks: kv heads of one sequence)
    bool one_per_sm = false, in_step = false;  // modes 14-16
    int handoff = 0;  // modes 17-20: kHandoffTwoProducers | kHandoffConsumers (stream_handoff_kernel)
    int slack = 0;    // modes 22-26: the kv heads of a sequence paced through global memory (stream_paced_kernel)
};
constexpr int kHandoffTwoProducers = 1, kHandoffConsumers = 2, kHandoffKernelOrder = 4;
constexpr int kMaxCopyThreads = 128;
constexpr Mode kModes[] = {
    {"per head, 64 rows x 1 head", 64, 1, false, false, 0},
    {"16 rows x 4 heads", 16, 4, false, false, 0},
    {"8 rows x 8 heads", 8, 8, false, false, 0},
    {"(b, h, s, d) layout, 64 rows", 64, 1, true, false, 0},
    {"paged 16, per head, 4 pieces", 16, 1, false, true, 0},
    {"paged 16, 16 rows x 4 heads", 16, 4, false, true, 0},
    {"per head, cp.async by 128 threads", 64, 1, false, false, 128},
    {"paged 16, cp.async by 128 threads", 64, 1, false, true, 128},
    {"per head, cp.async by 32 threads", 64, 1, false, false, 32},
    {"per head, cp.async by 64 threads", 64, 1, false, false, 64},
    {"paged 16, cp.async by 64 threads", 64, 1, false, true, 64},
    {"paged 16, per head, warmed ahead", 16, 1, false, true, 0, true},
    {"paged 16, per head, clusters of 4", 16, 1, false, true, 0, false, 4},
    {"paged 16, per head, clusters of 8", 16, 1, false, true, 0, false, 8},
    {"paged 16, clusters of 4, 1 an SM", 16, 1, false, true, 0, false, 4, true, false},
    {"paged 16, clusters of 4, in step", 16, 1, false, true, 0, false, 4, true, true},
    {"dense, clusters of 4, in step", 64, 1, false, false, 0, false, 4, true, true},
    {"as 5, two producer warps", 16, 4, false, true, 0, false, 1, false, false, kHandoffTwoProducers},
    {"as 5, consumers give stages back", 16, 4, false, true, 0, false, 1, false, false, kHandoffConsumers},
    {"as 5, both", 16, 4, false, true, 0, false, 1, false, false, kHandoffTwoProducers | kHandoffConsumers},
    {"as 4, both", 16, 1, false, true, 0, false, 1, false, false, kHandoffTwoProducers | kHandoffConsumers},
    {"as 19, the kernel's block order", 16, 4, false, true, 0, false, 1, false, false,
     kHandoffTwoProducers | kHandoffConsumers | kHandoffKernelOrder},
    {"as 4, kv heads paced, slack 1", 16, 1, false, true, 0, false, 1, false, false, 0, 1},
    {"as 4, kv heads paced, slack 2", 16, 1, false, true, 0, false, 1, false, false, 0, 2},
    {"as 4, kv heads paced, slack 4", 16, 1, false, true, 0, false, 1, false, false, 0, 4},
    {"as 0, kv heads paced, slack 1", 64, 1, false, false, 0, false, 1, false, false, 0, 1},
    {"as 0, kv heads paced, slack 2", 64, 1, false, false, 0, false, 1, false, false, 0, 2},
};
constexpr int kPaceMaxPolls = 4096;

struct Work {
    int batch, seqlen, nheads, rows, heads;
    bool paged, warm;
    const int* table;  // paged: (batch, seqlen / kPage) blocks
    const unsigned char *k, *v;  // the pools, for mode 11's prefetches
    uint32_t* progress = nullptr;  // modes 22-26: a word a block, its tiles issued plus `epoch` (this launch's base)
    uint32_t epoch = 0;
    int slack = 0;
};

__device__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// A block of stream_kernel's grid: the (row, head) pairs of one head group and one slice of sequence b's rows, in
// tiles of kTileRowsTimesHeads pairs. Blocks in order: sequence, then slice, then head group; or with kernel_order
// the kv-cache kernel's (its grid's z, the split, slowest: consecutive blocks are consecutive (sequence, head group)
// units of one slice).
struct BlockWork {
    int b, group;
    int first_row;  // the slice's
    int tile_rows, tiles, boxes;  // sequence rows a tile, tiles a block, boxes along the sequence a tile
};
__device__ BlockWork block_work(const Work& w, bool kernel_order = false) {
    const int groups = w.nheads / w.heads;
    const int units_per_seq = gridDim.x / w.batch;  // head groups x sequence slices
    int b = blockIdx.x / units_per_seq, u = blockIdx.x % units_per_seq;
    if (kernel_order) {
        const int unit = blockIdx.x % (w.batch * groups), split = blockIdx.x / (w.batch * groups);
        b = unit / groups, u = split * groups + unit % groups;
    }
    const int slice_rows = w.seqlen / (units_per_seq / groups);
    const int tile_rows = kTileRowsTimesHeads / w.heads;
    return BlockWork{b, u % groups, u / groups * slice_rows, tile_rows, slice_rows / tile_rows, tile_rows / w.rows};
}

// Tile i's copies: K's into k completing on k_full, V's into v on v_full, box by box, K's and V's of a box in turn;
// a null destination leaves its tensor out.
__device__ void issue_tile(const CUtensorMap* map_k, const CUtensorMap* map_v, unsigned char* k, uint64_t* k_full,
                           unsigned char* v, uint64_t* v_full, const Work& w, const BlockWork& bw, int i) {
    const int box_bytes = w.rows * w.heads * kBoxCols * 2;
    for (int bx = 0; bx < bw.boxes; ++bx) {
        const int row = bw.first_row + i * bw.tile_rows + bx * w.rows;
        int y = row, entry = bw.b;
        if (w.paged) y = row % kPage, entry = w.table[bw.b * (w.seqlen / kPage) + row / kPage];
        for (int h = 0; h < kHalves; ++h) {
            if (k) ptx::tma_load_4d(k + (h * bw.boxes + bx) * box_bytes, map_k, k_full, h * kBoxCols, y,
                                    bw.group * w.heads, entry);
            if (v) ptx::tma_load_4d(v + (h * bw.boxes + bx) * box_bytes, map_v, v_full, h * kBoxCols, y,
                                    bw.group * w.heads, entry);
        }
    }
}

struct alignas(1024) Smem {
    unsigned char k[kStages][kTileBytes];
    unsigned char v[kStages][kTileBytes];
    uint64_t full[kStages];
    uint64_t pace[kStages];  // modes 15-16: tile i issued by every block of the cluster (count: the cluster's blocks)
};

// A block: the (row, head) pairs of one head group and one slice of the sequence, tile after tile.
__global__ void __launch_bounds__(32) stream_kernel(const __grid_constant__ CUtensorMap map_k,
                                                    const __grid_constant__ CUtensorMap map_v, Work w) {
    extern __shared__ unsigned char raw[];
    auto& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(raw) + 1023) / 1024 * 1024);
    if (threadIdx.x != 0) return;
    const BlockWork bw = block_work(w);
    for (int st = 0; st < kStages; ++st) ptx::mbarrier_init(&s.full[st], 1);
    ptx::fence_mbarrier_init();
    for (int i = 0; i < bw.tiles; ++i) {
        const int st = i % kStages;
        if (i >= kStages) ptx::mbarrier_wait(&s.full[st], (i / kStages - 1) % 2);
        ptx::mbarrier_arrive_expect_tx(&s.full[st], 2 * kTileBytes);
        if (w.warm && i + kWarmAhead < bw.tiles) {
            const size_t row_bytes = size_t(w.nheads) * kHeadDim * 2;
            for (int bx = 0; bx < bw.boxes; ++bx) {
                const int row = bw.first_row + (i + kWarmAhead) * bw.tile_rows + bx * w.rows;
                const size_t off = size_t(w.table[bw.b * (w.seqlen / kPage) + row / kPage]) * kPage * row_bytes +
                                   size_t(bw.group) * w.heads * kHeadDim * 2;
                prefetch_l2(w.k + off);
                prefetch_l2(w.v + off);
            }
        }
        issue_tile(&map_k, &map_v, s.k[st], &s.full[st], s.v[st], &s.full[st], w, bw, i);
    }
    for (int i = max(0, bw.tiles - kStages); i < bw.tiles; ++i)
        ptx::mbarrier_wait(&s.full[i % kStages], (i / kStages) % 2);
}

// Modes 22-26: stream_kernel's copies, the warp's lane 0 issuing, its lanes reading the siblings' counts (a sequence's
// slice's head groups: consecutive blocks in block_work's order) before each tile past the first `slack`.
__global__ void __launch_bounds__(32) stream_paced_kernel(const __grid_constant__ CUtensorMap map_k,
                                                          const __grid_constant__ CUtensorMap map_v, Work w) {
    extern __shared__ unsigned char raw[];
    auto& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(raw) + 1023) / 1024 * 1024);
    const int lane = threadIdx.x;
    const BlockWork bw = block_work(w);
    const int groups = w.nheads / w.heads;
    uint32_t* siblings = w.progress + (blockIdx.x - bw.group);  // the slice's head groups' words, in group order
    if (lane == 0) {
        for (int st = 0; st < kStages; ++st) ptx::mbarrier_init(&s.full[st], 1);
        ptx::fence_mbarrier_init();
    }
    __syncwarp();
    for (int i = 0; i < bw.tiles; ++i) {
        const int st = i % kStages;
        if (i >= w.slack) {
            const uint32_t need = w.epoch + uint32_t(i - w.slack + 1);  // tile i - slack issued by every sibling
            for (int poll = 0; poll < kPaceMaxPolls; ++poll) {
                const bool ready = lane >= groups || ptx::ld_relaxed_gpu_u32(siblings + lane) >= need;
                if (__all_sync(0xffffffffu, ready)) break;
            }
        }
        if (lane == 0) {
            if (i >= kStages) ptx::mbarrier_wait(&s.full[st], (i / kStages - 1) % 2);
            ptx::mbarrier_arrive_expect_tx(&s.full[st], 2 * kTileBytes);
            issue_tile(&map_k, &map_v, s.k[st], &s.full[st], s.v[st], &s.full[st], w, bw, i);
            ptx::st_relaxed_gpu_u32(siblings + bw.group, w.epoch + uint32_t(i + 1));
        }
        __syncwarp();
    }
    if (lane == 0)
        for (int i = max(0, bw.tiles - kStages); i < bw.tiles; ++i)
            ptx::mbarrier_wait(&s.full[i % kStages], (i / kStages) % 2);
}

// Modes 14-16: stream_kernel's copies (one kv head a block, 16-row pieces where paged) by thread 0 of a block in a
// cluster whose 32 threads all stay to the end (the cluster barriers count them); with `in_step`, tile i goes out
// once every block of the cluster has issued tile i - 1.
__global__ void __launch_bounds__(32) stream_in_step_kernel(const __grid_constant__ CUtensorMap map_k,
                                                            const __grid_constant__ CUtensorMap map_v, Work w,
                                                            bool in_step) {
    extern __shared__ unsigned char raw[];
    auto& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(raw) + 1023) / 1024 * 1024);
    unsigned blocks_in_cluster;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(blocks_in_cluster));
    if (threadIdx.x == 0) {
        for (int st = 0; st < kStages; ++st) {
            ptx::mbarrier_init(&s.full[st], 1);
            ptx::mbarrier_init(&s.pace[st], blocks_in_cluster);
        }
        ptx::fence_mbarrier_init();
    }
    ptx::cluster_sync();  // every block's pace barriers set up before any arrival
    if (threadIdx.x == 0) {
        const int b = blockIdx.x / w.nheads, h = blockIdx.x % w.nheads;
        const int tiles = w.seqlen / kTileRowsTimesHeads, boxes = kTileRowsTimesHeads / w.rows;
        const int box_bytes = w.rows * kBoxCols * 2;
        for (int i = 0; i < tiles; ++i) {
            const int st = i % kStages;
            if (i >= kStages) ptx::mbarrier_wait(&s.full[st], (i / kStages - 1) % 2);
            if (in_step && i >= 1) ptx::mbarrier_wait(&s.pace[(i - 1) % kStages], ((i - 1) / kStages) % 2);
            ptx::mbarrier_arrive_expect_tx(&s.full[st], 2 * kTileBytes);
            for (int bx = 0; bx < boxes; ++bx) {
                const int row = i * kTileRowsTimesHeads + bx * w.rows;
                int y = row, entry = b;
                if (w.paged) y = row % kPage, entry = w.table[b * (w.seqlen / kPage) + row / kPage];
                for (int half = 0; half < kHalves; ++half) {
                    unsigned char* dk = s.k[st] + (half * boxes + bx) * box_bytes;
                    unsigned char* dv = s.v[st] + (half * boxes + bx) * box_bytes;
                    ptx::tma_load_4d(dk, &map_k, &s.full[st], half * kBoxCols, y, h, entry);
                    ptx::tma_load_4d(dv, &map_v, &s.full[st], half * kBoxCols, y, h, entry);
                }
            }
            if (in_step)
                for (unsigned r = 0; r < blocks_in_cluster; ++r)
                    ptx::mbarrier_arrive_cluster(ptx::cluster_smem_addr(ptx::smem_addr(&s.pace[st]), r));
        }
        for (int i = max(0, tiles - kStages); i < tiles; ++i)
            ptx::mbarrier_wait(&s.full[i % kStages], (i / kStages) % 2);
    }
    __syncwarp();
    ptx::cluster_sync();  // no block leaves while another may still arrive on its pace barriers
}

// Modes 17-20: stream_kernel's copies issued the way the kv-cache kernel issues them, to see which part of its
// protocol costs the stream: with kHandoffTwoProducers K's copies by warp 0 and V's by warp 1 (lane 0 of each), each
// tensor on its own barriers, else both by thread 0; with kHandoffConsumers four more warps wait for each stage to land
// and give it back (one arrival a warp), and a stage is copied again only once given back, else once it has landed.
constexpr int kConsumerWarps = 4, kHandoffThreads = 32 * (2 + kConsumerWarps);
struct alignas(1024) HandoffSmem {
    unsigned char k[kStages][kTileBytes];
    unsigned char v[kStages][kTileBytes];
    uint64_t k_full[kStages], v_full[kStages], k_empty[kStages], v_empty[kStages];
};

__global__ void __launch_bounds__(kHandoffThreads) stream_handoff_kernel(const __grid_constant__ CUtensorMap map_k,
                                                                         const __grid_constant__ CUtensorMap map_v,
                                                                         Work w, int handoff) {
    extern __shared__ unsigned char raw[];
    auto& s = *reinterpret_cast<HandoffSmem*>((reinterpret_cast<uintptr_t>(raw) + 1023) / 1024 * 1024);
    const bool two_producers = handoff & kHandoffTwoProducers, consumers = handoff & kHandoffConsumers;
    if (threadIdx.x == 0) {
        for (int st = 0; st < kStages; ++st) {
            ptx::mbarrier_init(&s.k_full[st], 1);
            ptx::mbarrier_init(&s.v_full[st], 1);
            ptx::mbarrier_init(&s.k_empty[st], kConsumerWarps);
            ptx::mbarrier_init(&s.v_empty[st], kConsumerWarps);
        }
        ptx::fence_mbarrier_init();
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const BlockWork bw = block_work(w, handoff & kHandoffKernelOrder);
    const int tiles = bw.tiles;
    if (warp >= 2) {  // consumers
        if (!consumers) return;
        for (int i = 0; i < tiles; ++i) {
            const int st = i % kStages, phase = (i / kStages) % 2;
            ptx::mbarrier_wait(&s.k_full[st], phase);
            if (lane == 0) ptx::mbarrier_arrive(&s.k_empty[st]);
            ptx::mbarrier_wait(&s.v_full[st], phase);
            if (lane == 0) ptx::mbarrier_arrive(&s.v_empty[st]);
        }
        return;
    }
    const bool issue_k = warp == 0, issue_v = two_producers ? warp == 1 : warp == 0;
    if (lane != 0 || !(issue_k || issue_v)) return;
    for (int i = 0; i < tiles; ++i) {
        const int st = i % kStages;
        if (i >= kStages) {
            const int used = i - kStages, phase = (used / kStages) % 2;
            if (issue_k) ptx::mbarrier_wait(consumers ? &s.k_empty[st] : &s.k_full[st], phase);
            if (issue_v) ptx::mbarrier_wait(consumers ? &s.v_empty[st] : &s.v_full[st], phase);
        }
        if (issue_k) ptx::mbarrier_arrive_expect_tx(&s.k_full[st], kTileBytes);
        if (issue_v) ptx::mbarrier_arrive_expect_tx(&s.v_full[st], kTileBytes);
        issue_tile(&map_k, &map_v, issue_k ? s.k[st] : nullptr, &s.k_full[st], issue_v ? s.v[st] : nullptr,
                   &s.v_full[st], w, bw, i);
    }
    if (consumers) return;  // the consumer warps wait for every tile
    for (int i = max(0, tiles - kStages); i < tiles; ++i) {
        if (issue_k) ptx::mbarrier_wait(&s.k_full[i % kStages], (i / kStages) % 2);
        if (issue_v) ptx::mbarrier_wait(&s.v_full[i % kStages], (i / kStages) % 2);
    }
}

// Modes 6-10: block (b, h) of the (batch, seq, head, dim) cache or of the page pool, 64-row tiles of K and V, each
// of the block's threads copying 16-byte chunks with cp.async, two tiles in flight (a thread waits for its own copies
// of the older tile before reusing its stage).
__global__ void __launch_bounds__(kMaxCopyThreads) stream_threads_kernel(const unsigned char* k,
                                                                         const unsigned char* v, Work w) {
    extern __shared__ unsigned char raw[];
    auto& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(raw) + 1023) / 1024 * 1024);
    const int slices = gridDim.x / (w.batch * w.nheads);  // the sequence's slices (the fifth argument)
    const int unit = blockIdx.x / slices, slice = blockIdx.x % slices;
    const int b = unit / w.nheads, h = unit % w.nheads;
    constexpr int kRowBytes = kHeadDim * 2, kChunksPerRow = kRowBytes / 16;
    constexpr int kChunks = kTileRowsTimesHeads * kChunksPerRow;
    const int tiles = w.seqlen / kTileRowsTimesHeads / slices, first_tile = slice * tiles;
    const size_t row_stride = size_t(w.nheads) * kRowBytes;
    const size_t base = (size_t(b) * w.seqlen * w.nheads + h) * kRowBytes;
    const size_t page_stride = kPage * row_stride;
    for (int i = 0; i < tiles; ++i) {
        const int st = i % kStages;
        for (int c = threadIdx.x; c < kChunks; c += blockDim.x) {
            const int row = c / kChunksPerRow, col = c % kChunksPerRow;
            const int pos = (first_tile + i) * kTileRowsTimesHeads + row;
            const size_t off =
                w.paged ? size_t(w.table[b * (w.seqlen / kPage) + pos / kPage]) * page_stride +
                              size_t(pos % kPage) * row_stride + size_t(h) * kRowBytes + col * 16
                        : base + size_t(pos) * row_stride + col * 16;
            ptx::cp_async_16(ptx::smem_addr(s.k[st] + c * 16), k + off, true);
            ptx::cp_async_16(ptx::smem_addr(s.v[st] + c * 16), v + off, true);
        }
        ptx::cp_async_commit();
        ptx::cp_async_wait<kStages - 1>();
    }
    ptx::cp_async_wait<0>();
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// dims innermost first: (dim, rows, heads, entries); strides in elements (row, head, entry).
CUtensorMap make_map(void* base, const uint64_t (&dims)[4], const uint64_t (&strides)[3], int box_rows, int box_heads) {
    static EncodeTiled encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult q{};
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
        return reinterpret_cast<EncodeTiled>(fn);
    }();
    const cuuint64_t d[4] = {dims[0], dims[1], dims[2], dims[3]};
    const cuuint64_t st[3] = {strides[0] * 2, strides[1] * 2, strides[2] * 2};
    const cuuint32_t box[4] = {kBoxCols, cuuint32_t(box_rows), cuuint32_t(box_heads), 1};
    const cuuint32_t es[4] = {1, 1, 1, 1};
    CUtensorMap m{};
    const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, base, d, st, box, es,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) std::printf("encode failed: %d\n", int(r));
    return m;
}

// Modes 12-13: the copy-engine stream in clusters of `cluster` consecutive blocks (x), and once, how many such
// clusters the GPU holds at once (fewer than the grid's would make a second wave).
// Modes 14-16 (`in_step_mode` given): stream_in_step_kernel instead, with shared memory for one block an SM.
void cluster_launch(dim3 grid, int smem, int cluster, const CUtensorMap& mk, const CUtensorMap& mv, const Work& w,
                    const Mode* in_step_mode = nullptr) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid, config.blockDim = dim3(32), config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = cluster, attribute[0].val.clusterDim.y = 1, attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute, config.numAttrs = 1;
    static int reported = 0;
    const int report = cluster + (in_step_mode ? 100 : 0);
    if (reported != report) {
        int clusters = 0;
        if (in_step_mode)
            cudaOccupancyMaxActiveClusters(&clusters, stream_in_step_kernel, &config);
        else
            cudaOccupancyMaxActiveClusters(&clusters, stream_kernel, &config);
        std::printf("   clusters of %d: %d resident at once, the grid has %u\n", cluster, clusters, grid.x / cluster);
        reported = report;
    }
    if (in_step_mode)
        cudaLaunchKernelEx(&config, stream_in_step_kernel, mk, mv, w, in_step_mode->in_step);
    else
        cudaLaunchKernelEx(&config, stream_kernel, mk, mv, w);
}

}  // namespace

int main(int argc, char** argv) {
    const int batch = argc > 1 ? std::atoi(argv[1]) : 64;
    const int seqlen = argc > 2 ? std::atoi(argv[2]) : 16384;
    const int nheads = argc > 3 ? std::atoi(argv[3]) : 8;
    const int order = argc > 4 ? std::atoi(argv[4]) : 0;
    const int splits = argc > 5 ? std::atoi(argv[5]) : 1;  // slices of each unit's sequence, a block each
    if (order < 0 || order > 2) {
        std::printf("page order %d: expected 0 (random), 1 (the pool in order) or 2 (random within 2 MB)\n", order);
        return 1;
    }
    const size_t elems = size_t(batch) * seqlen * nheads * kHeadDim;
    void *k = nullptr, *v = nullptr, *flush = nullptr;
    int* table = nullptr;
    cudaMalloc(&k, elems * 2);
    cudaMalloc(&v, elems * 2);
    cudaMalloc(&flush, kFlushBytes);
    cudaMemset(k, 1, elems * 2);
    cudaMemset(v, 1, elems * 2);
    const int pages = batch * seqlen / kPage;
    std::vector<int> perm(pages);
    for (int i = 0; i < pages; ++i) perm[i] = i;
    const size_t page_bytes = size_t(kPage) * nheads * kHeadDim * 2;
    const int run = int(std::max<size_t>(1, kTranslationBytes / page_bytes));  // pages a translation covers
    if (order == 0) std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
    if (order == 2) {
        // Random within each translation's run of pages, and the runs themselves in random order.
        std::mt19937 rng(7);
        std::vector<int> runs((pages + run - 1) / run);
        for (size_t r = 0; r < runs.size(); ++r) runs[r] = int(r);
        std::shuffle(runs.begin(), runs.end(), rng);
        std::vector<int> out;
        for (int r : runs) {
            const size_t first = size_t(r) * run, last = std::min<size_t>(pages, first + run);
            std::vector<int> piece(perm.begin() + first, perm.begin() + last);
            std::shuffle(piece.begin(), piece.end(), rng);
            out.insert(out.end(), piece.begin(), piece.end());
        }
        perm = out;
    }
    cudaMalloc(&table, pages * sizeof(int));
    cudaMemcpy(table, perm.data(), pages * sizeof(int), cudaMemcpyHostToDevice);

    const int smem = 100 * 1024;  // two blocks an SM, as the kernel
    cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncSetAttribute(stream_threads_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncSetAttribute(stream_in_step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneBlockSmem);
    cudaFuncSetAttribute(stream_handoff_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncSetAttribute(stream_paced_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    uint32_t* progress = nullptr;  // modes 22-26: a word a block, counting up across launches (each launch's epoch)
    cudaMalloc(&progress, sizeof(uint32_t) * batch * nheads * splits);
    cudaMemset(progress, 0, sizeof(uint32_t) * batch * nheads * splits);
    uint32_t epoch = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const double bytes = 2.0 * elems * 2;
    static const char* const kOrders[] = {"random", "sequential", "random within 2 MB"};
    std::printf("batch %d, seqlen %d, nheads_k %d, head dim %d: %.1f MB of K and V; pages %s; %d split(s)\n", batch,
                seqlen, nheads, kHeadDim, bytes / 1e6, kOrders[order], splits);
    for (int m = 0; m < int(sizeof(kModes) / sizeof(kModes[0])); ++m) {
        const Mode& mode = kModes[m];
        uint64_t dims[4], strides[3];
        const uint64_t d = kHeadDim;
        if (mode.paged) {
            dims[0] = d, dims[1] = kPage, dims[2] = nheads, dims[3] = pages;
            strides[0] = nheads * d, strides[1] = d, strides[2] = kPage * nheads * d;
        } else if (mode.head_major) {
            dims[0] = d, dims[1] = seqlen, dims[2] = nheads, dims[3] = batch;
            strides[0] = d, strides[1] = seqlen * d, strides[2] = nheads * seqlen * d;
        } else {
            dims[0] = d, dims[1] = seqlen, dims[2] = nheads, dims[3] = batch;
            strides[0] = nheads * d, strides[1] = d, strides[2] = seqlen * nheads * d;
        }
        const CUtensorMap mk = make_map(k, dims, strides, mode.rows, mode.heads);
        const CUtensorMap mv = make_map(v, dims, strides, mode.rows, mode.heads);
        // The same block count for every mode: batch x nheads_k units, a head group's slices of the sequence.
        const int groups = nheads / mode.heads;
        Work w{batch, seqlen, nheads, mode.rows, mode.heads, mode.paged, mode.warm, table,
               static_cast<const unsigned char*>(k), static_cast<const unsigned char*>(v), progress, 0, mode.slack};
        const dim3 grid(batch * groups * mode.heads * splits);
        if (splits > 1 && mode.cluster > 1) continue;  // the cluster modes read a unit's whole sequence a block
        std::vector<float> ms;
        for (int r = 0; r < kRepeats + 2; ++r) {
            cudaMemsetAsync(flush, r, kFlushBytes);
            cudaEventRecord(e0);
            if (mode.copy_threads)
                stream_threads_kernel<<<grid, mode.copy_threads, smem>>>(static_cast<const unsigned char*>(k),
                                                                    static_cast<const unsigned char*>(v), w);
            else if (mode.handoff)
                stream_handoff_kernel<<<grid, kHandoffThreads, smem>>>(mk, mv, w, mode.handoff);
            else if (mode.one_per_sm)
                cluster_launch(grid, kOneBlockSmem, mode.cluster, mk, mv, w, &mode);
            else if (mode.cluster > 1)
                cluster_launch(grid, smem, mode.cluster, mk, mv, w);
            else if (mode.slack) {
                w.epoch = epoch;
                epoch += 1u << 20;  // past any block's tile count
                stream_paced_kernel<<<grid, 32, smem>>>(mk, mv, w);
            } else
                stream_kernel<<<grid, 32, smem>>>(mk, mv, w);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float t = 0;
            cudaEventElapsedTime(&t, e0, e1);
            if (r >= 2) ms.push_back(t);
        }
        const cudaError_t err = cudaGetLastError();
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        std::printf("mode %d  %-32s %9.1f us  %.3f TB/s%s\n", m, mode.name, med * 1e3, bytes / (med * 1e-3) / 1e12,
                    err == cudaSuccess ? "" : cudaGetErrorString(err));
    }
    return 0;
}
