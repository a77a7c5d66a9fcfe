// Launching the Hopper kv-cache kernel (kvcache_sm90_kernel.cuh): tensor maps over the cache, the grid of (packed row
// blocks, batch x kv heads, splits) (a unit's splits one cluster where they merge there), with the append before it
// and the combine after it (splits not merged in a cluster) as the Ampere-class kernel has them
// (sm80/kvcache_launch.cuh). Instances: float16, bfloat16 x head dims 64, 128, each general and lean (kvc_lean).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include "kernels/common/cuda_check.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/common/func_attributes.h"
#include "kernels/sm80/kvcache_launch.cuh"
#include "kernels/sm90/kvcache_sm90.h"
#include "kernels/sm90/kvcache_sm90_kernel.cuh"
#include "kernels/sm90/tensor_map.h"

namespace flashattn::kernels {

namespace {

constexpr int kSmallBucket = 64, kLargeBucket = 128;
constexpr int64_t kTmaStrideElems = 8;  // the copy engine's strides are multiples of 16 bytes
constexpr uintptr_t kTmaBaseAlign = 16;

std::atomic<int64_t> g_launches{0}, g_cluster_launches{0}, g_ordered_launches{0}, g_v_fold_launches{0},
    g_k_fold_launches{0}, g_lean_launches{0};

// Packed query rows a kv head: query rows x the query heads that share it (the head-group and many-waves rules').
int64_t kv_rows_of(const AttnParams& p) { return kvc_kv_rows(p.seqlen_q, p.nheads, p.nheads_k); }

// A size-1 dimension's stride is never stepped (the API may record it as 0); the encoder still wants a valid one.
int64_t usable_stride(int64_t stride, int64_t extent, int64_t fallback) { return extent == 1 ? fallback : stride; }

struct CacheGeometry {
    uint64_t dims[4];     // head dim, rows (cache positions, or a page's), kv heads, entries (or blocks)
    uint64_t strides[3];  // elements: row, head, entry
};
CacheGeometry cache_geometry(const AttnParams& p, int head_dim, int64_t row, int64_t head, int64_t entry) {
    const int64_t rows = p.block_table ? p.page_size : p.seqlen_k;
    const int64_t packed_row = (head_dim + kTmaStrideElems - 1) / kTmaStrideElems * kTmaStrideElems;
    CacheGeometry g;
    g.dims[0] = uint64_t(head_dim), g.dims[1] = uint64_t(rows), g.dims[2] = uint64_t(p.nheads_k);
    g.dims[3] = uint64_t(p.batch_cache);
    row = usable_stride(row, rows, packed_row);
    head = usable_stride(head, p.nheads_k, row * rows);
    entry = usable_stride(entry, p.batch_cache, head * p.nheads_k);
    g.strides[0] = uint64_t(row), g.strides[1] = uint64_t(head), g.strides[2] = uint64_t(entry);
    return g;
}
bool addressable(const void* base, const CacheGeometry& g) {
    if (reinterpret_cast<uintptr_t>(base) % kTmaBaseAlign != 0) return false;
    for (uint64_t s : g.strides)
        if (s == 0 || s % kTmaStrideElems != 0) return false;
    return true;
}

// 64-key tiles, two K and two V stages, two blocks an SM. Measured against 128-key tiles (one block an SM), three K
// stages, and four stages of each at one block an SM: bench/NOTES.md, "kv-cache: tile shapes and the split rule".
template <ElemType kElem, int kHeadDim>
using Traits = KvcSm90Traits<ElemOf<kElem>, kHeadDim, 64, 2, 2, 2>;

template <class T, bool kLean = false>
auto prepared_kernel() {
    const auto kernel = kvcache_sm90_kernel<T, kLean>;
    // Clusters of more than 8 blocks (splits merged in a cluster, up to kKvcClusterMax) are "non-portable".
    ensure_func_attributes(kernel, kvc_sm90_smem_bytes<T>(), /*non_portable_clusters=*/true, "Hopper kv-cache");
    return kernel;
}

// The launch's configuration: the grid, the block (two producer warps on paged caches but where KvcPlan::one_producer
// says one), and with splits merged in a cluster, clusters of one unit's splits along z; otherwise, where
// kvc_place_blocks says, clusters along y for placement.
template <class T>
struct KvcLaunchConfig {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attribute[1];
    // cluster_splits: a unit's splits merged in their cluster (z); placed: that many blocks along y (a sequence's kv
    // heads) launched as a cluster for where they run alone (kvc_place_cluster).
    KvcLaunchConfig(dim3 grid, bool two_producers, int cluster_splits, cudaStream_t stream, int placed = 1) {
        config.gridDim = grid;
        config.blockDim = dim3(two_producers ? T::kThreads : T::kThreadsDense);
        config.dynamicSmemBytes = kvc_sm90_smem_bytes<T>();
        config.stream = stream;
        attribute[0].id = cudaLaunchAttributeClusterDimension;
        attribute[0].val.clusterDim.x = 1, attribute[0].val.clusterDim.y = static_cast<unsigned>(placed);
        attribute[0].val.clusterDim.z = static_cast<unsigned>(cluster_splits);
        config.attrs = attribute;
        config.numAttrs = cluster_splits > 1 || placed > 1 ? 1 : 0;
    }
};

// Clusters of `splits` blocks resident at once (0: such a cluster cannot be launched), per instance and cache kind.
template <class T>
int cluster_capacity(bool paged, int splits) {
    static int cached[2][kKvcClusterMax + 1];
    static std::once_flag once[2][kKvcClusterMax + 1];
    std::call_once(once[paged][splits], [&] {
        const KvcLaunchConfig<T> launch(dim3(1, 1, unsigned(splits)), paged, splits, nullptr);
        int clusters = 0;
        const auto kernel = prepared_kernel<T>();
        if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config) != cudaSuccess) {
            (void)cudaGetLastError();  // an unlaunchable size reads as 0
            clusters = 0;
        }
        cached[paged][splits] = clusters;
    });
    return cached[paged][splits];
}

template <class T>
int blocks_per_sm() {
    static const int cached = [] {
        int blocks = 0;
        check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, prepared_kernel<T>(), T::kThreads,
                                                                 kvc_sm90_smem_bytes<T>()),
                   "cudaOccupancyMaxActiveBlocksPerMultiprocessor(Hopper kv-cache)");
        return blocks > 0 ? blocks : 1;
    }();
    return cached;
}

// FLASHATTN_KVC_V_FOLD=0: the Hopper kv-cache kernel copies a paged V piece one 64-column half at a time, as before
// kvc_v_fold_rows (for comparison).
constexpr const char* kKvcVFoldVariable = "FLASHATTN_KVC_V_FOLD";

// Paged V pieces in one copy each (KvcPlan::v_fold_rows): the rows of a folded piece, or 0. A paged tile is up to 4
// pieces, each two 64-column boxes of K and two of V, one copy instruction a box; the producer warps' time issuing
// them is on the call's time on grids of one block an SM (bench/NOTES.md, "kv-cache: the copies a tile"). With V's
// halves folded into the map's head dimension (2 * head + half: a head's 128 columns are its two halves, 64 apart)
// one copy brings both, and the piece lands as [half][rows][64 columns]: the P V product reads it with the halves
// 2 KB apart and a k16 step a piece on (16-row pieces), or as the usual tile (pieces of a whole tile). K cannot land
// so (its S product's B operand needs each half's rows evenly spaced): kvc_k_fold folds it another way. Where: one kv
// head a block (the pieces of several are their heads' rows in turn), head dim 128 with the kv heads' rows
// contiguous, pieces of 16 rows or a whole tile.
template <class T>
int kvc_v_fold_rows(const AttnParams& p, const KvcPlan& plan, uint32_t box_rows) {
    const char* choice = std::getenv(kKvcVFoldVariable);
    if (choice && std::strcmp(choice, "0") == 0) return 0;
    const bool rows_fit = box_rows == kPageBoxRows || box_rows == uint32_t(T::kBlockN);
    const bool contiguous = p.v_head_stride == 2 * T::kBoxCols || p.nheads_k == 1;
    const bool fold = p.block_table && plan.head_group == 1 && T::kBoxesV == 2 && p.head_dim_v == 2 * T::kBoxCols &&
                      rows_fit && contiguous;
    return fold ? int(box_rows) : 0;
}

// FLASHATTN_KVC_K_FOLD=0: the Hopper kv-cache kernel copies a paged K piece one 64-column half at a time, as before
// kvc_k_fold (for comparison).
constexpr const char* kKvcKFoldVariable = "FLASHATTN_KVC_K_FOLD";

// Paged K pieces in one copy each (KvcPlan::k_fold). K cannot land as V's folded pieces do ([piece][half][rows]): the
// S product's B operand needs each half's 8-row groups evenly spaced. A 5-D map (64 columns, 8 rows, 2 * kv head +
// half, the page's 8-row groups, the page) lands a piece as [8-row group][half][8 rows][64 columns] instead: each
// half's groups 2 KB apart whatever the piece's rows, which the product's descriptor reads with its group stride at
// 2 KB and the halves 1 KB apart. It halves K's copies a paged tile (8 to 4 at pages of 16). Where: one kv head a
// block, head dim 128 with the kv heads' rows contiguous (the halves and the heads one dimension, 64 elements apart).
// On an H200 every paged shape measured read 0.1-1.8 us faster (4 x 8 x 64k page 16 264.9 against 266.7 us, 1 x 32 x
// 64k page 16 260.7 against 262.4, 16 x 8 x 4k page 16 79.1 against 79.4; bench/NOTES.md, "kv-cache: K's pieces
// folded").
template <class T>
bool kvc_k_fold(const AttnParams& p, const KvcPlan& plan) {
    const char* choice = std::getenv(kKvcKFoldVariable);
    if (choice && std::strcmp(choice, "0") == 0) return false;
    const bool contiguous = p.k_head_stride == 2 * T::kBoxCols || p.nheads_k == 1;
    static_assert(kPageBoxRows % kKvcFoldGroupRows == 0, "every page is whole 8-row groups");
    return p.block_table && plan.head_group == 1 && T::kBoxes == 2 && p.head_dim == 2 * T::kBoxCols && contiguous;
}

// A tag for one launch's arrival flags (KvcPlan::merge_epoch, kvc_all_arrived) or tile claims (KvcPlan::claim_epoch,
// kvc_claim_take): one counter for every instance, never 0, so that stale flags in the caller's workspace do not carry it.
// It starts from a random value: stale flags left by another process (a launch stopped part-way) hold its tags, which
// from a counter starting at 1 would be the first ones this process hands out. A captured graph keeps its capture's
// tag and replays it; each call leaves its flags (and claim counters) clear.
uint32_t first_merge_epoch() {
    try {
        return std::random_device{}();
    } catch (...) {  // no entropy source: the clock's low bits
        return static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    }
}

uint32_t next_merge_epoch() {
    static std::atomic<uint32_t> launches{first_merge_epoch()};
    for (;;) {
        const uint32_t epoch = launches.fetch_add(1, std::memory_order_relaxed) + 1;
        if (epoch != 0) return epoch;
    }
}

// FLASHATTN_KVC_PLACE=n: the Hopper kv-cache kernel's blocks launched n along y (a sequence's kv heads) a cluster,
// for where they run, whatever kvc_place_blocks' rule says (1: none; for comparison).
constexpr const char* kKvcPlaceVariable = "FLASHATTN_KVC_PLACE";

// The blocks along y a placement cluster (kvc_place_blocks; 1: none).
int kvc_place_cluster(const AttnParams& p, const KvcPlan& plan, dim3 grid) {
    const char* choice = std::getenv(kKvcPlaceVariable);
    const int asked = choice && *choice ? std::max(0, std::atoi(choice)) : -1;
    return kvc_place_blocks(p.block_table != nullptr, plan.head_group, plan.merge_in_cluster, grid.y, asked);
}

// FLASHATTN_KVC_LEAN=0: every call on the general instance (for comparison).
constexpr const char* kKvcLeanVariable = "FLASHATTN_KVC_LEAN";

// The calls the lean instance (kvcache_sm90_kernel's kLean) runs: one kv head a block, no score modifier, pages in
// table order, fixed splits, no last-block merge, the cluster merge in groups of 8 (not KvcPlan::merge_group 2): most
// decode calls. Why an instance of their own: the code a call runs is fetched as it runs (from L2 after the
// benchmark's memset flush, from DRAM where a serving step's other kernels have read their weights through L2), and
// without the other paths' code the common path's lies closer together: 62 KB of sm_90a code against 214 KB (bf16,
// head dim 128), with a Q gather of its own (a rolled loop without divisions: the consumers' first product 3.3 KB
// nearer the entry) and one merge. On an H200 (bench/NOTES.md, "kv-cache: a lean instance for the common call" and
// "kv-cache: the lean instance's Q gather and merge") the instance took 0.2-1.3 us off every such call measured after
// the memset flush and 1.3-4.6 us after a reading flush; its Q gather and one merge then another 0.0-0.7 and 1.1-2.5
// (batch 1 x 8 kv heads x 1k: 10.0-10.1 us against the general instance's 11.0-11.1 and cuDNN's 11.5-11.6 after the
// memset flush; 9.8 against 16.2 and cuDNN's 11.2 after the reading one).
bool kvc_lean(const AttnParams& p, const KvcPlan& plan) {
    const char* choice = std::getenv(kKvcLeanVariable);
    if (choice && std::strcmp(choice, "0") == 0) return false;
    return plan.head_group == 1 && plan.balance_tiles == 0 && !(plan.pages_in_address_order && p.block_table) &&
           !plan.merge_by_last && plan.merge_group != 2 && !(p.softcap > 0.f) && p.alibi_slopes == nullptr;
}

template <class T>
void launch(const AttnParams& p, const KvcPlan& plan) {
    const auto stream = static_cast<cudaStream_t>(p.stream);
    require_kvc_grid_rows(p);
    // Everything that can fail before the append writes the cache: nothing is written on error.
    const bool lean = kvc_lean(p, plan);
    const auto kernel = lean ? prepared_kernel<T, true>() : prepared_kernel<T>();
    // A box: a 16- or 8-row piece of the block's kv heads (several a block), a page piece of one (paged), or a whole
    // tile.
    const auto box_rows =
        static_cast<uint32_t>(kvc_box_rows(p.block_table ? p.page_size : 0, T::kBlockN, plan.head_group));
    const auto box_heads = static_cast<uint32_t>(plan.head_group);
    const CacheGeometry gk = cache_geometry(p, p.head_dim, p.k_row_stride, p.k_head_stride, p.k_batch_stride);
    const CacheGeometry gv = cache_geometry(p, p.head_dim_v, p.v_row_stride, p.v_head_stride, p.v_batch_stride);
    KvcPlan run = plan;
    if (run.merge_by_last) run.merge_epoch = next_merge_epoch();
    if (run.balance_tiles > 0) run.claim_epoch = next_merge_epoch();  // (kvc_plan_for turned overlap_products off)
    run.k_fold = kvc_k_fold<T>(p, plan);
    CUtensorMap map_k;
    if (run.k_fold) {
        // (64 columns, 8 rows, 2 * kv head + half, 8-row group, page): a piece is box_rows / 8 groups of both halves.
        const uint64_t dims[5] = {uint64_t(T::kBoxCols), uint64_t(kKvcFoldGroupRows), 2 * gk.dims[2],
                                  gk.dims[1] / kKvcFoldGroupRows, gk.dims[3]};
        const uint64_t strides[4] = {gk.strides[0], uint64_t(T::kBoxCols), kKvcFoldGroupRows * gk.strides[0],
                                     gk.strides[2]};
        const uint32_t box[5] = {uint32_t(T::kBoxCols), uint32_t(kKvcFoldGroupRows), 2,
                                 box_rows / kKvcFoldGroupRows, 1};
        map_k = make_tensor_map_5d_sw128(p.k, p.dtype, dims, strides, box);
    } else {
        map_k = make_tensor_map_4d_sw128(p.k, p.dtype, gk.dims, gk.strides, T::kBoxCols, box_rows, box_heads);
    }
    run.v_fold_rows = kvc_v_fold_rows<T>(p, plan, box_rows);
    CUtensorMap map_v;
    if (run.v_fold_rows > 0) {
        // V's halves as a dimension of their own, 64 elements apart, folded with the kv heads (2 * head + half).
        const uint64_t dims[4] = {uint64_t(T::kBoxCols), gv.dims[1], 2 * gv.dims[2], gv.dims[3]};
        const uint64_t strides[3] = {gv.strides[0], uint64_t(T::kBoxCols), gv.strides[2]};
        map_v = make_tensor_map_4d_sw128(p.v, p.dtype, dims, strides, T::kBoxCols, box_rows, 2);
    } else {
        map_v = make_tensor_map_4d_sw128(p.v, p.dtype, gv.dims, gv.strides, T::kBoxCols, box_rows, box_heads);
    }
    launch_kvc_steps<typename T::Elem>(p, run, stream, T::kBlockM, [&](dim3 grid) {
        KvcLaunchConfig<T> launch(grid, p.block_table != nullptr && !plan.one_producer,
                                  plan.merge_in_cluster ? plan.num_splits : 1, stream, kvc_place_cluster(p, plan, grid));
        check_cuda(cudaLaunchKernelEx(&launch.config, kernel, map_k, map_v, p, run),
                   "Hopper kv-cache attention kernel launch");
        g_launches.fetch_add(1, std::memory_order_relaxed);
        if (plan.merge_in_cluster) g_cluster_launches.fetch_add(1, std::memory_order_relaxed);
        if (plan.pages_in_address_order && p.block_table) g_ordered_launches.fetch_add(1, std::memory_order_relaxed);
        if (run.v_fold_rows > 0) g_v_fold_launches.fetch_add(1, std::memory_order_relaxed);
        if (run.k_fold) g_k_fold_launches.fetch_add(1, std::memory_order_relaxed);
        if (lean) g_lean_launches.fetch_add(1, std::memory_order_relaxed);
    });
}

int bucket_of(const AttnParams& p) {
    const int d = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
    return d <= kSmallBucket ? kSmallBucket : d <= kLargeBucket ? kLargeBucket : 0;
}

template <class F>
auto with_traits(const AttnParams& p, F f) {
    const bool bf16 = p.dtype == ElemType::bf16;
    if (bucket_of(p) == kSmallBucket)
        return bf16 ? f(Traits<ElemType::bf16, kSmallBucket>{}) : f(Traits<ElemType::f16, kSmallBucket>{});
    return bf16 ? f(Traits<ElemType::bf16, kLargeBucket>{}) : f(Traits<ElemType::f16, kLargeBucket>{});
}

}  // namespace

bool kvc_sm90_handles(const AttnParams& p) {
    if (p.op != OpKind::kvcache) return false;
    if (p.dtype != ElemType::f16 && p.dtype != ElemType::bf16) return false;
    if (bucket_of(p) == 0 || p.head_dim % 8 != 0 || p.head_dim_v % 8 != 0) return false;
    if (p.block_table && (p.cache_leftpad || p.page_size % kPageBoxRows != 0)) return false;
    if (p.batch_cache <= 0 || p.nheads_k <= 0 || p.seqlen_k <= 0) return false;
    const CacheGeometry gk = cache_geometry(p, p.head_dim, p.k_row_stride, p.k_head_stride, p.k_batch_stride);
    const CacheGeometry gv = cache_geometry(p, p.head_dim_v, p.v_row_stride, p.v_head_stride, p.v_batch_stride);
    return addressable(p.k, gk) && addressable(p.v, gv);
}

int kvc_sm90_blocks_per_sm(const AttnParams& p) {
    return with_traits(p, [](auto t) { return blocks_per_sm<decltype(t)>(); });
}

int kvc_sm90_cluster_capacity(const AttnParams& p, int splits) {
    if (splits < 2 || splits > kKvcClusterMax) return 0;
    return with_traits(p, [&](auto t) { return cluster_capacity<decltype(t)>(p.block_table != nullptr, splits); });
}

int kvc_sm90_block_n(const AttnParams& p) {
    return with_traits(p, [](auto t) { return decltype(t)::kBlockN; });
}

int kvc_sm90_tiles_in_flight(const AttnParams& p) {
    return with_traits(p, [](auto t) {
        using T = decltype(t);
        return T::kKStages < T::kVStages ? T::kKStages : T::kVStages;
    });
}

bool kvc_sm90_many_waves(const AttnParams& p, int64_t slots, bool fast_memory) {
    const char* choice = std::getenv("FLASHATTN_KVC_MANY_WAVES");
    if (choice && std::strcmp(choice, "0") == 0) return false;
    if (fast_memory && !(choice && std::strcmp(choice, "1") == 0)) return false;
    const bool page_pieces = kvc_small_page_pieces(p.block_table != nullptr, p.page_size, kvc_sm90_block_n(p));
    const int64_t kv_rows = kv_rows_of(p);
    return !page_pieces && kvc_many_waves(int64_t(p.batch) * p.nheads_k, kv_rows, slots);
}

int kvc_sm90_head_group(const AttnParams& p, int64_t slots, bool many_waves, bool fast_memory) {
    const char* choice = std::getenv("FLASHATTN_KVC_HEAD_GROUP");
    if (choice && std::strcmp(choice, "1") == 0) return 1;
    // Any cache may be read several kv heads a block in pieces of kPageBoxRows rows (a dense one as a cache of pages
    // that long): the most its tile allows; and 8 kv heads a block in 8-row pieces where that fits.
    const int64_t kv_rows = kv_rows_of(p);
    int block_n = 0, wide = 1;
    const int most = with_traits(p, [&](auto t) {
        using T = decltype(t);
        block_n = T::kBlockN;
        wide = kvc_wide_head_group(p.nheads_k, kv_rows, T::kBlockM, T::kBlockN);
        return kvc_head_group(kPageBoxRows, p.nheads_k, kv_rows, T::kBlockM, T::kBlockN);
    });
    if (choice && std::strcmp(choice, "max") == 0) return most;
    if (choice && std::strcmp(choice, "8") == 0) return wide > 1 ? wide : most;  // tests, measurements
    if (choice && (std::strcmp(choice, "2") == 0 || std::strcmp(choice, "4") == 0)) {  // measurements: at most 2 or 4
        int group = most;
        while (group > std::atoi(choice)) group /= 2;
        return group;
    }
    const int64_t kv_blocks = int64_t(p.batch) * p.nheads_k;
    // Pages read in 16-row pieces anyway (an odd multiple of 16 rows) group on every grid that stays full; dense
    // caches and longer pieces only where a grouped grid fits the resident slots (kvc_dense_head_group), and not where
    // one kv head a block makes many waves (kvc_many_waves).
    int group;
    if (kvc_small_page_pieces(p.block_table != nullptr, p.page_size, block_n)) {
        group = kvc_head_group_for_grid(most, kv_blocks, slots);
    } else {
        if (many_waves) return 1;
        const bool no_wide = choice && std::strcmp(choice, "no8") == 0;  // measurements: the rule without groups of 8
        group = kvc_dense_head_group(no_wide ? 1 : wide, most, kv_blocks, slots);
        if (fast_memory && p.block_table && most >= kKvcPagedPair)
            group = kvc_fast_memory_paged_group(group, wide, kv_blocks, slots,
                                                kvc_key_tiles(p.seqlen_k, block_n, kKvcPagedPair));
    }
    if (!fast_memory) return group;
    // Fast memory: fours in place of pairs where they say, whichever rule gave the pairs.
    const int64_t quad_tiles = kvc_key_tiles(p.seqlen_k, block_n, kKvcPagedQuad);
    if (!p.block_table)
        return kvc_fast_memory_dense_quads(group, most, p.nheads_k, kv_rows, kv_blocks, slots, quad_tiles);
    return kvc_fast_memory_paged_quads(group, most, kv_rows, kv_blocks, slots, quad_tiles,
                                       kvc_paged_quad_min_tiles(kvc_page_bytes(true, p.k_batch_stride)));
}

void launch_kvc_sm90(const AttnParams& p, const KvcPlan& plan) {
    with_traits(p, [&](auto t) { launch<decltype(t)>(p, plan); });
}

int64_t kvc_sm90_launches() { return g_launches.load(std::memory_order_relaxed); }
int64_t kvc_sm90_cluster_launches() { return g_cluster_launches.load(std::memory_order_relaxed); }
int64_t kvc_sm90_ordered_launches() { return g_ordered_launches.load(std::memory_order_relaxed); }
int64_t kvc_sm90_v_fold_launches() { return g_v_fold_launches.load(std::memory_order_relaxed); }
int64_t kvc_sm90_k_fold_launches() { return g_k_fold_launches.load(std::memory_order_relaxed); }
int64_t kvc_sm90_lean_launches() { return g_lean_launches.load(std::memory_order_relaxed); }

}  // namespace flashattn::kernels

#if defined(FLASHATTN_TIMELINE) && FLASHATTN_TIMELINE
// The diagnostic build's per-block timestamps of the kv-cache kernel (timeline.cuh, KvcEvent): rows of kKvEvents
// 64-bit values for blocks [0, blocks) of the last launch (by linear block index). Returns 0, or 1 on a CUDA error.
extern "C" __attribute__((visibility("default"))) int flashattn_debug_kvc_timeline(unsigned long long* out,
                                                                                   int blocks) {
    using namespace flashattn::kernels;
    const size_t rows = static_cast<size_t>(std::min(blocks, kKvcTimelineBlocks));
    return cudaMemcpyFromSymbol(out, g_kvc_timeline, rows * kKvEvents * sizeof(unsigned long long)) == cudaSuccess
               ? 0
               : 1;
}
#endif
