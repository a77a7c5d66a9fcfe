// The Ampere-class forward kernel (mma.sync; runs on sm_80 and newer).
//
// One thread block computes a tile of kBlockM query rows of one (sequence, head):
//   Q tile stays in shared memory; K and V tiles of kBlockN keys stream through shared memory with cp.async, the
//   load of V(j) overlapping S = Q K(j)^T and the load of K(j+1) overlapping O += P V(j);
//   each warp owns kBlockM / kWarps rows: S and O live in its registers, and the softmax is online (running max and
//   sum per row, in exp2 with the softmax scale folded into one multiply);
//   P goes from the S accumulators straight into the A operand of the PV product (the C layout of two n8 tiles is
//   the A layout of one k16 step), never through shared memory.
// Run-time features (masks, softcap, ALiBi, dropout, varlen, GQA) are read from AttnParams; their branches are
// uniform across the block and taken once per K/V tile, outside the mma loops. Masks are applied only on tiles
// that cross a mask edge; tiles no row can see are not visited. K/V tiles wholly inside the sequence and head dim
// (all but the last) are copied unpredicated from running pointers; the feature branches recompute their per-row
// values rather than keeping them live through the loop (no spills at any head dim, sm_80 and sm_90a).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/mask.h"
#include "common/numeric.h"
#include "common/params.h"
#include "common/philox.h"
#include "kernels/common/ptx.cuh"
#include "kernels/common/seq_slice.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm80/warp_tiles.cuh"

namespace flashattn::kernels {

template <typename Elem_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, bool kQInRegs_,
          bool kSwizzled_ = false>
struct FwdTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;  // compiled bucket: q/k/v head dims up to this are zero-padded
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kWarps = kWarps_;
    // Each warp keeps its Q fragments in registers for the whole block (where the registers allow; bench/NOTES.md).
    static constexpr bool kQInRegs = kQInRegs_;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kRowsPerWarp = kBlockM / kWarps;
    static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles of each warp
    static constexpr int kNTiles = kBlockN / 8;        // n8 tiles of S
    static constexpr int kDTiles = kHeadDim / 8;       // n8 tiles of O
    static constexpr int kQkSteps = kHeadDim / 16;     // k16 steps of Q K^T
    static constexpr int kPvSteps = kBlockN / 16;      // k16 steps of P V
    // The shared-memory layout of the Q, K, V (and O) tiles: rows padded by 16 bytes, or unpadded with their chunks
    // swizzled (tile_io.cuh), which lets a warp's copy of 128-byte row pieces write whole shared-memory lines.
    static constexpr bool kSwizzled = kSwizzled_;
    using Row = std::conditional_t<kSwizzled, SmemSwizzledRow<kHeadDim>, SmemRow<kHeadDim>>;
    static constexpr int kStride = Row::kStride;
    static constexpr int kSmemElems = (kBlockM + 2 * kBlockN) * kStride;  // Q, K, V (one buffer each)
    static constexpr int kSmemBytes = kSmemElems * 2;
    static_assert(kRowsPerWarp % 16 == 0, "each warp owns whole m16 tiles");
    static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "tiles are whole k16 steps");
};

// A K or V tile that lies wholly inside the sequence and the head dim (every tile but a sequence's last, at the
// compiled head dim): unpredicated 16-byte copies. 8 threads share a row, each copying the chunks c, c + 64, ...
// elements of it, so a thread's copies of one row differ by immediate offsets in both address spaces; rows advance
// kThreads / 8 at a time. `src` is this thread's first chunk of the tile (the tile's row 0 + row_in_pass * stride +
// col), `dst` its shared-memory address (row_in_pass * kStride + col). Up to head dim 128, and in the swizzled layout:
// at 256 in the padded layout (64 x 64 tiles, 16 copies a thread a tile) it measured 9-14% slower than the predicated
// copy (interleaved A/B on an H100, bench/NOTES.md), where at 64 and 128 it is 2-13% faster.
template <class T>
struct FullTileCopy {
    using Row = typename T::Row;
    static constexpr int kChunks = Row::kChunks;
    static constexpr bool kEnabled = kChunks % 8 == 0 && T::kThreads % 8 == 0 && T::kBlockN % (T::kThreads / 8) == 0 &&
                                     (T::kHeadDim <= 128 || T::kSwizzled);
    static constexpr int kRowsPerPass = T::kThreads / 8;
    static constexpr int kPasses = T::kBlockN / kRowsPerPass;
    static constexpr int kColSteps = kChunks / 8;
    // In the swizzled layout chunk c + 8j of a row sits 8j chunks after chunk c (the swizzle permutes within groups
    // of 8), and rows kRowsPerPass apart share their permutation: the immediate offsets hold there too.
    static_assert(!kEnabled || kRowsPerPass % Row::kRowPeriod == 0, "passes keep the thread's chunk position");
    __device__ static __forceinline__ int row(int tid) { return tid / 8; }
    __device__ static __forceinline__ int col(int tid) { return (tid % 8) * kChunkElems; }
    // This thread's first chunk in a shared-memory tile.
    __device__ static __forceinline__ uint32_t dst(const typename T::Elem* tile, int tid) {
        return ptx::smem_addr(tile + Row::offset(row(tid), col(tid), row(tid) % 8));
    }
    // The shared-memory address of this thread's copy j of pass i, from its first (dst).
    __device__ static __forceinline__ uint32_t dst_at(uint32_t dst, int i, int j) {
        return dst + (i * kRowsPerPass * T::kStride + j * 8 * kChunkElems) * 2;
    }
    __device__ static __forceinline__ void copy(uint32_t dst, const typename T::Elem* src, int64_t row_stride) {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
            const typename T::Elem* s = src + i * kRowsPerPass * row_stride;
#pragma unroll
            for (int j = 0; j < kColSteps; ++j)
                asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst_at(dst, i, j)),
                             "l"(s + j * 8 * kChunkElems));
        }
    }
    // The other tiles in the swizzled layout (a sequence's last, or columns past the head dim): the same copies,
    // zero-filling the chunks past valid_rows or valid_cols (`any` is a readable address for their unused source).
    // The generic chunk-by-chunk copy would do there, but its per-chunk addresses are loop invariants the compiler
    // keeps in registers through the whole main loop (some 25 at hd256), starving the products.
    static constexpr bool kPartial = kEnabled && T::kSwizzled;
    __device__ static __forceinline__ void copy_partial(uint32_t dst, const typename T::Elem* src,
                                                        const typename T::Elem* any, int64_t row_stride,
                                                        int valid_rows, int valid_cols, int tid) {
        const int r0 = row(tid), c0 = col(tid);
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
            const typename T::Elem* s = src + i * kRowsPerPass * row_stride;
            const bool row_valid = r0 + i * kRowsPerPass < valid_rows;
#pragma unroll
            for (int j = 0; j < kColSteps; ++j) {
                const bool valid = row_valid && c0 + j * 8 * kChunkElems < valid_cols;
                ptx::cp_async_16(dst_at(dst, i, j), valid ? s + j * 8 * kChunkElems : any, valid);
            }
        }
    }
};

template <class T>
__global__ void __launch_bounds__(T::kThreads) fwd_kernel(const AttnParams p) {
    using Elem = typename T::Elem;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    Elem* sQ = reinterpret_cast<Elem*>(smem_bytes);
    Elem* sK = sQ + T::kBlockM * T::kStride;
    Elem* sV = sK + T::kBlockN * T::kStride;

    // With a causal mask later row blocks see more keys. Blocks start in blockIdx.x order, so the heaviest get the
    // lowest indices: longest first, leaving the short ones to fill the last wave.
    const int m_block = p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    const int b = blockIdx.y, h = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;  // mma fragment coordinates

    const SeqSlice seq = seq_slice(p, b);
    const int m0 = m_block * T::kBlockM;
    if (m0 >= seq.seqlen_q) return;  // varlen: this sequence is shorter than the grid
    const int rows = min(T::kBlockM, seq.seqlen_q - m0);
    const int hk = h / (p.nheads / p.nheads_k);

    const Elem* q = static_cast<const Elem*>(p.q) + b * p.q_batch_stride + (seq.q_row0 + m0) * p.q_row_stride +
                    h * p.q_head_stride;
    const Elem* k = static_cast<const Elem*>(p.k) + b * p.k_batch_stride + seq.k_row0 * p.k_row_stride +
                    hk * p.k_head_stride;
    const Elem* v = static_cast<const Elem*>(p.v) + b * p.v_batch_stride + seq.k_row0 * p.v_row_stride +
                    hk * p.v_head_stride;
    Elem* out = static_cast<Elem*>(p.out) + b * p.out_batch_stride + (seq.q_row0 + m0) * p.out_row_stride +
                h * p.out_head_stride;

    // Keys this block visits: the visible range only grows with the row, so the first and last rows bound it.
    const KeyRange first = visible_keys(m0, seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right);
    const KeyRange last = visible_keys(m0 + rows - 1, seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right);
    const int n_tile_begin = static_cast<int>(first.begin / T::kBlockN);
    const int n_tile_end = last.end > first.begin ? static_cast<int>((last.end + T::kBlockN - 1) / T::kBlockN)
                                                  : n_tile_begin;
    // Tiles [nomask_begin, nomask_end) are seen whole by every row of the block (first and last bound the rows'
    // visible ranges), so they take no mask: n0 >= last.begin and n0 + kBlockN <= first.end.
    const int nomask_begin = static_cast<int>((last.begin + T::kBlockN - 1) / T::kBlockN);
    const int nomask_end = static_cast<int>(first.end / T::kBlockN);

    // Per-thread state: S and O accumulators, running row max (in score units) and partial row sums.
    float acc_o[T::kMTiles][T::kDTiles][4];
    float row_max[T::kMTiles][2], row_sum[T::kMTiles][2];
    start_rows<T>(acc_o, row_max, row_sum);

    // Run-time score modifiers. With softcap or ALiBi the scores are turned into final natural-log units first;
    // otherwise the raw q.k scores are kept and the softmax scale is folded into the exp2 multiplier.
    const bool transform_scores = p.softcap > 0.f || p.alibi_slopes != nullptr;
    const float exp2_mult = transform_scores ? kLog2e : p.scale_log2;
    const float softcap_in = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
    const float alibi_slope = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
    const bool dropout = p.dropout_p > 0.f;
    const uint32_t batch_head = static_cast<uint32_t>(b) * p.nheads + h;

    const int warp_row0 = warp * T::kRowsPerWarp;  // first row of this warp within the block
    // The feature branches below derive per-row values from thread_row0 through opaque_row() (an empty asm volatile
    // the compiler cannot hoist): hoisted out of the loop, those values would stay live through the whole main loop
    // and push the allocator into spilling.
    const int thread_row0 = m0 + warp_row0 + group;  // sequence row of this thread's first mma row
    auto opaque_row = [&]() {
        int r = thread_row0;
        asm volatile("" : "+r"(r));
        return r;
    };

    // K and V tiles wholly inside the sequence and the head dim (all but the last, at the compiled head dim) are
    // copied unpredicated from running per-thread pointers (FullTileCopy); the others zero-fill through
    // load_tile_async. k_next / v_next: this thread's first chunk of the next K / V tile to load.
    using Copy = FullTileCopy<T>;
    const int k_full_end = p.head_dim == T::kHeadDim ? seq.seqlen_k / T::kBlockN : 0;
    const int v_full_end = p.head_dim_v == T::kHeadDim ? seq.seqlen_k / T::kBlockN : 0;
    const int64_t k_tile_stride = int64_t(T::kBlockN) * p.k_row_stride;
    const int64_t v_tile_stride = int64_t(T::kBlockN) * p.v_row_stride;
    const Elem* k_next = k + (int64_t(n_tile_begin) * T::kBlockN + Copy::row(tid)) * p.k_row_stride + Copy::col(tid);
    const Elem* v_next = v + (int64_t(n_tile_begin) * T::kBlockN + Copy::row(tid)) * p.v_row_stride + Copy::col(tid);
    const uint32_t k_dst = Copy::dst(sK, tid);
    const uint32_t v_dst = Copy::dst(sV, tid);
    auto load_k = [&](int n_tile) {
        if (Copy::kEnabled && n_tile < k_full_end)
            Copy::copy(k_dst, k_next, p.k_row_stride);
        else if (Copy::kPartial)
            Copy::copy_partial(k_dst, k_next, k, p.k_row_stride, seq.seqlen_k - n_tile * T::kBlockN, p.head_dim, tid);
        else
            load_tile_async<T::kBlockN, T::kHeadDim, T::kThreads, typename T::Row>(
                sK, k + int64_t(n_tile) * T::kBlockN * p.k_row_stride, p.k_row_stride,
                seq.seqlen_k - n_tile * T::kBlockN, p.head_dim, tid);
        k_next += k_tile_stride;
    };
    auto load_v = [&](int n_tile) {
        if (Copy::kEnabled && n_tile < v_full_end)
            Copy::copy(v_dst, v_next, p.v_row_stride);
        else if (Copy::kPartial)
            Copy::copy_partial(v_dst, v_next, v, p.v_row_stride, seq.seqlen_k - n_tile * T::kBlockN, p.head_dim_v, tid);
        else
            load_tile_async<T::kBlockN, T::kHeadDim, T::kThreads, typename T::Row>(
                sV, v + int64_t(n_tile) * T::kBlockN * p.v_row_stride, p.v_row_stride,
                seq.seqlen_k - n_tile * T::kBlockN, p.head_dim_v, tid);
        v_next += v_tile_stride;
    };

    using Row = typename T::Row;
    load_tile_async<T::kBlockM, T::kHeadDim, T::kThreads, Row>(sQ, q, p.q_row_stride, rows, p.head_dim, tid);
    if (n_tile_begin < n_tile_end) load_k(n_tile_begin);
    ptx::cp_async_commit();

    // Q is read by every K tile. With kQInRegs each warp keeps its rows' A fragments in registers rather than
    // re-reading them from shared memory per tile (a third of the main loop's shared-memory reads).
    // warp_row0 is a multiple of 16, so the lane's row keeps its residue mod 8 (the swizzle's key).
    const int q_row = warp_row0 + lane % 16, q_col = (lane / 16) * 8;  // the lane's row and column
    const uint32_t q_lane = ldmatrix_lane<Row>(sQ, q_row, q_col);
    auto load_q_frag = [&](uint32_t (&a)[4], int mt, int ks) {
        ptx::ldmatrix_x4(a, ldmatrix_addr<Row>(sQ, q_lane, q_row, q_col, mt * 16, ks * 16));
    };
    uint32_t q_frag[T::kQInRegs ? T::kMTiles : 1][T::kQInRegs ? T::kQkSteps : 1][4];
    if constexpr (T::kQInRegs) {
        ptx::cp_async_wait<0>();
        __syncthreads();  // Q landed
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
            for (int ks = 0; ks < T::kQkSteps; ++ks) load_q_frag(q_frag[mt][ks], mt, ks);
    }

    for (int n_tile = n_tile_begin; n_tile < n_tile_end; ++n_tile) {
        const int n0 = n_tile * T::kBlockN;
        ptx::cp_async_wait<0>();
        __syncthreads();  // K(n_tile) and Q landed; every warp is done reading V(n_tile - 1)
        load_v(n_tile);
        ptx::cp_async_commit();

        // ---- S = Q K^T -------------------------------------------------------------------------------------------
        float acc_s[T::kMTiles][T::kNTiles][4];
        scores_tile<T>(acc_s, sK, lane, [&](uint32_t(&a)[4], int mt, int ks) {
            if constexpr (T::kQInRegs) {
#pragma unroll
                for (int i = 0; i < 4; ++i) a[i] = q_frag[mt][ks][i];
            } else {
                load_q_frag(a, mt, ks);
            }
        });

        // ---- score modifiers and masks (block-uniform branches) ---------------------------------------------------
        // Element i of acc_s[mt][nt] is row warp_row0 + mt*16 + group + 8*(i/2), key n0 + nt*8 + 2*tig + i%2.
        if (transform_scores) {
            const int diag0 = opaque_row() + seq.seqlen_k - seq.seqlen_q;
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
                for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        float s = acc_s[mt][nt][i];
                        s = p.softcap > 0.f ? p.softcap * ptx::tanh_fast(s * softcap_in) : s * p.scale;
                        // In 32-bit arithmetic: the distance of key col from the row's diagonal, row + seqlen_k -
                        // seqlen_q - col, is far below 2^31 in magnitude.
                        const int diag = diag0 + mt * 16 + 8 * (i / 2);
                        const int dist = diag - (n0 + nt * 8 + 2 * tig + i % 2);
                        acc_s[mt][nt][i] = s + alibi_bias_at(alibi_slope, dist);
                    }
        }
        const bool tile_needs_mask = n_tile < nomask_begin || n_tile >= nomask_end;
        if (tile_needs_mask) {
            const int row0 = opaque_row();
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int row = row0 + mt * 16 + 8 * half;
                    const KeyRange r = visible_keys(row, seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right);
                    // 0 <= begin, end < seqlen_k + kBlockM (rows past seqlen_q included): the range fits 32 bits.
                    // Taken relative to the thread's first column n0 + 2 * tig, so each test compares a constant.
                    const int begin = static_cast<int>(r.begin) - n0 - 2 * tig;
                    const int end = static_cast<int>(r.end) - n0 - 2 * tig;
#pragma unroll
                    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int col = nt * 8 + j;
                            if (col < begin || col >= end) acc_s[mt][nt][2 * half + j] = -INFINITY;
                        }
                }
        }

        // ---- online softmax: P = exp2(S * mult - max * mult), rescale O and the row sums ---------------------------
        online_softmax<T>(acc_s, acc_o, row_max, row_sum, exp2_mult);

        // ---- dropout: zero the dropped probabilities (kept ones are scaled once, at the end) ---------------------
        if (dropout) {
            const uint32_t row0 = opaque_row();
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const uint32_t row = row0 + mt * 16 + 8 * half;
                    // One Philox draw at a time (a rolled loop), collecting the dropped columns as bits: unrolled,
                    // the draws' registers would be live together and make the allocator spill in the hot loop.
                    static_assert(2 * T::kNTiles <= 64, "dropped-column bits fit 64 bits");
                    uint64_t dropped = 0;
#pragma unroll 1
                    for (int nt = 0; nt < T::kNTiles; ++nt) {
                        const uint32_t col_block = (n0 + nt * 8) / kDropoutColsPerDraw;
                        const Philox4 bits = dropout_bits(p.seed, p.offset, batch_head, row, col_block);
#pragma unroll
                        for (int j = 0; j < 2; ++j)
                            if (dropout_value(bits, 2 * tig + j) >= p.dropout_keep_threshold)
                                dropped |= uint64_t(1) << (2 * nt + j);
                    }
#pragma unroll
                    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
                        for (int j = 0; j < 2; ++j)
                            if ((dropped >> (2 * nt + j)) & 1) acc_s[mt][nt][2 * half + j] = 0.f;
                }
        }

        ptx::cp_async_wait<0>();
        __syncthreads();  // V(n_tile) landed; every warp is done reading K(n_tile)
        if (n_tile + 1 < n_tile_end) load_k(n_tile + 1);
        ptx::cp_async_commit();

        // ---- O += P V ------------------------------------------------------------------------------------------------
        accumulate_pv<T>(acc_o, acc_s, sV, lane);
    }

    // ---- epilogue: normalise, write O through shared memory (16-byte stores) and the LSE ------------------------------
    ptx::cp_async_wait<0>();
    __syncthreads();  // every warp is done with Q, K, V: reuse the Q tile for O
    float* lse = p.softmax_lse ? p.softmax_lse + b * p.lse_batch_stride + h * p.lse_head_stride + seq.q_row0 + m0
                               : nullptr;
    const float max_to_natural = exp2_mult * kLn2;  // score units -> natural log
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float sum = ptx::quad_sum(row_sum[mt][half]);
            const bool empty = !(sum > 0.f);  // saw no key: output 0, LSE +inf
            const float inv = empty ? 0.f : __fdividef(p.dropout_scale, sum);
            const int row = warp_row0 + mt * 16 + group + 8 * half;
#pragma unroll
            for (int dt = 0; dt < T::kDTiles; ++dt)
                ptx::st_shared_32(ptx::smem_addr(sQ + Row::offset(row, dt * 8, group) + 2 * tig),
                                  ptx::pack2(acc_o[mt][dt][2 * half] * inv, acc_o[mt][dt][2 * half + 1] * inv, Elem()));
            if (lse && tig == 0 && row < rows)
                lse[row] = empty ? INFINITY : row_max[mt][half] * max_to_natural + __logf(sum);
        }
    __syncthreads();
    store_tile<T::kBlockM, T::kHeadDim, T::kThreads, Row>(out, sQ, p.out_row_stride, rows, p.head_dim_v, tid);
}

}  // namespace flashattn::kernels
