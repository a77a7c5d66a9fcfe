// The Hopper kv-cache attention kernel (sm_90a): few query rows against a long cache, with the cache's K and V tiles
// brought by the copy engine (TMA).
//
// Why a second kv-cache kernel: decode reads every cached key and value once, so its speed is the memory system's.
// The Ampere-class kernel (sm80/kvcache_kernel.cuh) copies tiles with 16-byte cp.async per thread and reads K/V at
// 2.91-2.95 TB/s on an H100 where the Hopper forward's copy-engine tiles reach 3.00-3.10 on the same bytes
// (bench/NOTES.md, "what the Hopper forward's loads say").
//
// One block: one warpgroup computing kBlockM = 64 packed query rows (the query heads that share kv head hk, as the
// Ampere-class kernel packs them: packed row r is token r / group of query head hk * group + r % group) against one
// split of the cache, and producer warps that issue the copies (on paged caches two: K's, V's). A block may take 2, 4
// or 8 kv heads (KvcPlan::head_group; kvc_head_group_for_grid, kvc_dense_head_group say where): its rows are then (kv
// head, packed row) pairs, one copy brings a 16-row piece (8 rows with 8 kv heads) of all its kv heads, a tile is 64
// key-rows of 32, 16 or 8 keys each (KvcTileCols), and each row's scores of the other kv heads' key-rows are masked, so
// P V adds its own kv head's values alone. K and V tiles of kBlockN key-rows flow through rings of kKStages / kVStages
// stages: "full" mbarriers complete on the copies' bytes, "empty" ones on one arrival from each consumer warp once its
// products have read the stage. Caches are read through a 4-D tensor map (head dim, cache position, kv head, cache
// entry): dense ones of one kv head a block in whole tiles; paged ones, and any of several kv heads a block, in pieces
// (kvc_box_rows: 16 or 8 rows with several kv heads, else the most rows up to a tile that divide the page size), each
// at its page's block; a paged piece of one kv head brings both its 64-column halves in one copy, V's through the 4-D
// map with the halves folded into its head dimension (KvcPlan::v_fold_rows), K's through a 5-D one that also splits the
// page's rows into 8-row groups (KvcPlan::k_fold). Where the plan asks (KvcPlan::pages_in_address_order: blocks of up
// to 4096 pages), the producers take the pages of the unmasked middle tiles in address order rather than table order
// (kvc_page_order.cuh). The products are the Hopper forward's (fwd_kernel.cuh: S by wgmma from shared memory, O += P V
// with P from registers), the softmax the Ampere kernels' (sm80/warp_tiles.cuh). Q is gathered by the consumers
// themselves (its packed rows are not a box) into the 128-byte swizzle wgmma reads. With splits, the splits of a unit
// are usually one thread block cluster and merge there (kvc_cluster_merge below); otherwise each block writes its
// normalised partial O and LSE in fp32 to the workspace and sm80/kvcache_combine.cuh merges them, as for the
// Ampere-class kernel, or (KvcPlan::merge_by_last, for measurement) the unit's last block to finish does
// (kvc_all_arrived, kvc_last_merge below). Where the plan balances the splits (KvcPlan::balance_tiles, asked for on
// the paged grids whose groups of SMs read at different rates), a unit's splits take its tiles a chunk at a time from
// a counter they share (kvc_claim_take) rather than a fixed share each. The common decode call (one kv head a block,
// no softcap or ALiBi, pages in table order, fixed splits) runs a lean instance compiled without the other paths
// (kLean below).
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/mask.h"
#include "common/numeric.h"
#include "common/params.h"
#include "kernels/common/ptx_sm90.cuh"
#include "kernels/sm80/kvcache_common.cuh"
#include "kernels/sm80/kvcache_plan.h"
#include "kernels/sm80/warp_tiles.cuh"
#include "kernels/sm90/fwd_kernel.cuh"
#include "kernels/sm90/kvc_page_order.cuh"

namespace flashattn::kernels {

// kBlockN keys a tile, kKStages / kVStages stages of K / V tiles, kMinBlocks resident blocks an SM (the register cap).
template <typename Elem_, int kHeadDim_, int kBlockN_, int kKStages_, int kVStages_, int kMinBlocks_>
struct KvcSm90Traits : Sm90FwdTraits<Elem_, kHeadDim_, 1, Sm90Schedule::serial, kBlockN_> {
    using Base = Sm90FwdTraits<Elem_, kHeadDim_, 1, Sm90Schedule::serial, kBlockN_>;
    static constexpr int kKStages = kKStages_, kVStages = kVStages_;
    static constexpr int kConsumerThreads = 128;
    // Paged caches: two producer warps, kProducerWarp issuing the K copies and the next one the V copies. A paged
    // tile is up to 4 page pieces x 2 boxes a tensor, each copy its own instruction with its coordinates moved to
    // uniform registers one lane at a time, and one warp issuing K and V both could not keep up with one block an
    // SM's share of the bandwidth (bench/NOTES.md, "kv-cache: what one block an SM waits on"). Dense caches (a tile
    // is 2 copies a tensor), and paged ones whose blocks' tiles all fit the rings (KvcPlan::one_producer): one
    // producer warp issuing both, the block launched with kThreadsDense threads.
    static constexpr int kProducerWarp = kConsumerThreads / 32;
    static constexpr int kThreads = kConsumerThreads + 64, kThreadsDense = kConsumerThreads + 32;
    static constexpr int kMinBlocks = kMinBlocks_;
    static constexpr int kPartialStride = Base::kBoxesV * Base::kBoxCols;  // floats a partial row (a cluster's merge)
    static constexpr int kPiecesMax = Base::kBlockN / kPageBoxRows;
    static_assert(Base::kBlockN % kPageBoxRows == 0 && kPiecesMax <= 32, "a paged tile is whole pieces, a lane each");
    static_assert((Base::kBlockN & (Base::kBlockN - 1)) == 0, "kvc_piece_rows halves the tile down to a piece");
};

// Balanced splits (KvcPlan::balance_tiles): the chunks the K warp has claimed, handed to the V warp through a ring of
// this many slots (the two warps stay within a few tiles of each other, so within a few chunks).
constexpr int kKvcClaimSlots = 4;

template <class T>
struct KvcSm90Smem {
    using Elem = typename T::Elem;
    alignas(kSm90SmemAlign) Elem q[T::kBoxes][T::kQBoxElems];
    alignas(kSm90SmemAlign) Elem k[T::kKStages][T::kBoxes][T::kKvBoxElems];
    alignas(kSm90SmemAlign) Elem v[T::kVStages][T::kBoxesV][T::kKvBoxElems];
    uint64_t k_full[T::kKStages], v_full[T::kVStages], k_empty[T::kKStages], v_empty[T::kVStages];
    // Balanced splits: each K stage's tile (its first key, -1 past the block's last tile), and the claimed chunks'
    // ring from the K warp to the V warp.
    uint64_t claim_full[kKvcClaimSlots], claim_empty[kKvcClaimSlots];
    int32_t tile_n0[T::kKStages];
    int32_t claimed[kKvcClaimSlots];
    // Paged caches read in address order (kvc_page_order.cuh): each producer warp's sorted windows; a merged range's
    // four windows take all four buffers, one each.
    alignas(16) int32_t page_order[kKvcOrderProducers][kKvcOrderBuffers][kKvcOrderWidePages];
};
template <class T>
constexpr int kvc_sm90_smem_bytes() {
    return static_cast<int>(sizeof(KvcSm90Smem<T>)) + kSm90SmemAlign;  // room to align the dynamic base
}

// Producer lanes: the copies of one K or V tile (cache positions [pos0, pos0 + kBlockN / heads) of kv heads
// [hk, hk + heads)) into `boxes`, completing on `full`. Whole tiles (a dense cache, one kv head): lane 0, one box a
// 64-column slice, at cache entry `where`. In pieces (a paged cache, or a dense one read several kv heads a block):
// lane j < pieces the piece_rows-row piece at pos0 + j * piece_rows of all `heads` kv heads (one box a 64-column
// slice, its heads one after the other: the tile's key-rows as KvcTileCols reads them), at row `row` of block
// `where` (the lane's own: its piece's page and first row there, from the block table or the page order; a dense
// cache's entry and position); pieces past the sequence are not copied (the masks and the V tail's zeros cover their
// rows). `fold` (a paged cache's pieces through a folded map, each piece's two boxes one copy): kFoldV (V,
// KvcPlan::v_fold_rows), the halves landing one after the other; kFoldK (K, KvcPlan::k_fold), interleaved by 8-row
// group.
enum KvcFold { kFoldNone, kFoldV, kFoldK };
template <class T, int kBoxCount, typename Elem>
__device__ __forceinline__ void issue_cache_tile(Elem* boxes, const CUtensorMap* map, uint64_t* full, int lane,
                                                 bool pieced, int piece_rows, int heads, int pos0, int pieces,
                                                 int hk, int where, int row, bool hinted, uint64_t policy,
                                                 KvcFold fold = kFoldNone) {
    // One box: with the L2 `policy` where `hinted` (the plan marks the cache's lines read-once, KvcPlan::kv_read_once).
    // The box at column col, row `row` of the map's head `head` (a folded map's 2 * hk: both halves from column 0).
    auto copy = [&](Elem* dst, int col, int row, int head) {
        if (fold == kFoldK) {  // the 5-D map: row within its 8-row group, 2 * head + half, the row's group, the page
            const int in_group = row % kKvcFoldGroupRows, group = row / kKvcFoldGroupRows;
            if (hinted)
                ptx::tma_load_5d(dst, map, full, col, in_group, head, group, where, policy);
            else
                ptx::tma_load_5d(dst, map, full, col, in_group, head, group, where);
        } else if (hinted) {
            ptx::tma_load_4d(dst, map, full, col, row, head, where, policy);
        } else {
            ptx::tma_load_4d(dst, map, full, col, row, head, where);
        }
    };
    auto copy_box = [&](Elem* dst, int bx, int row) { copy(dst, bx * T::kBoxCols, row, hk); };
    if (!pieced) {
        if (lane == 0) {
            ptx::mbarrier_arrive_expect_tx(full, kBoxCount * T::kKvBoxElems * 2);
            for (int bx = 0; bx < kBoxCount; ++bx) copy_box(boxes + bx * T::kKvBoxElems, bx, pos0);
        }
        return;
    }
    const int piece_elems = piece_rows * heads * T::kBoxCols;
    if (lane == 0) ptx::mbarrier_arrive_expect_tx(full, pieces * kBoxCount * piece_elems * 2);
    __syncwarp();
    if (fold != kFoldNone) {  // both halves of the lane's piece in one copy (KvcPlan::v_fold_rows, k_fold)
        if (lane < pieces) copy(boxes + lane * kBoxCount * piece_elems, 0, row, 2 * hk);
        return;
    }
    if (lane < pieces)
        for (int bx = 0; bx < kBoxCount; ++bx) copy_box(boxes + bx * T::kKvBoxElems + lane * piece_elems, bx, row);
}

// Balanced splits (KvcPlan::balance_tiles): a unit's chunks of tiles handed out in order by one 64-bit counter in
// the workspace, the launch's tag (KvcPlan::claim_epoch) in its high half and the chunks handed out so far in its low
// half. A claim is one atomic add, sent ahead of its use (kvc_claim_send: the K warp sends the next one as it starts
// on a chunk) and read once that chunk's copies have gone out (kvc_claim_take), so its round trip is off the copies'
// path. A launch's first claim finds another tag there (the previous launch's counter, set back to 0 by its last
// claim, or whatever the caller's workspace held): its claimer puts (tag, 1) in place by a compare-and-swap against
// the word as it last saw it, taking chunk 0, and claimers that lose that race claim again on the word as set. Each
// block claims until a claim comes back past the chunks, so a unit's last claim is chunks + splits - 1, and its
// claimer sets the word back to 0 (kvc_claim_reset), which no tag is: a graph's replays, which keep their capture's
// tag, start afresh as well. A workspace word that holds this launch's tag by chance (1 in 2^32, as for the last-block
// merge's flags) is taken as this launch's count.
__device__ __forceinline__ unsigned long long kvc_claim_send(unsigned long long* counter) {
    return atomicAdd(counter, 1ull);
}
__device__ __forceinline__ int kvc_claim_take(unsigned long long* counter, uint32_t tag, unsigned long long sent) {
    if (uint32_t(sent >> 32) == tag) return static_cast<int>(uint32_t(sent));
    const unsigned long long ours = static_cast<unsigned long long>(tag) << 32;
    unsigned long long seen = sent + 1;  // the word after this block's add, as far as this block knows
    for (;;) {
        const unsigned long long was = atomicCAS(counter, seen, ours | 1ull);
        if (was == seen) return 0;
        if (uint32_t(was >> 32) == tag) return static_cast<int>(uint32_t(atomicAdd(counter, 1ull)));
        seen = was;  // other blocks' adds to the stale word since: try again against what it holds
    }
}
__device__ __forceinline__ void kvc_claim_reset(unsigned long long* counter) { atomicExch(counter, 0ull); }

// One merged (row, 4-column chunk) item of a split merge (kvc_cluster_merge, kvc_last_merge): out = acc / weight_sum
// at the row of (sequence b, token, query head), and the row's LSE with its first chunk; a row no split saw (max_lse
// -inf) gets 0 and +inf, as the combine kernel gives it.
template <typename Elem>
__device__ __forceinline__ void kvc_store_merged(const AttnParams& p, int b, int token, int head, int col, float4 acc,
                                                 float weight_sum, float max_lse) {
    const bool empty = max_lse == -INFINITY;
    const float inv = empty ? 0.f : __fdividef(1.f, weight_sum);
    Elem* o = static_cast<Elem*>(p.out) + b * p.out_batch_stride + token * p.out_row_stride +
              head * p.out_head_stride + col;
    reinterpret_cast<uint32_t*>(o)[0] = ptx::pack2(acc.x * inv, acc.y * inv, Elem());
    reinterpret_cast<uint32_t*>(o)[1] = ptx::pack2(acc.z * inv, acc.w * inv, Elem());
    if (p.softmax_lse && col == 0)
        p.softmax_lse[b * p.lse_batch_stride + head * p.lse_head_stride + token] =
            empty ? INFINITY : max_lse + __logf(weight_sum);
}

// The splits of one unit (row block, kv heads) merged inside their cluster (KvcPlan::merge_in_cluster; the cluster
// spans the grid's z, one block a split, so a block's rank is its split). Why: at batch 1-4 a second kernel and a
// round trip of the partial results through memory are a measurable share of the call (batch 1 x 8 kv heads, 1k
// keys: 13.7 us with them, 12.6 without; bench/NOTES.md, "kv-cache: splits merged in a cluster"). Each block has
// left its normalised partial rows (fp32, T::kPartialStride floats a row) at `part_o` and their LSEs at `part_lse`
// in its own shared memory, and passed the cluster barrier; the unit's (row, 4-column chunk) items are shared out
// among all the cluster's consumer threads, each reading that chunk and LSE from every split:
// out = sum_s w_s O_s / sum_s w_s, w_s = exp(lse_s - max lse) (sm80/kvcache_combine.cuh's arithmetic; a split that
// saw no key has lse -inf, a row no split saw gets 0 and +inf). The splits are taken kGroup at a time, each group's
// loads issued together and unrolled, with a running maximum between groups: 8 (kKvcPortableCluster, the planner's
// usual cluster, so one group; 16 splits, kKvcClusterMax, in two), or 2 (KvcPlan::merge_group).
// Why groups rather than all of kKvcClusterMax unrolled: a call runs the merge once, at its end, and its code is
// fetched as it runs (from L2 after the benchmark's memset flush, from DRAM where a serving step's other kernels have
// read their weights through L2), so its length is time. Measured on an H200 (bench/NOTES.md, "kv-cache: a lean
// instance for the common call" and "kv-cache: the lean instance's Q gather and merge"): in the lean instance, one
// merge of groups of 8 in place of the unrolled 8- and 16-split ones and the grouped one of 2 (with the shorter Q
// gather) took 0.0-0.7 us off the cluster-merged calls after the memset flush and 1.1-2.5 after a reading flush,
// 16-split calls among them; groups of 2 cost up to 0.7 us after the memset flush where they gained after the reading
// one, so they are an option.
template <int kGroup, class T, typename Elem>
__device__ __forceinline__ void kvc_cluster_merge_grouped(const AttnParams& p, const KvcBlock& blk, int num_splits,
                                                          uint32_t part_o, uint32_t part_lse, int tid) {
    constexpr int kColsPerItem = 4;  // one 16-byte load of a partial row
    const int chunks = p.head_dim_v / kColsPerItem, items = blk.rows * chunks;
    for (int item = int(ptx::cluster_rank()) * T::kConsumerThreads + tid; item < items;
         item += num_splits * T::kConsumerThreads) {
        const int local = item / chunks, col = item % chunks * kColsPerItem;
        float max_lse = -INFINITY, weight_sum = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 1
        for (int j0 = 0; j0 < num_splits; j0 += kGroup) {
            float lse[kGroup];
            float4 o[kGroup];
#pragma unroll
            for (int j = 0; j < kGroup; ++j) {  // the group's loads issued before any is used
                const bool split = j0 + j < num_splits;
                lse[j] = split ? ptx::ld_cluster_f32(ptx::cluster_smem_addr(part_lse + local * 4, j0 + j)) : -INFINITY;
                o[j] = split ? ptx::ld_cluster_f32x4(ptx::cluster_smem_addr(
                                   part_o + (local * T::kPartialStride + col) * 4, j0 + j))
                             : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            float group_max = max_lse;
#pragma unroll
            for (int j = 0; j < kGroup; ++j) group_max = fmaxf(group_max, lse[j]);
            if (group_max == -INFINITY) continue;  // no split so far saw a key
            const float rescale = expf(max_lse - group_max);  // 0 while max_lse is -inf
            weight_sum *= rescale;
            acc.x *= rescale, acc.y *= rescale, acc.z *= rescale, acc.w *= rescale;
#pragma unroll
            for (int j = 0; j < kGroup; ++j) {
                const float w = expf(lse[j] - group_max);  // 0 past num_splits (lse -inf)
                weight_sum += w;
                acc.x += w * o[j].x, acc.y += w * o[j].y, acc.z += w * o[j].z, acc.w += w * o[j].w;
            }
            max_lse = group_max;
        }
        const int packed = blk.m0 + local;
        kvc_store_merged<Elem>(p, blk.b, blk.token_of(packed), blk.head_of(packed), col, acc, weight_sum, max_lse);
    }
}

template <class T, typename Elem>
__device__ __forceinline__ void kvc_cluster_merge(const AttnParams& p, const KvcBlock& blk, int num_splits,
                                                  uint32_t part_o, uint32_t part_lse, int tid, int merge_group) {
    if (merge_group == 2)
        kvc_cluster_merge_grouped<2, T, Elem>(p, blk, num_splits, part_o, part_lse, tid);
    else
        kvc_cluster_merge_grouped<kKvcPortableCluster, T, Elem>(p, blk, num_splits, part_o, part_lse, tid);
}

// Splits merged by the unit's last block to finish (KvcPlan::merge_by_last), the combine kernel's work without a
// second kernel. Each block, once its partial rows are written, sets its split's flag (one 32-bit word a split of each
// unit, in the workspace) to this launch's tag, then reads the unit's other flags: a block that finds them all set
// merges. Of two blocks that finish together at least the later one sees both flags (each fences between storing its
// own flag and reading the others': the store-buffering case, which fence.sc rules out), so some block merges; when
// two do, they write the same values. Why flags and not a count of arrivals: a count is a read-modify-write of one
// word by every split, and as a compare-and-swap (the count has to carry the launch's tag too) its retries queued
// behind each other at 29-32 splits: ~5 us a call more than flags (bench/NOTES.md, "kv-cache: the last-block
// merge"). The caller's workspace is not zeroed, so a flag counts only when it holds this launch's tag
// (KvcPlan::merge_epoch: from a launch counter, never 0), and the merging block clears the unit's flags, so that a
// graph's replays (its capture's tag each time, on the same memory) start from clear flags.
//
// One thread's, after each consumer thread has fenced its partial rows and the consumers have met at a barrier:
// whether every split of the unit has arrived (`flags`: the unit's; the loads go out eight at a time).
__device__ __forceinline__ bool kvc_all_arrived(uint32_t* flags, uint32_t tag, int split, int splits) {
    constexpr int kLoadsTogether = 8;
    ptx::st_relaxed_gpu_u32(flags + split, tag);
    __threadfence();  // this block's flag out before it reads the others'
    bool all = true;
#pragma unroll kLoadsTogether
    for (int s = 0; s < splits; ++s) all &= ptx::ld_relaxed_gpu_u32(flags + s) == tag;
    if (all)
        for (int s = 0; s < splits; ++s) ptx::st_relaxed_gpu_u32(flags + s, 0);
    return all;
}

// The last block's merge: every split's partial row of each of the unit's rows (the workspace, as the combine kernel
// reads it: (split, batch, head, token) rows of head_dim_v floats and their LSEs), a consumer thread a (row, 4-column
// chunk) item, merged online (the running max and sum rescaled by group). Each group of loads is a round trip to L2,
// so they go out kLoads at a time: kGroup splits of kItems items (a thread has several items when the unit has more
// than 4 packed rows at head dim 128), 8 x 2 up to 8 splits, 16 x 1 past them (the combine kernel's 29-32 splits in
// two). Items past the last and splits past n load the last ones again (unconditional loads; weight 0 for the
// splits, no store for the items). Loads bypass L1 (ld.global.cg): the other blocks' rows were written from other
// SMs.
template <int kGroup, int kItems, class T, typename Elem>
__device__ __forceinline__ void kvc_last_merge_by(const AttnParams& p, const KvcPlan& plan, const KvcBlock& blk,
                                                  int tid) {
    constexpr int kColsPerItem = 4;
    const int chunks = p.head_dim_v / kColsPerItem, items = blk.rows * chunks, n = plan.num_splits;
    const int64_t rows_per_split = int64_t(p.batch) * p.nheads * p.seqlen_q;
    for (int item0 = tid; item0 < items; item0 += kItems * T::kConsumerThreads) {
        int token[kItems], head[kItems], col[kItems];
        int64_t row[kItems];  // split 0's
        float max_lse[kItems], weight_sum[kItems];
        float4 acc[kItems];
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            const int item = min(item0 + i * T::kConsumerThreads, items - 1);
            const int packed = blk.m0 + item / chunks;
            token[i] = blk.token_of(packed), head[i] = blk.head_of(packed), col[i] = item % chunks * kColsPerItem;
            row[i] = (int64_t(blk.b) * p.nheads + head[i]) * p.seqlen_q + token[i];
            max_lse[i] = -INFINITY, weight_sum[i] = 0.f, acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        for (int s0 = 0; s0 < n; s0 += kGroup) {
            float lse[kItems][kGroup];
            float4 o[kItems][kGroup];
#pragma unroll
            for (int i = 0; i < kItems; ++i)
#pragma unroll
                for (int j = 0; j < kGroup; ++j) {  // every load of the group issued before any is used
                    const int64_t at = min(s0 + j, n - 1) * rows_per_split + row[i];
                    lse[i][j] = s0 + j < n ? __ldcg(plan.lse_accum + at) : -INFINITY;
                    o[i][j] = __ldcg(reinterpret_cast<const float4*>(plan.o_accum + at * p.head_dim_v + col[i]));
                }
#pragma unroll
            for (int i = 0; i < kItems; ++i) {
                float group_max = -INFINITY;
#pragma unroll
                for (int j = 0; j < kGroup; ++j) group_max = fmaxf(group_max, lse[i][j]);
                const float new_max = fmaxf(max_lse[i], group_max);
                if (new_max == -INFINITY) continue;  // no split so far saw a key
                const float rescale = expf(max_lse[i] - new_max);  // 0 while max_lse is -inf
                float4& a = acc[i];
                weight_sum[i] *= rescale;
                a.x *= rescale, a.y *= rescale, a.z *= rescale, a.w *= rescale;
#pragma unroll
                for (int j = 0; j < kGroup; ++j) {
                    const float w = expf(lse[i][j] - new_max);  // 0 past n (lse -inf)
                    weight_sum[i] += w;
                    a.x += w * o[i][j].x, a.y += w * o[i][j].y, a.z += w * o[i][j].z, a.w += w * o[i][j].w;
                }
                max_lse[i] = new_max;
            }
        }
#pragma unroll
        for (int i = 0; i < kItems; ++i)
            if (item0 + i * T::kConsumerThreads < items)
                kvc_store_merged<Elem>(p, blk.b, token[i], head[i], col[i], acc[i], weight_sum[i], max_lse[i]);
    }
}

template <class T, typename Elem>
__device__ __forceinline__ void kvc_last_merge(const AttnParams& p, const KvcPlan& plan, const KvcBlock& blk,
                                               int tid) {
    constexpr int kLoads = 16;  // 16-byte loads a thread has in flight (64 registers; the main loop's are free)
    if (plan.num_splits <= kKvcPortableCluster)
        kvc_last_merge_by<kKvcPortableCluster, kLoads / kKvcPortableCluster, T, Elem>(p, plan, blk, tid);
    else
        kvc_last_merge_by<kLoads, 1, T, Elem>(p, plan, blk, tid);
}

// A thread's columns of one row in the epilogue (two adjacent columns of each n8 tile, from column 2 * tig):
// `put(dt)` stores tile dt's pair from one base at a constant offset. With every column in use (head_dim_v fills the
// instance's bucket, as 64 and 128 do) there is no test a column; else those at cols_left (head_dim_v - 2 * tig) and
// beyond are left out. Why: indexed by its column with the test inside, each store was a branch of its own that worked
// its 64-bit address out again (~12 instructions a column), and the epilogue took 0.85-1.5 us (the timeline's
// epilogue mark), the last work of a call.
template <int kDTiles, class Put>
__device__ __forceinline__ void kvc_row_columns(bool all_columns, int cols_left, Put put) {
    if (all_columns) {
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) put(dt);
    } else {
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt)
            if (dt * 8 < cols_left) put(dt);
    }
}

// The named barriers between the two producer warps: K's first tile has gone out (KvcPlan::k_first); and, a merged
// page order's (KvcPageOrder::merged), six from kKvcOrderMergeBarrier: the steps of each warp's share of the merge
// (kvc_merge_step). The consumers' own is 1.
constexpr int kKvcKFirstBarrier = 2;
constexpr int kKvcOrderMergeBarrier = 3;

// kLean: the instance for the common decode call (one kv head a block, no softcap or ALiBi, pages in table order,
// fixed splits, no last-block merge; kvc_lean in kvcache_sm90.cu says where and why), compiled without the code of
// the rest (the grouped loop, the page order, the balanced producer, the last-block merge), so that the code a call
// runs lies closer together; its Q gather is a short loop of its own and its one merge takes groups of 8.
template <class T, bool kLean = false>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    kvcache_sm90_kernel(const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                        const AttnParams p, const KvcPlan plan) {
#if defined(__CUDA_ARCH__) && !FLASHATTN_SM90A
    __trap();  // sm_90a code only; the dispatch launches it on compute capability 9.0 alone
#else
    using Elem = typename T::Elem;
    extern __shared__ unsigned char smem_raw[];
    auto& s = *reinterpret_cast<KvcSm90Smem<T>*>((reinterpret_cast<uintptr_t>(smem_raw) + kSm90SmemAlign - 1) /
                                                 kSm90SmemAlign * kSm90SmemAlign);
    // With splits merged by the combine (a programmatic dependent), its blocks may be launched now.
    const bool in_cluster = plan.merge_in_cluster;
    const bool merge_by_last = !kLean && plan.merge_by_last;
    if (plan.num_splits > 1 && !in_cluster && !merge_by_last) ptx::allow_dependent_launch();
    // A block of head_group kv heads (KvcPlan::head_group): its tiles are kBlockN key-rows, keys_per_tile keys of
    // each of its kv heads, arranged as KvcTileCols says.
    const int head_group = kLean ? 1 : plan.head_group, keys_per_tile = T::kBlockN / head_group;
    const bool balanced = !kLean && plan.balance_tiles > 0;
    const KvcBlock blk(p, plan.num_splits, T::kBlockM, keys_per_tile, head_group);
    const int split = blk.split, b = blk.b, hk = blk.hk, rows = blk.rows, m0 = blk.m0;
    const CacheSeq seq = blk.seq;
    const KeyRange first = blk.first, last = blk.last;
    const int tile_begin = blk.tiles.begin, tiles = blk.tiles.end - blk.tiles.begin;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    if (tid == 0) {
        kvc_mark(kKvStart);
        for (int st = 0; st < T::kKStages; ++st) {
            ptx::mbarrier_init(&s.k_full[st], 1);
            ptx::mbarrier_init(&s.k_empty[st], T::kConsumerThreads / 32);
        }
        for (int st = 0; st < T::kVStages; ++st) {
            ptx::mbarrier_init(&s.v_full[st], 1);
            ptx::mbarrier_init(&s.v_empty[st], T::kConsumerThreads / 32);
        }
        if (balanced) {
            for (int st = 0; st < kKvcClaimSlots; ++st) {
                ptx::mbarrier_init(&s.claim_full[st], 1);
                ptx::mbarrier_init(&s.claim_empty[st], 1);
            }
        }
        ptx::fence_mbarrier_init();
        kvc_mark(kKvInitDone);
    }
    __syncthreads();  // the last block-wide barrier: the producer warps leave the consumers after their loops
    if (tid == 0) kvc_mark(kKvSynced);

    // ---- producer warps: K's and V's (one warp, both, on dense caches) ------------------------------------------
    if (warp >= T::kProducerWarp) {
        const bool issue_k = warp == T::kProducerWarp, issue_v = !issue_k || blockDim.x == T::kThreadsDense;
        const int32_t* table_row = p.block_table ? p.block_table + b * p.block_table_batch_stride : nullptr;
        const int entry = p.cache_batch_idx ? p.cache_batch_idx[b] : b;
        // In pieces: paged caches, and dense ones read several kv heads a block (as one page as long as the cache).
        const bool pieced = table_row || head_group > 1;
        const int piece_rows = kvc_box_rows(table_row ? p.page_size : 0, T::kBlockN, head_group);
        const int piece_shift = __ffs(piece_rows) - 1;  // piece_rows is a power of two (kvc_box_rows)
        const uint64_t evict_first = ptx::l2_policy_evict_first();
        // Tile i goes out once tile i - ahead has been used (KvcPlan::tiles_ahead; at most, and by default, a ring's
        // stages, when its stage is free). Consumers use tiles in order, so that wait also frees tile i's stage.
        const int ahead_k = plan.tiles_ahead > 0 && plan.tiles_ahead < T::kKStages ? plan.tiles_ahead : T::kKStages;
        const int ahead_v = plan.tiles_ahead > 0 && plan.tiles_ahead < T::kVStages ? plan.tiles_ahead : T::kVStages;
        // Two producer warps: V's first tile goes out once K's has (KvcPlan::k_first), as one warp issues them.
        // Each warp at once, the first K tile landed 0.8 us later at batch 16 x 8 x 4k page 16 than with one warp (3.5
        // us from the block's start against 4.3), and paged calls of 1-4 x 8-32 kv heads ended 0.1-0.6 us later
        // (bench/NOTES.md, "kv-cache: where random pages cost, and the paged producer's first tile").
        const bool k_first = plan.k_first && !(issue_k && issue_v);
        const bool marks = issue_k && lane == 0;  // the timeline's (diagnostic builds only)
        if (marks) kvc_mark(kKvProducer);
        // The loop, compiled twice: with the page order (kOrdered) and without it. A paged cache's middle tiles in
        // address order (KvcPlan::pages_in_address_order), past the first tiles both rings take (the same range for
        // both warps), are worked out once tile 0's copies have gone out; the loop without that machinery is the
        // one dense caches and pages in table order run. Why two: the code a block runs before its first copy is
        // fetched cold (the L2 flushed before a call, or a serving step's other kernels), and the order's state and
        // its branches were several hundred instructions of it.
        auto produce = [&](auto ordered) {
            constexpr bool kOrdered = decltype(ordered)::value;
            KvcPageOrder order;
            const int producer = warp - T::kProducerWarp, producers = issue_k && issue_v ? 1 : kKvcOrderProducers;
            int32_t(*order_buffers)[kKvcOrderWidePages] = s.page_order[producer];  // this warp's windows
            int32_t(*merge_buffers)[kKvcOrderWidePages] = s.page_order[0];        // a merged range's: both warps'
            int window[kKvcOrderWidePerLane];     // the window being sorted (read a window ahead: kvc_read_window)
            int sort_window = 0, sort_stage = 0;  // ... its index, and its sort's next stage
            int merge_step = 0;                   // a merged range's next step of the merge (kvc_merge_step)
            auto read_window = [&](int w) {
                kvc_with_window(order, window, [&](auto& r) { kvc_read_window(order, table_row, w, r, lane); });
            };
            // Paged: this lane's piece's page (its index in the sequence's table) and its first row there, carried
            // from tile to tile, a tile being step_pages pages and step_rows rows on. Why: the divisions by page_size
            // a tile were a third of the paged producers' samples at 16 x 8 x 4k page 16; without them paged calls
            // read 0.1-0.3% faster on an H200 (bench/NOTES.md, "kv-cache: the paged producers' divisions").
            int page_at = 0, row_at = 0, step_pages = 0, step_rows = 0;
            if (table_row) {
                const int first = seq.leftpad + tile_begin * keys_per_tile + lane * piece_rows;
                page_at = first / p.page_size;
                row_at = first - page_at * p.page_size;
                step_pages = keys_per_tile / p.page_size;
                step_rows = keys_per_tile - step_pages * p.page_size;
            }
            for (int i = 0; i < tiles; ++i) {
                const int ks = i % T::kKStages, vs = i % T::kVStages;
                const int n0 = (tile_begin + i) * keys_per_tile;
                const int pos0 = seq.leftpad + n0;
                // In pieces: this lane's piece, and (paged) the block its page maps to (pieces past the sequence are
                // skipped).
                int where = entry, pieces = 0, row = pos0 + lane * piece_rows;
                if (pieced) pieces = (min(keys_per_tile, seq.seqlen_k - n0) + piece_rows - 1) >> piece_shift;
                if (marks && i == 0) kvc_hold(pieces), kvc_mark(kKvPieces);
                if (kOrdered && order.active && i >= order.tile_begin && i < order.tile_end) {
                    // A merged range: the other warp's share of the merge is stored (long since: by tile_begin - 1).
                    if (order.merged && i == order.tile_begin && producers > 1)
                        kvc_merge_wait<kKvcOrderMergeBarrier>(order, 2);
                    const KvcPiece piece =
                        kvc_ordered_piece(order, order.merged ? merge_buffers : order_buffers, i, lane);
                    where = piece.block, row = piece.row;
                } else if (table_row) {
                    where = lane < pieces ? table_row[page_at] : 0;
                    row = row_at;
                }
                if (table_row) {  // the next tile's page and row
                    page_at += step_pages, row_at += step_rows;
                    if (row_at >= p.page_size) row_at -= p.page_size, ++page_at;
                }
                if (marks && i == 0) kvc_hold(where), kvc_mark(kKvPageRead);
                if (issue_k) {
                    if (i >= ahead_k) {
                        const int used = i - ahead_k;
                        ptx::mbarrier_wait(&s.k_empty[used % T::kKStages], (used / T::kKStages) % 2);
                    }
                    issue_cache_tile<T, T::kBoxes>(s.k[ks][0], &map_k, &s.k_full[ks], lane, pieced, piece_rows,
                                                   head_group, pos0, pieces, hk, where, row, plan.kv_read_once,
                                                   evict_first, plan.k_fold ? kFoldK : kFoldNone);
                    if (marks && i == 0) kvc_mark(kKvFirstIssue);
                    if (i == 0 && k_first) {
                        __syncwarp();
                        ptx::named_barrier_arrive<kKvcKFirstBarrier>(64);
                    }
                }
                if (issue_v) {
                    if (i == 0 && k_first) ptx::named_barrier_sync<kKvcKFirstBarrier>(64);  // K's first tile went out
                    if (i >= ahead_v) {
                        const int used = i - ahead_v;
                        ptx::mbarrier_wait(&s.v_empty[used % T::kVStages], (used / T::kVStages) % 2);
                    }
                    issue_cache_tile<T, T::kBoxesV>(s.v[vs][0], &map_v, &s.v_full[vs], lane, pieced, piece_rows,
                                                    head_group, pos0, pieces, hk, where, row, plan.kv_read_once,
                                                    evict_first, plan.v_fold_rows > 0 ? kFoldV : kFoldNone);
                }
                if (!kOrdered) continue;
                if (i == 0) {
                    // kOrdered: the plan asks for the order on this paged cache (the call below); the block may
                    // still be too short for it.
                    order = kvc_page_order(kOrdered, blk, keys_per_tile, p.page_size, piece_rows,
                                           max(ahead_k, ahead_v), producers, producer);
                    sort_window = order.first_window();
                    if (order.active) read_window(sort_window);
                }
                // One stage of the order's sort a tile (KvcPageOrder::stage_tile), a window sorted stored and the
                // next one read; a merged range's windows sorted, one step a tile of their merge (merge_tile): a pass,
                // or a clean (the sort's last stage again, on the window loaded back), with its barriers.
                const bool sorting =
                    order.active && sort_window < order.sort_end() && i == order.stage_tile(sort_window, sort_stage);
                KvcMergeStep merge;
                if (!sorting && order.merged && sort_window == order.sort_end() && merge_step < order.merge_steps() &&
                    i == order.merge_tile(merge_step)) {
                    merge = kvc_merge_step(order, merge_step++);
                    if (merge.wait >= 0) kvc_merge_wait<kKvcOrderMergeBarrier>(order, merge.wait);
                    if (merge.pass_a >= 0)
                        kvc_window_pass(merge_buffers[0], merge.pass_a, merge.pass_b, merge.reversed, lane);
                    if (merge.clean >= 0) kvc_load_window(merge_buffers[0], merge.clean, window, lane);
                }
                if (sorting || merge.clean >= 0) {
                    const bool mark_window = marks && sorting && sort_window < 2;
                    if (mark_window && sort_stage == 0) {
                        kvc_mark(sort_window == 0 ? kKvOrderBegin0 : kKvOrderBegin1);
                        int every = 0;  // every lane's loads landed
                        for (int j = 0; j < kKvcOrderPerLane; ++j) every ^= window[j];
                        kvc_hold(every);
                        kvc_mark(sort_window == 0 ? kKvOrderRead0 : kKvOrderRead1);
                    }
                    const int stage = sorting ? sort_stage : kKvcCleanStage;
                    kvc_with_window(order, window, [&](auto& r) { warp_sort_stage(r, lane, stage); });
                    if (!sorting) {
                        kvc_store_window(window, merge_buffers[merge.clean], lane);
                    } else if (++sort_stage == order.stages()) {
                        int32_t* buffer = order.merged ? merge_buffers[sort_window]
                                                       : order_buffers[sort_window % kKvcOrderBuffers];
                        kvc_with_window(order, window, [&](auto& r) { kvc_store_window(r, buffer, lane); });
                        if (mark_window) kvc_mark(sort_window == 0 ? kKvOrderSorted0 : kKvOrderSorted1);
                        sort_stage = 0;
                        if (++sort_window < order.sort_end()) read_window(sort_window);
                    }
                }
                if (merge.arrive >= 0) kvc_merge_arrive<kKvcOrderMergeBarrier>(order, merge.arrive);
            }
        };
        // Balanced splits (KvcPlan::balance_tiles): the unit's tiles in chunks of balance_tiles, each claimed by the K
        // warp's lane 0 (kvc_claim_send / kvc_claim_take) and handed to the V warp through s.claimed (-1: no more);
        // the consumers find each tile's first key in s.tile_n0 beside its K stage, and -1 there past the last. A tile's
        // copies as the loop above issues them outside the page order.
        auto produce_balanced = [&]() {
            const int chunk_tiles = plan.balance_tiles;
            const int unit_begin = blk.unit_tiles.begin, unit_end = blk.unit_tiles.end;
            const int chunks = (unit_end - unit_begin + chunk_tiles - 1) / chunk_tiles;
            unsigned long long* counter = plan.tile_claims + (blockIdx.y * gridDim.x + blockIdx.x);
            const bool hand_to_v = issue_k && !issue_v;  // two producer warps
            int i = 0;                                     // this warp's tiles so far: its place in the rings
            auto issue_tile = [&](int n0) {
                const int ks = i % T::kKStages, vs = i % T::kVStages;
                const int pos0 = seq.leftpad + n0;
                int where = entry, pieces = 0, row = pos0 + lane * piece_rows;
                if (pieced) pieces = (min(keys_per_tile, seq.seqlen_k - n0) + piece_rows - 1) >> piece_shift;
                if (table_row) {
                    where = lane < pieces ? table_row[row / p.page_size] : 0;
                    row %= p.page_size;
                }
                if (issue_k) {
                    if (i >= ahead_k) {
                        const int used = i - ahead_k;
                        ptx::mbarrier_wait(&s.k_empty[used % T::kKStages], (used / T::kKStages) % 2);
                    }
                    if (lane == 0) s.tile_n0[ks] = n0;  // published by the copies' arrival on k_full (this lane's)
                    issue_cache_tile<T, T::kBoxes>(s.k[ks][0], &map_k, &s.k_full[ks], lane, pieced, piece_rows,
                                                   head_group, pos0, pieces, hk, where, row, plan.kv_read_once,
                                                   evict_first, plan.k_fold ? kFoldK : kFoldNone);
                    if (marks && i == 0) kvc_mark(kKvFirstIssue);
                    if (i == 0 && k_first) {
                        __syncwarp();
                        ptx::named_barrier_arrive<kKvcKFirstBarrier>(64);
                    }
                }
                if (issue_v) {
                    if (i == 0 && k_first) ptx::named_barrier_sync<kKvcKFirstBarrier>(64);
                    if (i >= ahead_v) {
                        const int used = i - ahead_v;
                        ptx::mbarrier_wait(&s.v_empty[used % T::kVStages], (used / T::kVStages) % 2);
                    }
                    issue_cache_tile<T, T::kBoxesV>(s.v[vs][0], &map_v, &s.v_full[vs], lane, pieced, piece_rows,
                                                    head_group, pos0, pieces, hk, where, row, plan.kv_read_once,
                                                    evict_first, plan.v_fold_rows > 0 ? kFoldV : kFoldNone);
                }
                ++i;
            };
            auto issue_chunk = [&](int chunk) {
                const int t0 = unit_begin + chunk * chunk_tiles, t1 = min(unit_end, t0 + chunk_tiles);
                for (int t = t0; t < t1; ++t) issue_tile(t * keys_per_tile);
            };
            if (!issue_k) {  // the V warp: the chunks as the K warp hands them over
                for (int q = 0;; ++q) {
                    const int slot = q % kKvcClaimSlots;
                    ptx::mbarrier_wait(&s.claim_full[slot], (q / kKvcClaimSlots) % 2);
                    const int chunk = s.claimed[slot];
                    __syncwarp();
                    if (lane == 0) ptx::mbarrier_arrive(&s.claim_empty[slot]);
                    if (chunk < 0) break;
                    issue_chunk(chunk);
                }
                return;
            }
            unsigned long long sent = lane == 0 ? kvc_claim_send(counter) : 0ull;
            for (int q = 0;; ++q) {
                int chunk = lane == 0 ? kvc_claim_take(counter, plan.claim_epoch, sent) : 0;
                chunk = __shfl_sync(0xffffffffu, chunk, 0);
                const bool more = chunk < chunks;
                if (more && lane == 0) sent = kvc_claim_send(counter);  // the next claim, in flight meanwhile
                if (hand_to_v && lane == 0) {
                    const int slot = q % kKvcClaimSlots;
                    if (q >= kKvcClaimSlots) {
                        const int used = q - kKvcClaimSlots;
                        ptx::mbarrier_wait(&s.claim_empty[slot], (used / kKvcClaimSlots) % 2);
                    }
                    s.claimed[slot] = more ? chunk : -1;
                    ptx::mbarrier_arrive(&s.claim_full[slot]);
                }
                if (more) {
                    issue_chunk(chunk);
                    continue;
                }
                if (lane == 0) {
                    // The consumers' end: -1 in the next K stage, whose full barrier an arrival alone completes.
                    const int ks = i % T::kKStages;
                    if (i >= ahead_k) {
                        const int used = i - ahead_k;
                        ptx::mbarrier_wait(&s.k_empty[used % T::kKStages], (used / T::kKStages) % 2);
                    }
                    s.tile_n0[ks] = -1;
                    ptx::mbarrier_arrive(&s.k_full[ks]);
                    if (chunk == chunks + plan.num_splits - 1) kvc_claim_reset(counter);  // the unit's last claim
                }
                __syncwarp();
                break;
            }
        };
        if constexpr (kLean)
            produce(std::false_type{});
        else if (balanced)
            produce_balanced();
        else if (plan.pages_in_address_order && table_row)
            produce(std::true_type{});
        else
            produce(std::false_type{});
        // The consumers' two cluster barriers (the merge's), passed before leaving; the producers publish nothing
        // through them, so their arrivals are relaxed.
        if (in_cluster) {
            __syncwarp();
            ptx::cluster_arrive_relaxed();
            ptx::cluster_wait();
            ptx::cluster_arrive_relaxed();
            ptx::cluster_wait();
        }
        return;
    }

    // ---- consumers: Q's packed rows, gathered into the 128-byte swizzle (row r of a box: 16-byte chunk c at
    // position c ^ (r % 8)); rows past the block's are zeros ---------------------------------------------------------
    const KvcQueries<Elem> queries(p, plan.q_rot);
    if constexpr (kLean) {
        // One chunk column a thread, its rows kRowsPerPass apart. One kv head a block: packed row m0 + r is query head
        // r % heads_per_kv of the kv head's group at token r / heads_per_kv, stepped from pass to pass without a
        // division; the loop kept rolled (two passes at a time, so that up to 16 rows' loads go out together).
        constexpr int kChunksPerBoxRow = T::kRowBytes / 16, kChunksPerRow = T::kBoxes * kChunksPerBoxRow;
        constexpr int kRowsPerPass = T::kConsumerThreads / kChunksPerRow, kPasses = T::kBlockM / kRowsPerPass;
        static_assert(T::kConsumerThreads % kChunksPerRow == 0 && T::kBlockM % kRowsPerPass == 0);
        const int chunk = tid % kChunksPerRow, bx = chunk / kChunksPerBoxRow, c = chunk % kChunksPerBoxRow;
        const int col = bx * T::kBoxCols + c * 8, r0 = tid / kChunksPerRow, per_kv = blk.heads_per_kv;
        const int step_tokens = kRowsPerPass / per_kv, step_heads = kRowsPerPass - step_tokens * per_kv;
        int token = (m0 + r0) / per_kv, head = m0 + r0 - token * per_kv;
        const Elem* q_col = queries.q + b * queries.batch_stride + int64_t(hk) * per_kv * queries.head_stride + col;
        const uint32_t q_chunk = ptx::smem_addr(s.q[bx]) + c * 16;
#pragma unroll 2
        for (int pass = 0; pass < kPasses; ++pass) {
            const int r = r0 + pass * kRowsPerPass;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r < rows && col < p.head_dim)
                v = *reinterpret_cast<const uint4*>(q_col + token * queries.row_stride + head * queries.head_stride);
            ptx::st_shared_16(q_chunk + r * T::kRowBytes + (((c ^ (r % kChunksPerBoxRow)) - c) * 16), v);
            token += step_tokens, head += step_heads;
            if (head >= per_kv) head -= per_kv, ++token;
        }
        ptx::fence_proxy_async_shared();
        ptx::named_barrier_sync<1>(T::kConsumerThreads);
    } else {
        constexpr int kChunksPerBoxRow = T::kRowBytes / 16, kChunks = T::kBlockM * T::kBoxes * kChunksPerBoxRow;
        for (int i = tid; i < kChunks; i += T::kConsumerThreads) {
            const int r = i / (T::kBoxes * kChunksPerBoxRow), bx = (i / kChunksPerBoxRow) % T::kBoxes;
            const int c = i % kChunksPerBoxRow, col = bx * T::kBoxCols + c * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r < rows && col < p.head_dim) v = *reinterpret_cast<const uint4*>(queries.row(blk, m0 + r) + col);
            ptx::st_shared_16(ptx::smem_addr(s.q[bx]) + r * T::kRowBytes + ((c ^ (r % kChunksPerBoxRow)) * 16), v);
        }
        ptx::fence_proxy_async_shared();  // wgmma reads Q through the async proxy
        ptx::named_barrier_sync<1>(T::kConsumerThreads);
    }
    const bool marks = tid == 0;  // the timeline's (diagnostic builds only)
    if (marks) kvc_mark(kKvQReady);

    // Each thread's two rows (group and group + 8 of its warp's 16).
    const int group = lane / 4, tig = lane % 4;
    const KvcRowPair row_pair = kvc_row_pair(p, blk, m0 + warp * 16 + group);
    // The tile's key-rows: pieces of kvc_box_rows keys of each kv head in turn (with one kv head, its keys in order).
    const KvcTileCols tile_cols{__ffs(head_group) - 1, __ffs(kvc_box_rows(0, T::kBlockN, head_group)) - 1};

    float acc_o[T::kMTiles][T::kDTiles][4];
    float row_max[T::kMTiles][2], row_sum[T::kMTiles][2];
    start_rows<T>(acc_o, row_max, row_sum);
    auto& o_flat = reinterpret_cast<float(&)[T::kDTiles * 4]>(acc_o[0][0][0]);
    const bool transform = !kLean && (p.softcap > 0.f || p.alibi_slopes != nullptr);
    const float exp2_mult = transform ? kLog2e : p.scale_log2;
    const float softcap_in = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
    const uint32_t q_smem = ptx::smem_addr(s.q[0]);  // one warpgroup: its 64 rows are the tile
    const bool warp_leader = lane == 0;
    // Decode packs few rows (one query row of 4 query heads: 4 of the 64), and the softmax of the padding rows is
    // time on every tile's path: the consumers' time a tile is part of the stream's (32-key tiles, twice the tiles
    // for the same bytes, were 3-8% slower). So a warp with none of the block's rows skips the softmax and gives
    // P = 0; one whose second rows (group + 8) are all padding runs the first half alone; and a live warp's padding
    // rows give P = 0 (P = 1 on Q's zero rows would keep the tensor cores busy for nothing). Their outputs are never
    // stored, and P V adds nothing to the real rows' either way. Measured: bench/NOTES.md, "kv-cache: the padding
    // rows".
    const int warp_row0 = warp * 16;
    const bool lean = !plan.softmax_all_rows;
    const bool warp_live = !lean || warp_row0 < rows;
    const bool second_half = !lean || warp_row0 + 8 < rows;
    const bool row_live[2] = {!lean || warp_row0 + group < rows, !lean || warp_row0 + group + 8 < rows};

    // V's layout: 64-column boxes of the tile's key-rows (8 KB apart at kBlockN 64, a k16 step 16 rows on), or with
    // 16-row pieces folded (KvcPlan::v_fold_rows) each piece's two halves together (2 KB apart, a k16 step a piece
    // on). Folded whole-tile pieces land as the usual tile.
    const bool v_fold_pieces = plan.v_fold_rows == kPageBoxRows;
    const uint32_t v_lbo = v_fold_pieces ? kPageBoxRows * T::kRowBytes : T::kBlockN * T::kRowBytes;
    const uint32_t v_step = v_fold_pieces ? 2 * kPageBoxRows * T::kRowBytes : 16 * T::kRowBytes;
    // K's layout: 64-column boxes of the tile's key-rows, each box's 8-row groups one after the other; or with its
    // pieces folded (KvcPlan::k_fold) the two halves' groups alternating, so a half's groups lie 2 KB apart and the
    // halves 1 KB.
    const uint32_t k_group_bytes = plan.k_fold ? T::kBoxes * ptx::kSwizzleRowGroupBytes : ptx::kSwizzleRowGroupBytes;
    const uint32_t k_box_bytes = plan.k_fold ? ptx::kSwizzleRowGroupBytes : T::kBlockN * T::kRowBytes;

    // With KvcPlan::overlap_products, tile i + 1's S product is issued right after tile i's P V, and the two complete
    // in order: P V's wait (and V's stage released), then S's (and K's); tile i + 1 then starts at its softmax.
    const bool overlap = plan.overlap_products;
    float acc_s[T::kMTiles][T::kNTiles][4];
    auto& s_flat = reinterpret_cast<float(&)[T::kNTiles * 4]>(acc_s[0][0][0]);
    // Tile j's S product: issued once its K has landed; done once it has completed (no wgmma of this warpgroup
    // issued after it still outstanding), when S is in registers and K's stage goes back to the producer.
    auto issue_s = [&](int j) {
        ptx::mbarrier_wait(&s.k_full[j % T::kKStages], (j / T::kKStages) % 2);
        if (marks && j == 0) kvc_mark(kKvFirstK);
        if (marks && j == tiles - 1) kvc_mark(kKvLastK);
        if (marks) kvc_progress(j, tiles);
        issue_qk<T>(acc_s, q_smem, ptx::smem_addr(s.k[j % T::kKStages][0]), k_group_bytes, k_box_bytes);
    };
    auto s_done = [&](int j) {
        ptx::wgmma_wait<0>();
        ptx::fence_registers(s_flat);
        if (warp_leader) ptx::mbarrier_arrive(&s.k_empty[j % T::kKStages]);
    };
    // The loop, compiled twice: the general one, and a plain one for blocks of one kv head without softcap or ALiBi
    // (most decode calls), whose scores need the masks alone, and only on the tiles some row does not wholly see.
    // Why: the first tile's pass runs its code cold (fetched from memory after an L2 flush, or a serving step's other
    // kernels), and the score modifiers and the grouped mask were most of the instructions between S and P V.
    // Balanced splits (KvcPlan::balance_tiles): tiles as the K warp claimed them, each one's first key beside its K
    // stage (s.tile_n0), until -1 there.
    auto consume = [&](auto general) {
        constexpr bool kGeneral = decltype(general)::value;
        for (int i = 0; balanced || i < tiles; ++i) {
            const int vs = i % T::kVStages;
            int n0 = (tile_begin + i) * keys_per_tile;

            if (balanced) {
                const int ks = i % T::kKStages;
                ptx::mbarrier_wait(&s.k_full[ks], (i / T::kKStages) % 2);
                n0 = s.tile_n0[ks];
                if (n0 < 0) break;
                issue_qk<T>(acc_s, q_smem, ptx::smem_addr(s.k[ks][0]), k_group_bytes, k_box_bytes);
                s_done(i);
            } else if (!overlap || i == 0) {
                issue_s(i);
                s_done(i);
            }

            uint32_t a_frag[T::kPvSteps][4];
            // Score modifiers, then the masks on tiles some row does not wholly see (and, with several kv heads,
            // each row's scores of the other kv heads' key-rows).
            if (warp_live) {
                kvc_prepare_scores<T::kNTiles, kGeneral>(acc_s[0], p, row_pair, n0, tig, seq.seqlen_k,
                                                         kGeneral && transform,
                                                         !(last.begin <= n0 && first.end >= n0 + keys_per_tile),
                                                         softcap_in, tile_cols);
                if (second_half)
                    online_softmax<T>(acc_s, acc_o, row_max, row_sum, exp2_mult);
                else
                    online_softmax<T, 1>(acc_s, acc_o, row_max, row_sum, exp2_mult);
                pack_p<T>(a_frag, acc_s);
#pragma unroll
                for (int ps = 0; ps < T::kPvSteps; ++ps) {  // A fragment registers 0, 2: row group; 1, 3: group + 8
                    if (!row_live[0]) a_frag[ps][0] = a_frag[ps][2] = 0u;
                    if (!row_live[1]) a_frag[ps][1] = a_frag[ps][3] = 0u;
                }
            } else {
#pragma unroll
                for (int ps = 0; ps < T::kPvSteps; ++ps)
                    a_frag[ps][0] = a_frag[ps][1] = a_frag[ps][2] = a_frag[ps][3] = 0u;
            }

            ptx::mbarrier_wait(&s.v_full[vs], (i / T::kVStages) % 2);
            if (marks && i == tiles - 1) kvc_mark(kKvLastV);
            // V rows past the sequence hold another sequence's (or never written) values, or were not copied at all: P
            // is 0 there, but 0 x NaN is NaN, so they are zeroed before the product reads them.
            const int tail = seq.seqlen_k - n0;
            if (tail < keys_per_tile) {
                constexpr int kChunksPerBoxRow = T::kRowBytes / 16, kChunksPerBox = T::kBlockN * kChunksPerBoxRow;
                const uint32_t base = ptx::smem_addr(s.v[vs][0]);
                for (int c = tid; c < T::kBoxesV * kChunksPerBox; c += T::kConsumerThreads) {
                    // The key-row: in its box, or (16-row pieces folded) in its piece's half.
                    const int row = v_fold_pieces ? c / (2 * kPageBoxRows * kChunksPerBoxRow) * kPageBoxRows +
                                                        c % (kPageBoxRows * kChunksPerBoxRow) / kChunksPerBoxRow
                                                  : c % kChunksPerBox / kChunksPerBoxRow;
                    if (tile_cols.key(row / 8) + row % 8 >= tail)
                        ptx::st_shared_16(base + c * 16, make_uint4(0, 0, 0, 0));
                }
                ptx::fence_proxy_async_shared();
                ptx::named_barrier_sync<1>(T::kConsumerThreads);
            }
            issue_pv<T>(acc_o, a_frag, ptx::smem_addr(s.v[vs][0]), v_lbo, v_step);
            if (overlap && i + 1 < tiles) {
                issue_s(i + 1);
                ptx::wgmma_wait<1>();  // P V (the older group) done
                ptx::fence_registers(o_flat);
                if (warp_leader) ptx::mbarrier_arrive(&s.v_empty[vs]);
                s_done(i + 1);
            } else {
                ptx::wgmma_wait<0>();
                ptx::fence_registers(o_flat);
                if (warp_leader) ptx::mbarrier_arrive(&s.v_empty[vs]);
            }
            if (marks && i == 0) kvc_mark(kKvFirstPv);
            if (marks && i == tiles - 1) kvc_mark(kKvLastPv);
        }
    };
    if constexpr (kLean)
        consume(std::false_type{});
    else if (transform || head_group > 1)
        consume(std::true_type{});
    else
        consume(std::false_type{});

    // ---- epilogue: the rows' normalised O and LSE, to the output, or (splits) to this block's shared memory for the
    // cluster's merge or to the workspace for the combine ------------------------------------------------------------
    const bool partial = plan.num_splits > 1;
    // The merge's partial rows take the V stages and their LSEs the K stages: every copy has landed and every product
    // that read them has completed by now.
    static_assert(sizeof(s.v) >= sizeof(float) * T::kBlockM * T::kPartialStride, "partial rows fit V's stages");
    static_assert(sizeof(s.k) >= sizeof(float) * T::kBlockM, "partial LSEs fit K's stages");
    float* part_o = reinterpret_cast<float*>(s.v[0][0]);
    float* part_lse = reinterpret_cast<float*>(s.k[0][0]);
    const float max_to_natural = exp2_mult * kLn2;
    Elem* out = static_cast<Elem*>(p.out) + b * p.out_batch_stride;
    const bool all_columns = p.head_dim_v == T::kDTiles * 8;
    const int cols_left = p.head_dim_v - 2 * tig;
    if (marks) kvc_mark(kKvEpilogue);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        // The quad's sum first, by every lane: the shuffle is a full-warp one, so no lane may have left for a row
        // past the block's (with only some of the warp's rows in the block, half a warp would wait there for lanes
        // that never come).
        const float sum = ptx::quad_sum(row_sum[0][half]);
        const int local = warp * 16 + group + 8 * half;
        if (local >= rows) continue;
        const int packed = m0 + local;
        // The row's token and query head from the row pair's token and kv head (blk.token_of / head_of without their
        // divisions): packed = kv_head * kv_rows + token * heads_per_kv + the query head's place among its kv head's.
        const int token = row_pair.token[half], kv_head = row_pair.kv_head[half];
        const int head = (hk + kv_head - token) * blk.heads_per_kv + packed - kv_head * blk.kv_rows;
        const bool empty = !(sum > 0.f);  // saw no key
        const float inv = empty ? 0.f : __fdividef(1.f, sum);
        const float lse = empty ? (partial ? -INFINITY : INFINITY) : row_max[0][half] * max_to_natural + __logf(sum);
        if (partial) {
            // The normalised fp32 partial row and its LSE: in this block's shared memory for the cluster's merge, or
            // in the workspace for the combine (a split that saw no key leaves O = 0 and LSE = -inf: weight 0).
            float* o;
            float* lse_at;
            if (in_cluster) {
                o = part_o + local * T::kPartialStride;
                lse_at = part_lse + local;
            } else {
                const int64_t row_index = ((int64_t(split) * p.batch + b) * p.nheads + head) * p.seqlen_q + token;
                o = plan.o_accum + row_index * p.head_dim_v;
                lse_at = plan.lse_accum + row_index;
            }
            o += 2 * tig;
            kvc_row_columns<T::kDTiles>(all_columns, cols_left, [&](int dt) {
                *reinterpret_cast<float2*>(o + dt * 8) =
                    make_float2(acc_o[0][dt][2 * half] * inv, acc_o[0][dt][2 * half + 1] * inv);
            });
            if (tig == 0) *lse_at = lse;
        } else {
            Elem* o = out + token * p.out_row_stride + head * p.out_head_stride + 2 * tig;
            kvc_row_columns<T::kDTiles>(all_columns, cols_left, [&](int dt) {
                *reinterpret_cast<uint32_t*>(o + dt * 8) =
                    ptx::pack2(acc_o[0][dt][2 * half] * inv, acc_o[0][dt][2 * half + 1] * inv, Elem());
            });
            if (p.softmax_lse && tig == 0)
                p.softmax_lse[b * p.lse_batch_stride + head * p.lse_head_stride + token] = lse;
        }
    }
    if (partial && merge_by_last) {
        // Each thread's rows visible GPU-wide before the block's flag; the flags by one thread once all have stored;
        // the merging block's reads after its own fence.
        __threadfence();
        ptx::named_barrier_sync<1>(T::kConsumerThreads);
        bool last = false;
        if (tid == 0) {
            last = kvc_all_arrived(plan.merge_flags + (blockIdx.y * gridDim.x + blockIdx.x) * plan.num_splits,
                                   plan.merge_epoch, split, plan.num_splits);
            __threadfence();  // the flags read before the barrier hands the news on (as a grid barrier does)
        }
        if (ptx::named_barrier_any<1>(last, T::kConsumerThreads)) {
            __threadfence();
            if (marks) kvc_mark(kKvMerging);
            kvc_last_merge<T, Elem>(p, plan, blk, tid);
        }
    }
    if (partial && in_cluster) {
        ptx::cluster_arrive_shared();  // every split's partial rows written (to its own shared memory)
        ptx::cluster_wait();
        if (marks) kvc_mark(kKvMerging);
        // (The lean instance compiles the groups of 8 alone: kvc_lean leaves KvcPlan::merge_group 2 to the general
        // one.)
        kvc_cluster_merge<T, Elem>(p, blk, plan.num_splits, ptx::smem_addr(part_o), ptx::smem_addr(part_lse), tid,
                                   kLean ? 0 : plan.merge_group);
        // ... and read: no block's shared memory goes while another may still read it. The merge's reads have
        // returned (its stores used them), so the arrive publishes nothing.
        ptx::cluster_arrive_relaxed();
        ptx::cluster_wait();
    }
    if (marks) kvc_mark(kKvStored);
#endif
}

}  // namespace flashattn::kernels
