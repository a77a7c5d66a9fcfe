// The Ampere-class backward kernel (mma.sync; sm_80 and newer).
//
// One thread block of 8 warps owns a tile of kBlockN keys of one (sequence, kv head) and walks every query row that
// can see it (all query heads of the GQA group, kBlockM rows at a time). For each query tile it
//   recomputes S^T = K Q^T and dP^T = V dO^T,
//   forms P^T = exp(S - LSE) and dS^T = P^T * (dP^T - D) element-wise and stages both in shared memory,
//   accumulates dV += P^T dO and dK += dS^T Q in registers,
//   and adds dQ += dS K into an fp32 accumulator in global memory (atomics; see below for determinism).
// Each of the three phases spreads its output over the 8 warps as a 2-D grid of warp tiles (BwdTraits): a warp
// tile of r x c elements reads 4096/r + 4096/c bytes of shared memory per mma, so tiles are made as square as the
// registers allow (bench/NOTES.md has the measurements and what limits the kernel now).
// dK, dV are written once per key tile, so GQA needs no atomics for them. A pre-pass computes D = rowsum(dO * O) and
// zeroes the dQ accumulator; a post-pass scales and converts dQ (bwd_pre_post.cuh).
//
// Determinism: with p.deterministic the grid holds gridDim.x "splits", each looping over key tiles
// split, split + gridDim.x, ... and adding into its own copy of the dQ accumulator; the values a dQ element receives
// in a copy come from one block, in program order, and the post-pass sums the copies in a fixed order.
#pragma once

#include <climits>
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
#include "kernels/sm80/bwd_plan.h"

namespace flashattn::kernels {

// kWarpsKeysS, kWarpsKeysKV, kWarpsRowsQ: how many warps split the key (resp. query-row) side of each phase's
// output; the other side is split by 8 / that.
template <typename Elem_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarpsKeysS_, int kWarpsKeysKV_,
          int kWarpsRowsQ_>
struct BwdTraits {
    using Elem = Elem_;
    static constexpr int kWarpsKeysS = kWarpsKeysS_;
    static constexpr int kWarpsKeysKV = kWarpsKeysKV_;
    static constexpr int kWarpsRowsQ = kWarpsRowsQ_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = kBlockM_;  // query rows per step
    static constexpr int kBlockN = kBlockN_;  // keys per block
    static constexpr int kWarps = 8;
    static constexpr int kThreads = kWarps * 32;
    // Phase S: S^T and dP^T, kBlockN keys x kBlockM query columns.
    static constexpr int kSKeys = kBlockN / kWarpsKeysS;
    static constexpr int kSMTiles = kSKeys / 16;
    static constexpr int kSCols = kBlockM / (kWarps / kWarpsKeysS);
    static constexpr int kSTiles = kSCols / 8;
    // Phase KV: dK and dV, kBlockN keys x kHeadDim.
    static constexpr int kKVKeys = kBlockN / kWarpsKeysKV;
    static constexpr int kKVMTiles = kKVKeys / 16;
    static constexpr int kKVCols = kHeadDim / (kWarps / kWarpsKeysKV);
    static constexpr int kKVTiles = kKVCols / 8;
    // Phase Q: dQ, kBlockM query rows x kHeadDim.
    static constexpr int kQRows = kBlockM / kWarpsRowsQ;
    static constexpr int kQMTiles = kQRows / 16;
    static constexpr int kQCols = kHeadDim / (kWarps / kWarpsRowsQ);
    static constexpr int kQTiles = kQCols / 8;

    // Where a step issues the copies of the next query tile (with two stages): right after the first product, or
    // after the dV product. Measured (interleaved A/B on an H100, bench/NOTES.md): late wins above hd64 (hd128 +0.3 to
    // +3.6%, hd256 +3 to +6%; early, the profile had the instructions after the burst of copies, 16 a thread at
    // hd256, waiting for room in the load/store queue); early wins at hd64 (late -3 to -5%; its 128-row tiles make
    // short steps, likely leaving the copies too little time to land).
    static constexpr bool kNextTileAfterDv = kHeadDim > 64;
    // At hd256 the next query tile's copies go out in parts of kCopyPartRows rows, one part per 16-row step
    // of the dV product, rather than in one burst after it. Measured (interleaved A/B on an H100): hd256 +1 to +3%;
    // at hd128 it lost 3 to 8% (its short dV steps), so the smaller head dims copy in one burst.
    static constexpr int kCopyPartRows = kHeadDim == 256 ? 16 : kBlockM_;
    static constexpr int kCopyParts = kBlockM_ / kCopyPartRows;
    static constexpr int kStride = SmemRow<kHeadDim>::kStride;  // K and V rows (padded)
    // Q and dO rows: swizzled where the head dim allows (tile_io.cuh), since they are copied every step.
    using QRow = std::conditional_t<kHeadDim == 192, SmemSwizzledRow<kHeadDim>, SmemRow<kHeadDim>>;
    static constexpr int kQStride = QRow::kStride;
    static_assert(kCopyPartRows % QRow::kRowPeriod == 0, "a part of a swizzled tile starts on a whole swizzle period");
    static constexpr int kPStride = kBlockM + kRowPadElems;  // P^T / dS^T rows: odd number of 16-byte chunks
    // Shared memory: K, V, P^T, dS^T, then `stages` copies of (Q, dO) and of (LSE, D). Two stages let query tile
    // i + 1 load during tile i; a GPU with too little shared memory for two runs with one.
    static constexpr int kFixedElems = 2 * kBlockN * kStride + 2 * kBlockN * kPStride;
    static constexpr int kStageElems = 2 * kBlockM * kQStride;
    static_assert(kFixedElems * 2 % 128 == 0 && kBlockM * kQStride * 2 % 128 == 0,
                  "Q and dO tiles start on 128-byte boundaries (the swizzle's bank groups)");
    static constexpr int smem_bytes(int stages) {
        return (kFixedElems + stages * kStageElems) * 2 + stages * 2 * kBlockM * int(sizeof(float));
    }
    static_assert(kSKeys % 16 == 0 && kKVKeys % 16 == 0 && kQRows % 16 == 0, "warp tiles are whole m16 tiles");
    static_assert(kSTiles % 2 == 0 && kKVTiles % 2 == 0 && kQTiles % 2 == 0, "n8 tiles come in ldmatrix pairs");
};

static __device__ __forceinline__ int clamp_to_int(int64_t v) {
    return static_cast<int>(v < INT_MIN ? INT_MIN : v > INT_MAX ? INT_MAX : v);
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) bwd_kernel(const AttnParams p, float* dq_accum,
                                                             int64_t dq_accum_split_stride, const float* softmax_d,
                                                             int q_stages) {
    using Elem = typename T::Elem;
    using QRow = typename T::QRow;
    constexpr bool kSwizzledQ = QRow::kRowPeriod > 1;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    Elem* sK = reinterpret_cast<Elem*>(smem_bytes);
    Elem* sV = sK + T::kBlockN * T::kStride;
    Elem* sPt = sV + T::kBlockN * T::kStride;    // P^T (dropout applied), kBlockN x kBlockM
    Elem* sdSt = sPt + T::kBlockN * T::kPStride;  // dS^T
    Elem* sQ_stages = sdSt + T::kBlockN * T::kPStride;  // [q_stages][kBlockM][kQStride]
    Elem* sdO_stages = sQ_stages + q_stages * T::kBlockM * T::kQStride;
    float* sLse_stages = reinterpret_cast<float*>(sdO_stages + q_stages * T::kBlockM * T::kQStride);  // LSE
    float* sD_stages = sLse_stages + q_stages * T::kBlockM;

    const int b = blockIdx.y, hk = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    // This warp's tiles in the three phases.
    const int s_key0 = (warp % T::kWarpsKeysS) * T::kSKeys;     // phase S: keys within the key tile
    const int s_col0 = (warp / T::kWarpsKeysS) * T::kSCols;     //          query columns
    const int kv_key0 = (warp % T::kWarpsKeysKV) * T::kKVKeys;  // phase KV: keys
    const int kv_col0 = (warp / T::kWarpsKeysKV) * T::kKVCols;  //           head-dim columns
    const int q_row0 = (warp % T::kWarpsRowsQ) * T::kQRows;     // phase Q: query rows
    const int q_col0 = (warp / T::kWarpsRowsQ) * T::kQCols;     //          head-dim columns

    const SeqSlice seq = seq_slice(p, b);
    const int heads_per_group = p.nheads / p.nheads_k;
    // Key rows past seqused_k (varlen) are visited too, so their dK and dV are written as zeros.
    const int n_blocks = (seq.k_rows + T::kBlockN - 1) / T::kBlockN;
    // dQ accumulator rows are (row, head) pairs of kHeadDim floats; a query tile (m0, h) adds (m0 * nheads + h) rows.
    // Their columns are permuted in groups of 16 (bwd_plan.h) so that the four floats a lane holds of a row in two
    // adjacent n8 tiles are consecutive: each reduction adds 16 bytes, at position 4 * tig of a group. This is the
    // thread's first element (row `group`); one 64-bit pointer for the whole kernel.
    const int64_t dq_row_floats = int64_t(p.nheads) * T::kHeadDim;
    const int64_t acc_row0 = accum_row0(p, b, seq.q_row0);  // the sequence's rows of dq_accum (bwd_plan.h)
    static_assert(T::kQCols % kDqAccumColGroup == 0, "a warp's dQ columns are whole column groups");
    float* const dq_thread = dq_accum + (p.deterministic ? blockIdx.x * dq_accum_split_stride : 0) +
                             (acc_row0 + q_row0 + group) * dq_row_floats + q_col0 + accum_col_in_group(2 * tig);

    const bool transform_scores = p.softcap > 0.f || p.alibi_slopes != nullptr;
    const float exp2_mult = transform_scores ? kLog2e : p.scale_log2;
    const float softcap_in = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
    const bool dropout = p.dropout_p > 0.f;
    constexpr int kScoresPerThread = T::kSMTiles * T::kSTiles * 4;
    // One bit per score a thread holds (keep_bits, visible_bits): 32 or 64 of them.
    static_assert(kScoresPerThread <= 64, "one bit per score in a 64-bit word");
    using ScoreBits = std::conditional_t<(kScoresPerThread > 32), uint64_t, uint32_t>;

    for (int n_block = blockIdx.x; n_block < n_blocks; n_block += gridDim.x) {
        const int n0 = n_block * T::kBlockN;
        // The scores this thread holds in phase S (S^T and dP^T accumulators): element (mt, nt, i) is key
        // score_key(mt, i) of the sequence and query row m0 + score_col(nt, i) (mma.sync m16n8 accumulator layout).
        auto score_key = [&](int mt, int i) { return n0 + s_key0 + mt * 16 + group + 8 * (i / 2); };
        auto score_col = [&](int nt, int i) { return s_col0 + nt * 8 + 2 * tig + i % 2; };
        const Elem* k = static_cast<const Elem*>(p.k) + b * p.k_batch_stride + (seq.k_row0 + n0) * p.k_row_stride +
                        hk * p.k_head_stride;
        const Elem* v = static_cast<const Elem*>(p.v) + b * p.v_batch_stride + (seq.k_row0 + n0) * p.v_row_stride +
                        hk * p.v_head_stride;
        const int valid_keys = max(0, min(T::kBlockN, seq.seqlen_k - n0));  // keys to load
        const int stored_keys = min(T::kBlockN, seq.k_rows - n0);            // gradient rows to write
        __syncthreads();  // the previous key tile's epilogue is done with shared memory
        load_tile_async<T::kBlockN, T::kHeadDim, T::kThreads>(sK, k, p.k_row_stride, valid_keys, p.head_dim, tid);
        load_tile_async<T::kBlockN, T::kHeadDim, T::kThreads>(sV, v, p.v_row_stride, valid_keys, p.head_dim_v, tid);
        ptx::cp_async_commit();

        float acc_dk[T::kKVMTiles][T::kKVTiles][4], acc_dv[T::kKVMTiles][T::kKVTiles][4];
#pragma unroll
        for (int mt = 0; mt < T::kKVMTiles; ++mt)
#pragma unroll
            for (int dt = 0; dt < T::kKVTiles; ++dt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc_dk[mt][dt][i] = acc_dv[mt][dt][i] = 0.f;

        const QueryBlocks blocks = query_blocks_for_keys(n0, T::kBlockN, T::kBlockM, seq.seqlen_q, seq.seqlen_k,
                                                         p.window_left, p.window_right);
        const int m_block_begin = blocks.begin, m_block_end = blocks.end;
        const int steps_per_head = m_block_end - m_block_begin;
        const int steps = steps_per_head * heads_per_group;

        // The query tiles that see every key of this key tile, so need no mask: m0 in [mask_free_m0_lo,
        // mask_free_m0_hi]. A tile with rows m0 ... m0 + kBlockM - 1 needs none iff the last row's visible keys
        // (mask.h: visible_keys) begin at or before n0 and the first row's end at or after n0 + kBlockN. The begin and
        // end of a row's range only grow with the row, and when both conditions hold neither range is clamped, so
        // this reads as bounds on m0 (in 64 bits, then clamped to int).
        int mask_free_m0_lo = INT_MAX, mask_free_m0_hi = INT_MIN;  // none
        if (n0 + T::kBlockN <= seq.seqlen_k) {
            const int64_t shift = int64_t(seq.seqlen_k) - seq.seqlen_q;  // row i sits at key position i + shift
            // first row's end = m0 + shift + window_right + 1 >= n0 + kBlockN
            const int64_t lo = p.window_right >= 0 ? n0 + T::kBlockN - 1 - shift - p.window_right : INT_MIN;
            // last row's begin = m0 + kBlockM - 1 + shift - window_left <= n0
            const int64_t hi = p.window_left >= 0 ? n0 - (T::kBlockM - 1) - shift + p.window_left : INT_MAX;
            mask_free_m0_lo = clamp_to_int(lo);
            mask_free_m0_hi = clamp_to_int(hi);
        }

        // Query tile `step` is (head h, rows m0...) with the heads of the group outer and the m-blocks inner; the
        // walk keeps counters rather than dividing by steps_per_head every step.
        struct QueryTile {
            int h, m_block, stage;
        };
        auto next_tile = [&](QueryTile t) {
            if (++t.m_block == m_block_end) {
                t.m_block = m_block_begin;
                ++t.h;
            }
            t.stage = q_stages > 1 ? t.stage ^ 1 : 0;
            return t;
        };
        // Q and dO tiles are full (no zero-filled rows or columns) except the last m-block of a sequence and padded
        // head dims; full tiles take the copy without per-chunk predicates and source selects.
        const bool head_dims_full = p.head_dim == T::kHeadDim && p.head_dim_v == T::kHeadDim;
        // Issue the loads of a query tile into its stage: Q, dO, LSE and D, all asynchronously. `part` selects rows
        // [part, part + 1) * kCopyPartRows of Q and dO; LSE and D go with part 0.
        constexpr int kPartRows = T::kCopyPartRows;
        auto load_query_tile = [&](const QueryTile& t, int part) {
            const int stage = t.stage, h = t.h, m0 = t.m_block * T::kBlockM;
            const int r0 = part * kPartRows;
            Elem* sQ = sQ_stages + stage * T::kBlockM * T::kQStride;
            Elem* sdO = sdO_stages + stage * T::kBlockM * T::kQStride;
            float* sLse = sLse_stages + stage * T::kBlockM;
            float* sD = sD_stages + stage * T::kBlockM;
            const int valid_rows = min(T::kBlockM, seq.seqlen_q - m0);
            const Elem* q = static_cast<const Elem*>(p.q) + b * p.q_batch_stride +
                            (seq.q_row0 + m0 + r0) * p.q_row_stride + h * p.q_head_stride;
            const Elem* dout = static_cast<const Elem*>(p.dout) + b * p.dout_batch_stride +
                               (seq.q_row0 + m0 + r0) * p.dout_row_stride + h * p.dout_head_stride;
            if (valid_rows == T::kBlockM && head_dims_full) {
                load_full_tile_async<kPartRows, T::kHeadDim, T::kThreads, QRow>(sQ + r0 * T::kQStride, q,
                                                                                p.q_row_stride, tid);
                load_full_tile_async<kPartRows, T::kHeadDim, T::kThreads, QRow>(sdO + r0 * T::kQStride, dout,
                                                                                p.dout_row_stride, tid);
            } else {
                load_tile_async<kPartRows, T::kHeadDim, T::kThreads, QRow>(sQ + r0 * T::kQStride, q, p.q_row_stride,
                                                                           valid_rows - r0, p.head_dim, tid);
                load_tile_async<kPartRows, T::kHeadDim, T::kThreads, QRow>(sdO + r0 * T::kQStride, dout,
                                                                           p.dout_row_stride, valid_rows - r0,
                                                                           p.head_dim_v, tid);
            }
            if (part != 0) {
                ptx::cp_async_commit();
                return;
            }
            // LSE and D asynchronously too: a plain load here would hold its warp for a memory round trip while the
            // others wait at the next barrier. Rows past the sequence get LSE +inf (so their P is exactly 0), D 0.
            // One row per thread of the first kBlockM threads (a strided loop would compile to an unrolled loop with
            // remainder handling).
            static_assert(T::kThreads >= T::kBlockM, "one thread per LSE/D row");
            if (tid < T::kBlockM) {
                const int r = tid;
                const int64_t lse_off = b * p.lse_batch_stride + h * p.lse_head_stride + seq.q_row0 + m0;
                if (r < valid_rows) {
                    ptx::cp_async_4(ptx::smem_addr(sLse + r), p.softmax_lse + lse_off + r);
                    ptx::cp_async_4(ptx::smem_addr(sD + r), softmax_d + lse_off + r);
                } else {
                    sLse[r] = INFINITY;
                    sD[r] = 0.f;
                }
            }
            ptx::cp_async_commit();
        };
        // A whole query tile: its parts one after the other.
        auto load_whole_query_tile = [&](const QueryTile& t) {
#pragma unroll
            for (int part = 0; part < T::kCopyParts; ++part) load_query_tile(t, part);
        };
        QueryTile tile{hk * heads_per_group, m_block_begin, 0};
        if (steps > 0) load_whole_query_tile(tile);

        for (int step = 0; step < steps; ++step) {
            const int h = tile.h, m0 = tile.m_block * T::kBlockM, stage = tile.stage;
            const bool has_next = step + 1 < steps;
            const Elem* sQ = sQ_stages + stage * T::kBlockM * T::kQStride;
            const Elem* sdO = sdO_stages + stage * T::kBlockM * T::kQStride;
            const float* sLse = sLse_stages + stage * T::kBlockM;
            const float* sD = sD_stages + stage * T::kBlockM;
            // Dropout: the keep bit of each of this thread's scores, bit e for element e of for_each_score below.
            // Drawn here, in a loop that is not unrolled, rather than at each element: one copy of the Philox rounds
            // (not one per element: the loop must stay in the instruction cache), and while no score is live, so the
            // draws do not push the scores out of registers. Before the barrier, where a warp would otherwise wait.
            ScoreBits keep_bits = 0;
            if (dropout) {
                const uint32_t batch_head = static_cast<uint32_t>(b) * p.nheads + h;
#pragma unroll 1
                for (int e = 0; e < kScoresPerThread; ++e) {
                    const int mt = e / (T::kSTiles * 4), nt = e / 4 % T::kSTiles, i = e % 4;
                    const bool keep = dropout_keep(p.seed, p.offset, batch_head, m0 + score_col(nt, i),
                                                   score_key(mt, i), p.dropout_keep_threshold);
                    keep_bits |= ScoreBits(keep) << e;
                }
            }
            ptx::cp_async_wait<0>();
            __syncthreads();  // this tile landed; every warp is done with the previous step (its stage, P^T, dS^T)

            // ---- phase S: S^T = K Q^T and dP^T = V dO^T (this warp: kSKeys keys x kSCols query columns) ----------
            // One product after the other rather than interleaved: half the operand fragments live at a time, which
            // the registers (dK and dV take half of them) need.
            auto keys_by_rows = [&](float (&acc)[T::kSMTiles][T::kSTiles][4], const Elem* sA, const Elem* sB) {
#pragma unroll
                for (int mt = 0; mt < T::kSMTiles; ++mt)
#pragma unroll
                    for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
                        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
#pragma unroll
                for (int ks = 0; ks < T::kHeadDim / 16; ++ks) {
                    uint32_t a[T::kSMTiles][4];
#pragma unroll
                    for (int mt = 0; mt < T::kSMTiles; ++mt)
                        ptx::ldmatrix_x4(a[mt], ptx::smem_addr(sA + (s_key0 + mt * 16 + lane % 16) * T::kStride +
                                                               ks * 16 + (lane / 16) * 8));
#pragma unroll
                    for (int np = 0; np < T::kSTiles / 2; ++np) {
                        // Rows of Q or dO: row % 8 == lane % 8 (s_col0 and the rest are multiples of 8).
                        uint32_t bb[4];
                        const int row = s_col0 + np * 16 + (lane / 16) * 8 + lane % 8;
                        if constexpr (kSwizzledQ)
                            ptx::ldmatrix_x4(bb, ptx::smem_addr(sB + QRow::offset(row, ks * 16 + ((lane / 8) % 2) * 8,
                                                                                  lane % 8)));
                        else  // the same offset, written so that the compiler folds ks into an immediate
                            ptx::ldmatrix_x4(bb, ptx::smem_addr(sB + row * T::kStride + ks * 16 + ((lane / 8) % 2) * 8));
                        const uint32_t b0[2] = {bb[0], bb[1]}, b1[2] = {bb[2], bb[3]};
#pragma unroll
                        for (int mt = 0; mt < T::kSMTiles; ++mt) {
                            ptx::mma_m16n8k16(acc[mt][2 * np], a[mt], b0, Elem());
                            ptx::mma_m16n8k16(acc[mt][2 * np + 1], a[mt], b1, Elem());
                        }
                    }
                }
            };
            float acc_s[T::kSMTiles][T::kSTiles][4], acc_dp[T::kSMTiles][T::kSTiles][4];
            keys_by_rows(acc_s, sK, sQ);
            // Two stages: the next tile loads into the other one and overlaps the rest of this step, issued here or
            // with the dV product (T::kNextTileAfterDv: after it, or in parts through it, T::kCopyParts); never before
            // the first product, so that the warps leave the barrier straight into tensor work.
            if (!T::kNextTileAfterDv && q_stages > 1 && has_next) load_whole_query_tile(next_tile(tile));
            keys_by_rows(acc_dp, sV, sdO);

            // ---- P^T and dS^T, element-wise; staged in shared memory -------------------------------------------
            // Afterwards acc_s holds P^T (dropout applied) and acc_dp holds dS^T.
            const bool tile_needs_mask = m0 < mask_free_m0_lo || m0 > mask_free_m0_hi;
            // (row, key) is visible iff key < seqlen_k, row < seqlen_q and lo <= key - row <= hi (mask.h in 32 bits).
            const int shift = seq.seqlen_k - seq.seqlen_q;
            const int diff_lo = p.window_left >= 0 ? shift - p.window_left : INT_MIN / 2;
            const int diff_hi = p.window_right >= 0 ? shift + p.window_right : INT_MAX / 2;
            auto visible = [&](int row, int key) {
                // Non-short-circuit &: predicates, not branches.
                return (key < seq.seqlen_k) & (row < seq.seqlen_q) & (key - row >= diff_lo) & (key - row <= diff_hi);
            };
            // f(s, dp, key, mc, e) for every element of this warp's S^T and dP^T tiles (s and dp by reference; key is
            // the key index, mc the column within the query tile, m0 + mc the query row, e the element's bit in
            // keep_bits and visible_bits).
            auto for_each_score = [&](auto&& f) {
#pragma unroll
                for (int mt = 0; mt < T::kSMTiles; ++mt)
#pragma unroll
                    for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
                        for (int i = 0; i < 4; ++i)
                            f(acc_s[mt][nt][i], acc_dp[mt][nt][i], score_key(mt, i), score_col(nt, i),
                              (mt * T::kSTiles + nt) * 4 + i);
            };
            if (!transform_scores && !dropout) {
                // The common case, kept short so the loop stays in the instruction cache: no per-element branches.
                for_each_score([&](float& s, float&, int, int mc, int) {
                    s = ptx::exp2_fast(s * p.scale_log2 - sLse[mc] * kLog2e);
                });
                if (tile_needs_mask) {
                    for_each_score([&](float& s, float&, int key, int mc, int) {
                        if (!visible(m0 + mc, key)) s = 0.f;
                    });
                }
                for_each_score([&](float& s, float& dp, int, int mc, int) { dp = s * (dp - sD[mc]); });
            } else {
                // Softcap, ALiBi or dropout: the general form. The mask goes first, into one bit per score (e as
                // for keep_bits): the element pass then holds one register for it rather than the lengths and window
                // bounds, which would push its many temporaries out of registers.
                ScoreBits visible_bits = ~ScoreBits(0);
                if (tile_needs_mask) {
                    for_each_score([&](float&, float&, int key, int mc, int e) {
                        if (!visible(m0 + mc, key)) visible_bits &= ~(ScoreBits(1) << e);
                    });
                }
                const float alibi_slope = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
                const int alibi_shift = seq.seqlen_k - seq.seqlen_q;  // ALiBi's distance in 32 bits
                for_each_score([&](float& s_acc, float& dp_acc, int key, int mc, int e) {
                    const int row = m0 + mc;
                    float s = s_acc;
                    float dtanh = 1.f;  // d(capped score) / d(scaled score)
                    if (p.softcap > 0.f) {
                        const float t = ptx::tanh_fast(s * softcap_in);
                        s = p.softcap * t;
                        dtanh = 1.f - t * t;
                    } else if (transform_scores) {
                        s *= p.scale;
                    }
                    if (p.alibi_slopes) s += alibi_bias_at(alibi_slope, row + alibi_shift - key);
                    float prob = ptx::exp2_fast(s * exp2_mult - sLse[mc] * kLog2e);
                    if (!((visible_bits >> e) & 1)) prob = 0.f;
                    float dp = dp_acc;
                    float prob_dropped = prob;
                    if (dropout) {
                        const bool keep = (keep_bits >> e) & 1;
                        dp = keep ? dp * p.dropout_scale : 0.f;
                        prob_dropped = keep ? prob * p.dropout_scale : 0.f;
                    }
                    s_acc = prob_dropped;
                    dp_acc = prob * (dp - sD[mc]) * dtanh;
                });
            }
            // P^T and dS^T to shared memory, in the mma.sync accumulator layout: 4 bytes a store, or on sm_90 four
            // 8x8 matrices a store (stmatrix; an m16 tile by two n8 tiles), a quarter of the shared-memory
            // instructions. Measured (interleaved A/B on an H100): stmatrix +1 to +4% above hd64; at hd64 -3 to -6%
            // (ptxas then spilled), so hd64 keeps the 4-byte stores.
#if __CUDA_ARCH__ >= 900
            constexpr bool kStoreMatrices = T::kHeadDim > 64;
#else
            constexpr bool kStoreMatrices = false;
#endif
            if constexpr (kStoreMatrices) {
#if __CUDA_ARCH__ >= 900
#pragma unroll
                for (int mt = 0; mt < T::kSMTiles; ++mt)
#pragma unroll
                    for (int np = 0; np < T::kSTiles / 2; ++np) {
                        const int mat = lane / 8;  // this lane addresses a row of matrix (rows + 8 * (mat % 2), n8 tile)
                        const int off = (s_key0 + mt * 16 + lane % 8 + 8 * (mat % 2)) * T::kPStride + s_col0 +
                                        (2 * np + mat / 2) * 8;
                        auto store4 = [&](Elem* dst, const float (&acc)[T::kSMTiles][T::kSTiles][4]) {
                            const float* lo = acc[mt][2 * np];
                            const float* hi = acc[mt][2 * np + 1];
                            ptx::stmatrix_x4(ptx::smem_addr(dst + off), ptx::pack2(lo[0], lo[1], Elem()),
                                             ptx::pack2(lo[2], lo[3], Elem()), ptx::pack2(hi[0], hi[1], Elem()),
                                             ptx::pack2(hi[2], hi[3], Elem()));
                        };
                        store4(sPt, acc_s);
                        store4(sdSt, acc_dp);
                    }
#endif
            } else {
#pragma unroll
                for (int mt = 0; mt < T::kSMTiles; ++mt)
#pragma unroll
                    for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
                        for (int half = 0; half < 2; ++half) {
                            const int off =
                                (s_key0 + mt * 16 + group + 8 * half) * T::kPStride + s_col0 + nt * 8 + 2 * tig;
                            ptx::st_shared_32(ptx::smem_addr(sPt + off), ptx::pack2(acc_s[mt][nt][2 * half],
                                                                                    acc_s[mt][nt][2 * half + 1], Elem()));
                            ptx::st_shared_32(ptx::smem_addr(sdSt + off),
                                              ptx::pack2(acc_dp[mt][nt][2 * half], acc_dp[mt][nt][2 * half + 1], Elem()));
                        }
            }
            // dQ goes to one pointer per step, at this thread's first row; its other rows are whole accumulator rows
            // further on. Formed here rather than next to the reductions, where its arithmetic would be scheduled
            // into the dQ product, the point of highest register pressure at the large head dims.
            float* const dq_row = dq_thread + (int64_t(m0) * p.nheads + h) * T::kHeadDim;
            __syncthreads();  // P^T and dS^T complete

            // The products in the order dV, dQ, dK, with dQ's reductions a few at a time between the dK products:
            // the tensor cores keep working while the memory system takes them. Issued in one burst, they filled the
            // load/store queue, and the address arithmetic of the later ones waited for registers the earlier ones
            // still held (bench/NOTES.md: 16-byte reductions and the spreading together measured +6% over the burst;
            // the permuted accumulator columns, which made the 16-byte reductions free of shuffles, another +6.5%).
            // A dK/dV operand: this warp's keys x 16 query rows (step ks) of P^T or dS^T.
            auto load_key_rows = [&](uint32_t (&frag)[T::kKVMTiles][4], const Elem* sA, int ks) {
#pragma unroll
                for (int mt = 0; mt < T::kKVMTiles; ++mt)
                    ptx::ldmatrix_x4(frag[mt], ptx::smem_addr(sA + (kv_key0 + mt * 16 + lane % 16) * T::kPStride +
                                                              ks * 16 + (lane / 16) * 8));
            };
            // Its other operand: 16 query rows (step ks) x 16 head-dim columns (pair dp2) of dO or Q, transposed.
            auto load_row_cols = [&](uint32_t (&frag)[4], const Elem* sB, int ks, int dp2) {
                const int row = ks * 16 + ((lane / 8) % 2) * 8 + lane % 8;  // row % 8 == lane % 8
                const int col = kv_col0 + dp2 * 16 + (lane / 16) * 8;
                if constexpr (kSwizzledQ)
                    ptx::ldmatrix_x4_trans(frag, ptx::smem_addr(sB + QRow::offset(row, col, lane % 8)));
                else
                    ptx::ldmatrix_x4_trans(frag, ptx::smem_addr(sB + row * T::kStride + col));
            };

            // ---- phase KV, first: dV += P^T dO (this warp: kKVKeys keys x kKVCols) --------------------------------
            const bool copy_next = T::kNextTileAfterDv && q_stages > 1 && has_next;
            const QueryTile next = next_tile(tile);
#pragma unroll
            for (int ks = 0; ks < T::kBlockM / 16; ++ks) {
                uint32_t pa[T::kKVMTiles][4];
                load_key_rows(pa, sPt, ks);
                if (T::kCopyParts > 1 && copy_next && ks * 16 % kPartRows == 0)
                    load_query_tile(next, ks * 16 / kPartRows);
#pragma unroll
                for (int dp2 = 0; dp2 < T::kKVTiles / 2; ++dp2) {
                    uint32_t ob[4];
                    load_row_cols(ob, sdO, ks, dp2);
                    const uint32_t o0[2] = {ob[0], ob[1]}, o1[2] = {ob[2], ob[3]};
#pragma unroll
                    for (int mt = 0; mt < T::kKVMTiles; ++mt) {
                        ptx::mma_m16n8k16(acc_dv[mt][2 * dp2], pa[mt], o0, Elem());
                        ptx::mma_m16n8k16(acc_dv[mt][2 * dp2 + 1], pa[mt], o1, Elem());
                    }
                }
            }
            if (T::kCopyParts == 1 && copy_next) load_whole_query_tile(next_tile(tile));

            // ---- phase Q: dQ = dS K for this tile (this warp: kQRows rows x kQCols) --------------------------------
            float acc_dq[T::kQMTiles][T::kQTiles][4];
#pragma unroll
            for (int mq = 0; mq < T::kQMTiles; ++mq)
#pragma unroll
                for (int dt = 0; dt < T::kQTiles; ++dt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc_dq[mq][dt][i] = 0.f;
#pragma unroll
            for (int ks = 0; ks < T::kBlockN / 16; ++ks) {
                uint32_t da[T::kQMTiles][4];  // dS (query rows x keys) read transposed out of dS^T
#pragma unroll
                for (int mq = 0; mq < T::kQMTiles; ++mq)
                    ptx::ldmatrix_x4_trans(da[mq],
                                           ptx::smem_addr(sdSt + (ks * 16 + (lane / 16) * 8 + lane % 8) * T::kPStride +
                                                          q_row0 + mq * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
                for (int dp2 = 0; dp2 < T::kQTiles / 2; ++dp2) {
                    uint32_t kb[4];
                    ptx::ldmatrix_x4_trans(kb, ptx::smem_addr(sK + (ks * 16 + ((lane / 8) % 2) * 8 + lane % 8) * T::kStride +
                                                              q_col0 + dp2 * 16 + (lane / 16) * 8));
                    const uint32_t k0[2] = {kb[0], kb[1]}, k1[2] = {kb[2], kb[3]};
#pragma unroll
                    for (int mq = 0; mq < T::kQMTiles; ++mq) {
                        ptx::mma_m16n8k16(acc_dq[mq][2 * dp2], da[mq], k0, Elem());
                        ptx::mma_m16n8k16(acc_dq[mq][2 * dp2 + 1], da[mq], k1, Elem());
                    }
                }
            }
            // Reduction r (of kReds) adds, of m16 tile mq and the n8 tile pair dp2 (a column group), row half `half`
            // (group or group + 8): 16 bytes a lane (the column order at dq_thread). Every row of the tile, unguarded:
            // rows past the sequence land in its padding (bwd_plan.h), so the reductions are straight-line code.
            constexpr int kReds = T::kQMTiles * T::kQTiles;
            auto add_dq = [&](int r) {
                const int mq = r / T::kQTiles, dp2 = r % T::kQTiles / 2, half = r % 2;
                const float* lo = acc_dq[mq][2 * dp2];
                const float* hi = acc_dq[mq][2 * dp2 + 1];
                float* const dst = dq_row + (mq * 16 + 8 * half) * dq_row_floats + dp2 * kDqAccumColGroup;
                ptx::red_add_f32x4(dst, lo[2 * half], lo[2 * half + 1], hi[2 * half], hi[2 * half + 1]);
            };

            // ---- phase KV, second: dK += dS^T Q (this warp: kKVKeys keys x kKVCols), dQ's reductions among it ----
            constexpr int kSlots = T::kBlockM / 16 * (T::kKVTiles / 2);  // (ks, dp2) steps of the product
#pragma unroll
            for (int ks = 0; ks < T::kBlockM / 16; ++ks) {
                uint32_t sa[T::kKVMTiles][4];
                load_key_rows(sa, sdSt, ks);
#pragma unroll
                for (int dp2 = 0; dp2 < T::kKVTiles / 2; ++dp2) {
                    uint32_t qb[4];
                    load_row_cols(qb, sQ, ks, dp2);
                    const uint32_t q0[2] = {qb[0], qb[1]}, q1[2] = {qb[2], qb[3]};
#pragma unroll
                    for (int mt = 0; mt < T::kKVMTiles; ++mt) {
                        ptx::mma_m16n8k16(acc_dk[mt][2 * dp2], sa[mt], q0, Elem());
                        ptx::mma_m16n8k16(acc_dk[mt][2 * dp2 + 1], sa[mt], q1, Elem());
                    }
                    const int slot = ks * (T::kKVTiles / 2) + dp2;  // reductions [slot, slot + 1) * kReds / kSlots
#pragma unroll
                    for (int r = slot * kReds / kSlots; r < (slot + 1) * kReds / kSlots; ++r) add_dq(r);
                    // A fence the compiler does not schedule across (it emits no instruction here): without it the
                    // reductions gathered into a burst again, 5.8% slower.
                    __syncwarp();
                }
            }

            if (q_stages == 1 && has_next) {
                __syncthreads();  // one stage: every warp is done with this tile before the next overwrites it
                load_whole_query_tile(next_tile(tile));
            }
            tile = next_tile(tile);
        }

        // ---- epilogue: dK (times the softmax scale) and dV through shared memory, 16-byte stores --------------------
        ptx::cp_async_wait<0>();
        __syncthreads();  // every warp is done with K and V: reuse them for dK and dV
#pragma unroll
        for (int mt = 0; mt < T::kKVMTiles; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = kv_key0 + mt * 16 + group + 8 * half;
#pragma unroll
                for (int dt = 0; dt < T::kKVTiles; ++dt) {
                    const int c = kv_col0 + dt * 8 + 2 * tig;
                    ptx::st_shared_32(ptx::smem_addr(sK + r * T::kStride + c),
                                      ptx::pack2(acc_dk[mt][dt][2 * half] * p.scale,
                                                 acc_dk[mt][dt][2 * half + 1] * p.scale, Elem()));
                    ptx::st_shared_32(ptx::smem_addr(sV + r * T::kStride + c),
                                      ptx::pack2(acc_dv[mt][dt][2 * half], acc_dv[mt][dt][2 * half + 1], Elem()));
                }
            }
        __syncthreads();
        Elem* dk = static_cast<Elem*>(p.dk) + b * p.dk_batch_stride + (seq.k_row0 + n0) * p.dk_row_stride +
                   hk * p.dk_head_stride;
        Elem* dv = static_cast<Elem*>(p.dv) + b * p.dv_batch_stride + (seq.k_row0 + n0) * p.dv_row_stride +
                   hk * p.dv_head_stride;
        store_tile<T::kBlockN, T::kHeadDim, T::kThreads>(dk, sK, p.dk_row_stride, stored_keys, p.head_dim, tid);
        store_tile<T::kBlockN, T::kHeadDim, T::kThreads>(dv, sV, p.dv_row_stride, stored_keys, p.head_dim_v, tid);
    }
}

}  // namespace flashattn::kernels
