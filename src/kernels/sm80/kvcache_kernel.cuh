// The Ampere-class kv-cache attention kernel (mma.sync; sm_80 and newer): few query rows against a long cache.
//
// The query heads that share a kv head are packed into one tile, so each cached key and value is read once per kv
// head, not once per query head: packed row r of (sequence b, kv head hk) is query token r / group of query head
// hk * group + r % group (group = nheads / nheads_k). One thread block computes kBlockM packed rows against one
// split of the cache: the split's key tiles stream through shared memory as in the forward kernel (fwd_kernel.cuh,
// whose structure this follows, with the same warp-tile steps from warp_tiles.cuh), with
// each key row's address looked up through the block table when the cache is paged. With one split the block
// writes out and the LSE; with several it writes its normalised partial O and LSE in fp32 to the workspace, and
// kvcache_combine.cuh merges them.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/mask.h"
#include "common/numeric.h"
#include "common/params.h"
#include "kernels/common/ptx.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm80/kvcache_common.cuh"
#include "kernels/sm80/kvcache_plan.h"
#include "kernels/sm80/warp_tiles.cuh"

namespace flashattn::kernels {

// Two ways to share a tile among the warps: along rows (each warp its m16 tiles of the block's rows against all the
// tile's keys), or, where the block has a single m16 tile of rows (decode: a few query heads of one kv head), along
// keys (kWarpsSplitKeys: every warp the same 16 rows against its kWarpKeys-wide slice of each tile, each with its own
// running max, sums and O, merged across the warps once at the end). Along keys no warp computes padding rows only.
template <typename Elem_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, bool kWarpsSplitKeys_ = false>
struct KvcTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = kBlockM_;  // packed query rows
    static constexpr int kBlockN = kBlockN_;  // keys per tile
    static constexpr int kWarps = kWarps_;
    static constexpr bool kWarpsSplitKeys = kWarpsSplitKeys_;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kRowsPerWarp = kWarpsSplitKeys ? kBlockM : kBlockM / kWarps;
    static constexpr int kWarpKeys = kWarpsSplitKeys ? kBlockN / kWarps : kBlockN;  // a warp's keys of each tile
    static constexpr int kMTiles = kRowsPerWarp / 16;
    static constexpr int kNTiles = kWarpKeys / 8;
    static constexpr int kDTiles = kHeadDim / 8;
    static constexpr int kQkSteps = kHeadDim / 16;
    static constexpr int kPvSteps = kWarpKeys / 16;
    using Row = SmemRow<kHeadDim>;  // the shared-memory layout of the Q, K and V tiles
    static constexpr int kStride = Row::kStride;
    static constexpr int kKeyBuffers = 2;  // K tiles: the next one streams in while this one is used
    static constexpr int kSmemBytes = (kBlockM + (kKeyBuffers + 1) * kBlockN) * kStride * 2;  // Q, K x 2, V
    // Along keys, the warps' partial O (fp32, rows padded against bank conflicts) and (max, sum) pairs meet in the
    // K and V buffers once the loop is done.
    static constexpr int kMergeStride = kHeadDim + 8;
    static constexpr int kMergeBytes = kWarps * kBlockM * (kMergeStride + 2) * 4;
    static_assert(kRowsPerWarp % 16 == 0 && kWarpKeys % 16 == 0, "whole mma tiles");
    static_assert(!kWarpsSplitKeys || (kMTiles == 1 && kMergeBytes <= (kKeyBuffers + 1) * kBlockN * kStride * 2),
                  "along keys: one m16 tile of rows, and the merge fits the K and V buffers");
};

// Along keys: merge the warps' (max, sum, O) of the same 16 rows. Each warp leaves its unnormalised O and its rows'
// max (score units) and sum in `merge`; then thread t takes row t / 8 and a column segment, rescales every warp's
// part to the common max and adds them. Returns, through `emit`, the row's normalised columns and LSE.
template <class T, class Emit>
__device__ __forceinline__ void merge_key_slices(const float (&acc_o)[1][T::kDTiles][4], const float (&row_max)[1][2],
                                                 const float (&row_sum)[1][2], float exp2_mult, float* merge,
                                                 int warp, int lane, int tid, Emit emit) {
    constexpr int kRowsMerged = 16, kSegments = T::kThreads / kRowsMerged, kSegCols = T::kHeadDim / kSegments;
    static_assert(T::kThreads % kRowsMerged == 0 && T::kHeadDim % (4 * kSegments) == 0, "whole float4 segments");
    float* stats = merge + T::kWarps * kRowsMerged * T::kMergeStride;  // (warp, row) -> max, sum
    const int group = lane / 4, tig = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = group + 8 * half;
        const float sum = ptx::quad_sum(row_sum[0][half]);
        if (tig == 0) {
            stats[(warp * kRowsMerged + r) * 2] = row_max[0][half];
            stats[(warp * kRowsMerged + r) * 2 + 1] = sum;
        }
        float* row = merge + (warp * kRowsMerged + r) * T::kMergeStride;
#pragma unroll
        for (int dt = 0; dt < T::kDTiles; ++dt)
            *reinterpret_cast<float2*>(row + dt * 8 + 2 * tig) = make_float2(acc_o[0][dt][2 * half], acc_o[0][dt][2 * half + 1]);
    }
    __syncthreads();
    const int r = tid / kSegments, c0 = (tid % kSegments) * kSegCols;
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < T::kWarps; ++w) top = fmaxf(top, stats[(w * kRowsMerged + r) * 2]);
    float weight[T::kWarps], total = 0.f;
#pragma unroll
    for (int w = 0; w < T::kWarps; ++w) {
        const float m = stats[(w * kRowsMerged + r) * 2];
        weight[w] = m == -INFINITY ? 0.f : ptx::exp2_fast((m - top) * exp2_mult);
        total += weight[w] * stats[(w * kRowsMerged + r) * 2 + 1];
    }
    const bool empty = !(total > 0.f);
    const float inv = empty ? 0.f : __fdividef(1.f, total);
    float out[kSegCols];
#pragma unroll
    for (int c = 0; c < kSegCols; c += 4) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < T::kWarps; ++w) {
            const float4 o = *reinterpret_cast<const float4*>(merge + (w * kRowsMerged + r) * T::kMergeStride + c0 + c);
            acc.x += weight[w] * o.x, acc.y += weight[w] * o.y, acc.z += weight[w] * o.z, acc.w += weight[w] * o.w;
        }
        out[c] = acc.x * inv, out[c + 1] = acc.y * inv, out[c + 2] = acc.z * inv, out[c + 3] = acc.w * inv;
    }
    const float lse_natural = empty ? 0.f : top * exp2_mult * kLn2 + __logf(total);
    emit(r, c0, out, empty, lse_natural);
}

// No minimum of resident blocks is asked for: capping registers at 168 for three blocks per SM spilled 240 bytes at
// hd128 and halved the decode bandwidth on an H100 (bench/NOTES.md); at ~250 registers two blocks fit.
template <class T>
__global__ void __launch_bounds__(T::kThreads) kvcache_kernel(const AttnParams p, const KvcPlan plan) {
    using Elem = typename T::Elem;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    Elem* sQ = reinterpret_cast<Elem*>(smem_bytes);
    Elem* sK = sQ + T::kBlockM * T::kStride;
    Elem* sV = sK + T::kKeyBuffers * T::kBlockN * T::kStride;
    auto key_buffer = [&](int n_tile) { return sK + (n_tile % T::kKeyBuffers) * T::kBlockN * T::kStride; };

    // With splits, the combine (a programmatic dependent, kvcache_launch.cuh) may have its blocks launched now: they
    // wait for this grid's end on the GPU instead of being launched after it.
    if (plan.num_splits > 1) ptx::allow_dependent_launch();
    const KvcBlock blk(p, plan.num_splits, T::kBlockM, T::kBlockN);
    const int split = blk.split, b = blk.b, hk = blk.hk;
    const int m0 = blk.m0, rows = blk.rows;
    const CacheSeq seq = blk.seq;
    const KeyRange first = blk.first, last = blk.last;
    const TileRange tiles = blk.tiles;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    auto token_of = [&](int packed) { return blk.token_of(packed); };
    auto head_of = [&](int packed) { return blk.head_of(packed); };

    const KvcQueries<Elem> queries(p, plan.q_rot);
    auto q_row = [&](int r) { return queries.row(blk, m0 + r); };
    const CacheView<const Elem> kc = cache_view<const Elem>(p, p.k, p.k_batch_stride, p.k_row_stride,
                                                            p.k_head_stride, b, hk);
    const CacheView<const Elem> vc = cache_view<const Elem>(p, p.v, p.v_batch_stride, p.v_row_stride,
                                                            p.v_head_stride, b, hk);
    const Elem* any_row = static_cast<const Elem*>(p.k);

    // Each thread's rows: token, head, visible keys and ALiBi slope, fixed for the whole block.
    const int warp_row0 = T::kWarpsSplitKeys ? 0 : warp * T::kRowsPerWarp;
    const int warp_key0 = T::kWarpsSplitKeys ? warp * T::kWarpKeys : 0;  // this warp's first key of each tile
    KvcRowPair row_pairs[T::kMTiles];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
        row_pairs[mt] = kvc_row_pair(p, blk, m0 + warp_row0 + mt * 16 + group);

    float acc_o[T::kMTiles][T::kDTiles][4];
    float row_max[T::kMTiles][2], row_sum[T::kMTiles][2];
    start_rows<T>(acc_o, row_max, row_sum);
    const bool transform_scores = p.softcap > 0.f || p.alibi_slopes != nullptr;
    const float exp2_mult = transform_scores ? kLog2e : p.scale_log2;
    const float softcap_in = p.softcap > 0.f ? p.scale / p.softcap : 0.f;

    // Key column j is cache position leftpad + j; a tile's rows past the sequence are zero-filled. The pipeline:
    // iteration n starts the copies of V(n) and K(n + 1), computes S(n) and its softmax while they fly, waits for
    // V(n) alone, then O += P V(n). Where tile n + 2's rows live is looked up meanwhile (`next`), so a paged cache's
    // block-table reads overlap the tile's work instead of delaying its copies.
    using Rows = KeyTileRows<T::kBlockN, T::kHeadDim, T::kThreads>;
    auto tile_rows = [&](Rows& r, int n_tile) {
        if (n_tile < tiles.end) r.locate(kc, seq.leftpad + n_tile * T::kBlockN, seq.seqlen_k - n_tile * T::kBlockN, tid);
    };
    Rows current, next;  // tiles n and n + 1 at the top of iteration n
    tile_rows(current, tiles.begin);
    tile_rows(next, tiles.begin + 1);

    load_rows_async<T::kBlockM, T::kHeadDim, T::kThreads>(sQ, q_row, any_row, rows, p.head_dim, tid);
    if (tiles.begin < tiles.end)
        current.load_async(key_buffer(tiles.begin), kc, any_row, seq.seqlen_k - tiles.begin * T::kBlockN, p.head_dim,
                           tid);
    ptx::cp_async_commit();

    for (int n_tile = tiles.begin; n_tile < tiles.end; ++n_tile) {
        const int n0 = n_tile * T::kBlockN;
        ptx::cp_async_wait<0>();
        __syncthreads();  // K(n_tile) and Q landed; every warp is done reading V(n_tile - 1) and K(n_tile - 1)
        current.load_async(sV, vc, any_row, seq.seqlen_k - n0, p.head_dim_v, tid);
        ptx::cp_async_commit();
        if (n_tile + 1 < tiles.end)
            next.load_async(key_buffer(n_tile + 1), kc, any_row, seq.seqlen_k - n0 - T::kBlockN, p.head_dim, tid);
        ptx::cp_async_commit();  // an empty group on the last tile keeps the wait count below uniform
        current = next;
        tile_rows(next, n_tile + 2);

        // ---- S = Q K^T -------------------------------------------------------------------------------------------
        float acc_s[T::kMTiles][T::kNTiles][4];
        const Elem* sK_now = key_buffer(n_tile) + warp_key0 * T::kStride;
        scores_tile<T>(acc_s, sK_now, lane, [&](uint32_t(&a)[4], int mt, int ks) {
            ptx::ldmatrix_x4(a, ptx::smem_addr(sQ + (warp_row0 + mt * 16 + lane % 16) * T::kStride + ks * 16 +
                                               (lane / 16) * 8));
        });

        // ---- score modifiers and masks (on tiles some row does not wholly see) ------------------------------------
        const bool tile_needs_mask = !(last.begin <= n0 && first.end >= n0 + T::kBlockN);
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
            kvc_prepare_scores<T::kNTiles>(acc_s[mt], p, row_pairs[mt], n0 + warp_key0, tig, seq.seqlen_k,
                                           transform_scores, tile_needs_mask, softcap_in);

        // ---- online softmax ------------------------------------------------------------------------------------------
        online_softmax<T>(acc_s, acc_o, row_max, row_sum, exp2_mult);

        ptx::cp_async_wait<1>();
        __syncthreads();  // V(n_tile) landed (K(n_tile + 1) may still be in flight)

        // ---- O += P V ------------------------------------------------------------------------------------------------
        accumulate_pv<T>(acc_o, acc_s, sV + warp_key0 * T::kStride, lane);
    }

    // ---- epilogue ------------------------------------------------------------------------------------------------------
    ptx::cp_async_wait<0>();
    __syncthreads();  // every warp is done with Q, K, V
    const bool partial = plan.num_splits > 1;
    auto partial_row = [&](int packed) {  // this split's row of the partial results
        return ((int64_t(split) * p.batch + b) * p.nheads + head_of(packed)) * p.seqlen_q + token_of(packed);
    };
    if constexpr (T::kWarpsSplitKeys) {
        merge_key_slices<T>(acc_o, row_max, row_sum, exp2_mult, reinterpret_cast<float*>(sK), warp, lane, tid,
                            [&](int r, int c0, const auto& cols, bool empty, float lse_natural) {
            constexpr int kSegCols = sizeof(cols) / sizeof(float);  // cols: const float (&)[kSegCols]
            const int packed = m0 + r;
            const float lse = empty ? (partial ? -INFINITY : INFINITY) : lse_natural;
            const bool lse_writer = c0 == 0 && r < rows;
            if (partial) {
                // A split that saw no key leaves O = 0 and LSE = -inf: the combine gives it weight 0.
                if (r < rows) {
                    float* o = plan.o_accum + partial_row(packed) * p.head_dim_v + c0;
#pragma unroll
                    for (int c = 0; c < kSegCols; c += 4)
                        if (c0 + c < p.head_dim_v)
                            *reinterpret_cast<float4*>(o + c) = make_float4(cols[c], cols[c + 1], cols[c + 2], cols[c + 3]);
                }
                if (lse_writer) plan.lse_accum[partial_row(packed)] = lse;
            } else {
#pragma unroll
                for (int c = 0; c < kSegCols; c += 2)
                    ptx::st_shared_32(ptx::smem_addr(sQ + r * T::kStride + c0 + c), ptx::pack2(cols[c], cols[c + 1], Elem()));
                if (p.softmax_lse && lse_writer)
                    p.softmax_lse[b * p.lse_batch_stride + head_of(packed) * p.lse_head_stride + token_of(packed)] = lse;
            }
        });
    } else {
        const float max_to_natural = exp2_mult * kLn2;
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float sum = ptx::quad_sum(row_sum[mt][half]);
                const bool empty = !(sum > 0.f);
                const float inv = empty ? 0.f : __fdividef(1.f, sum);
                const int local = warp_row0 + mt * 16 + group + 8 * half;
                const int packed = m0 + local;
                const float lse = empty ? (partial ? -INFINITY : INFINITY) : row_max[mt][half] * max_to_natural + __logf(sum);
                if (partial) {
                    // A split that saw no key leaves O = 0 and LSE = -inf: the combine gives it weight 0.
                    if (local < rows) {
                        const int64_t row_index = partial_row(packed);
                        float* o = plan.o_accum + row_index * p.head_dim_v;
#pragma unroll
                        for (int dt = 0; dt < T::kDTiles; ++dt) {
                            const int col = dt * 8 + 2 * tig;
                            if (col < p.head_dim_v) {
                                o[col] = acc_o[mt][dt][2 * half] * inv;
                                o[col + 1] = acc_o[mt][dt][2 * half + 1] * inv;
                            }
                        }
                        if (tig == 0) plan.lse_accum[row_index] = lse;
                    }
                } else {
#pragma unroll
                    for (int dt = 0; dt < T::kDTiles; ++dt)
                        ptx::st_shared_32(ptx::smem_addr(sQ + local * T::kStride + dt * 8 + 2 * tig),
                                          ptx::pack2(acc_o[mt][dt][2 * half] * inv, acc_o[mt][dt][2 * half + 1] * inv,
                                                     Elem()));
                    if (p.softmax_lse && tig == 0 && local < rows)
                        p.softmax_lse[b * p.lse_batch_stride + head_of(packed) * p.lse_head_stride + token_of(packed)] = lse;
                }
            }
    }
    if (!partial) {
        __syncthreads();
        Elem* out = static_cast<Elem*>(p.out) + b * p.out_batch_stride;
        store_rows<T::kBlockM, T::kHeadDim, T::kThreads>(
            [&](int r) { return out + token_of(m0 + r) * p.out_row_stride + head_of(m0 + r) * p.out_head_stride; }, sQ,
            rows, p.head_dim_v, tid);
    }
}

}  // namespace flashattn::kernels
