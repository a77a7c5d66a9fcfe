// The Ampere-class backward kernel (mma.sync; sm_80 and newer).
//
// One thread block owns a tile of kBlockN keys of one (sequence, kv head) and walks every query row that can see it
// (all query heads of the GQA group, kBlockM rows at a time). For each query tile it
//   recomputes S^T = K Q^T and dP^T = V dO^T (warps own 16-key rows; with kSplitD = 2 a warp pair shares them,
//   each computing half of the query columns),
//   forms P^T = exp(S - LSE) and dS^T = P^T * (dP^T - D) element-wise and stages both in shared memory,
//   accumulates dV += P^T dO and dK += dS^T Q in registers (each warp: its 16 keys x its share of the head dim),
//   and adds dQ += dS K into an fp32 accumulator in global memory (atomics; see below for determinism).
// dK, dV are written once per key tile, so GQA needs no atomics for them. A pre-pass computes D = rowsum(dO * O) and
// zeroes the dQ accumulator; a post-pass scales and converts dQ (bwd_pre_post.cuh).
//
// Determinism: with p.deterministic the grid holds gridDim.x "splits", each looping over key tiles
// split, split + gridDim.x, ... and adding into its own copy of the dQ accumulator; a thread adds to a given dQ
// element only from one block, in program order, and the post-pass sums the copies in a fixed order.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/mask.h"
#include "common/params.h"
#include "common/philox.h"
#include "kernels/common/ptx.cuh"
#include "kernels/common/seq_slice.cuh"
#include "kernels/common/tile_io.cuh"

namespace flashattn::kernels {

template <typename Elem_, int kHeadDim_, int kBlockM_, int kBlockN_, int kSplitD_>
struct BwdTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = kBlockM_;  // query rows per step
    static constexpr int kBlockN = kBlockN_;  // keys per block
    static constexpr int kSplitD = kSplitD_;  // warps sharing one 16-key row group
    static constexpr int kWarps = (kBlockN / 16) * kSplitD;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kSCols = kBlockM / kSplitD;       // query columns of S^T per warp
    static constexpr int kSTiles = kSCols / 8;             // n8 tiles of S^T per warp
    static constexpr int kDCols = kHeadDim / kSplitD;      // head-dim columns of dK/dV per warp
    static constexpr int kDTiles = kDCols / 8;             // n8 tiles of dK/dV per warp
    static constexpr int kQMTiles = kBlockM / 16;          // m16 tiles of dQ
    static constexpr int kQGroups = kWarps / kQMTiles;     // warps per dQ m-tile
    static constexpr int kQDTiles = kHeadDim / kQGroups / 8;  // n8 tiles of dQ per warp
    static constexpr int kStride = SmemRow<kHeadDim>::kStride;
    static constexpr int kPStride = kBlockM + kRowPadElems;  // P^T / dS^T rows: odd number of 16-byte chunks
    static constexpr int kQStages = 2;  // Q, dO, LSE and D are double-buffered: tile i+1 loads during tile i
    static constexpr int kSmemElems =
        2 * kBlockN * kStride + kQStages * 2 * kBlockM * kStride + 2 * kBlockN * kPStride;
    static constexpr int kSmemBytes = kSmemElems * 2 + kQStages * 2 * kBlockM * sizeof(float);
    static_assert(kSTiles % 2 == 0 && kDTiles % 2 == 0 && kQDTiles % 2 == 0, "n8 tiles come in ldmatrix pairs");
    static_assert(kWarps % kQMTiles == 0, "dQ m-tiles divide the warps");
};

template <class T>
__global__ void __launch_bounds__(T::kThreads) bwd_kernel(const AttnParams p, float* dq_accum,
                                                          int64_t dq_accum_split_stride, const float* softmax_d) {
    using Elem = typename T::Elem;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    Elem* sK = reinterpret_cast<Elem*>(smem_bytes);
    Elem* sV = sK + T::kBlockN * T::kStride;
    Elem* sQ_stages = sV + T::kBlockN * T::kStride;                     // [kQStages][kBlockM][kStride]
    Elem* sdO_stages = sQ_stages + T::kQStages * T::kBlockM * T::kStride;
    Elem* sPt = sdO_stages + T::kQStages * T::kBlockM * T::kStride;     // P^T (dropout applied), kBlockN x kBlockM
    Elem* sdSt = sPt + T::kBlockN * T::kPStride;                        // dS^T
    float* sLse2_stages = reinterpret_cast<float*>(sdSt + T::kBlockN * T::kPStride);  // LSE * log2(e); +inf past end
    float* sD_stages = sLse2_stages + T::kQStages * T::kBlockM;

    const int b = blockIdx.y, hk = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    const int row_group = warp / T::kSplitD, split = warp % T::kSplitD;
    const int n_row0 = row_group * 16;         // this warp's keys within the tile
    const int s_col0 = split * T::kSCols;      // its query columns of S^T
    const int d_col0 = split * T::kDCols;      // its head-dim columns of dK / dV
    const int q_mtile = warp % T::kQMTiles;    // its dQ rows and columns
    const int q_dcol0 = (warp / T::kQMTiles) * (T::kQDTiles * 8);

    const SeqSlice seq = seq_slice(p, b);
    const int heads_per_group = p.nheads / p.nheads_k;
    // Key rows past seqused_k (varlen) are visited too, so their dK and dV are written as zeros.
    const int n_blocks = (seq.k_rows + T::kBlockN - 1) / T::kBlockN;
    float* dq_acc_split = dq_accum + (p.deterministic ? blockIdx.x * dq_accum_split_stride : 0);
    const int64_t acc_row0 = p.is_varlen ? seq.q_row0 : int64_t(b) * p.seqlen_q;  // rows of dq_accum

    const bool transform_scores = p.softcap > 0.f || p.alibi_slopes != nullptr;
    const float exp2_mult = transform_scores ? 1.4426950408889634f : p.scale_log2;
    const float softcap_in = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
    const bool dropout = p.dropout_p > 0.f;

    for (int n_block = blockIdx.x; n_block < n_blocks; n_block += gridDim.x) {
        const int n0 = n_block * T::kBlockN;
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

        float acc_dk[T::kDTiles][4], acc_dv[T::kDTiles][4];
#pragma unroll
        for (int dt = 0; dt < T::kDTiles; ++dt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc_dk[dt][i] = acc_dv[dt][i] = 0.f;

        const KeyRange rows = rows_seeing_keys(n0, n0 + T::kBlockN, seq.seqlen_q, seq.seqlen_k, p.window_left,
                                               p.window_right);
        const int m_block_begin = static_cast<int>(rows.begin / T::kBlockM);
        const int m_block_end = static_cast<int>((rows.end + T::kBlockM - 1) / T::kBlockM);
        const int steps_per_head = m_block_end > m_block_begin ? m_block_end - m_block_begin : 0;
        const int steps = steps_per_head * heads_per_group;

        // Issue the loads of query tile `step` (head, m-block) into stage step % kQStages: Q and dO
        // asynchronously, LSE and D directly.
        auto load_query_tile = [&](int step) {
            const int stage = step % T::kQStages;
            Elem* sQ = sQ_stages + stage * T::kBlockM * T::kStride;
            Elem* sdO = sdO_stages + stage * T::kBlockM * T::kStride;
            float* sLse2 = sLse2_stages + stage * T::kBlockM;
            float* sD = sD_stages + stage * T::kBlockM;
            const int h = hk * heads_per_group + step / steps_per_head;
            const int m0 = (m_block_begin + step % steps_per_head) * T::kBlockM;
            const int valid_rows = min(T::kBlockM, seq.seqlen_q - m0);
            const Elem* q = static_cast<const Elem*>(p.q) + b * p.q_batch_stride + (seq.q_row0 + m0) * p.q_row_stride +
                            h * p.q_head_stride;
            const Elem* dout = static_cast<const Elem*>(p.dout) + b * p.dout_batch_stride +
                               (seq.q_row0 + m0) * p.dout_row_stride + h * p.dout_head_stride;
            load_tile_async<T::kBlockM, T::kHeadDim, T::kThreads>(sQ, q, p.q_row_stride, valid_rows, p.head_dim, tid);
            load_tile_async<T::kBlockM, T::kHeadDim, T::kThreads>(sdO, dout, p.dout_row_stride, valid_rows,
                                                                  p.head_dim_v, tid);
            ptx::cp_async_commit();
            const int64_t lse_off = b * p.lse_batch_stride + h * p.lse_head_stride + seq.q_row0 + m0;
            for (int r = tid; r < T::kBlockM; r += T::kThreads) {
                // Rows past the sequence get LSE +inf, so their P is exactly 0.
                sLse2[r] = r < valid_rows ? p.softmax_lse[lse_off + r] * 1.4426950408889634f : INFINITY;
                sD[r] = r < valid_rows ? softmax_d[lse_off + r] : 0.f;
            }
        };
        if (steps > 0) load_query_tile(0);

        for (int step = 0; step < steps; ++step) {
            const int h = hk * heads_per_group + step / steps_per_head;
            const int m0 = (m_block_begin + step % steps_per_head) * T::kBlockM;
            const float alibi_slope = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
            const uint32_t batch_head = static_cast<uint32_t>(b) * p.nheads + h;
            const int stage = step % T::kQStages;
            const Elem* sQ = sQ_stages + stage * T::kBlockM * T::kStride;
            const Elem* sdO = sdO_stages + stage * T::kBlockM * T::kStride;
            const float* sLse2 = sLse2_stages + stage * T::kBlockM;
            const float* sD = sD_stages + stage * T::kBlockM;
            ptx::cp_async_wait<0>();
            __syncthreads();  // this tile landed; every warp is done with the previous step (its stage, P^T, dS^T)
            if (step + 1 < steps) load_query_tile(step + 1);  // overlaps the whole of this step

            // ---- S^T = K Q^T and dP^T = V dO^T (this warp: 16 keys x kSCols query columns) ----------------------
            float acc_s[T::kSTiles][4], acc_dp[T::kSTiles][4];
#pragma unroll
            for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc_s[nt][i] = acc_dp[nt][i] = 0.f;
#pragma unroll
            for (int ks = 0; ks < T::kHeadDim / 16; ++ks) {
                uint32_t ka[4], va[4];
                ptx::ldmatrix_x4(ka, ptx::smem_addr(sK + (n_row0 + lane % 16) * T::kStride + ks * 16 + (lane / 16) * 8));
                ptx::ldmatrix_x4(va, ptx::smem_addr(sV + (n_row0 + lane % 16) * T::kStride + ks * 16 + (lane / 16) * 8));
#pragma unroll
                for (int np = 0; np < T::kSTiles / 2; ++np) {
                    const int m_row = s_col0 + np * 16 + (lane / 16) * 8 + lane % 8;
                    const int k_col = ks * 16 + ((lane / 8) % 2) * 8;
                    uint32_t qb[4], ob[4];
                    ptx::ldmatrix_x4(qb, ptx::smem_addr(sQ + m_row * T::kStride + k_col));
                    ptx::ldmatrix_x4(ob, ptx::smem_addr(sdO + m_row * T::kStride + k_col));
                    const uint32_t q0[2] = {qb[0], qb[1]}, q1[2] = {qb[2], qb[3]};
                    const uint32_t o0[2] = {ob[0], ob[1]}, o1[2] = {ob[2], ob[3]};
                    ptx::mma_m16n8k16(acc_s[2 * np], ka, q0, Elem());
                    ptx::mma_m16n8k16(acc_s[2 * np + 1], ka, q1, Elem());
                    ptx::mma_m16n8k16(acc_dp[2 * np], va, o0, Elem());
                    ptx::mma_m16n8k16(acc_dp[2 * np + 1], va, o1, Elem());
                }
            }

            // ---- P^T and dS^T, element-wise; staged in shared memory -------------------------------------------
            // Element i of tile nt: key n0 + n_row0 + group + 8*(i/2), query row m0 + s_col0 + nt*8 + 2*tig + i%2.
            const bool tile_needs_mask = [&] {
                const KeyRange first = visible_keys(m0, seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right);
                const KeyRange last = visible_keys(m0 + T::kBlockM - 1, seq.seqlen_q, seq.seqlen_k, p.window_left,
                                                   p.window_right);
                return !(last.begin <= n0 && first.end >= n0 + T::kBlockN);
            }();
#pragma unroll
            for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int key = n0 + n_row0 + group + 8 * half;
                    float pv[2], dsv[2];
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int mc = s_col0 + nt * 8 + 2 * tig + j;  // column within the query tile
                        const int row = m0 + mc;
                        float s = acc_s[nt][2 * half + j];
                        float dtanh = 1.f;  // d(capped score) / d(scaled score)
                        if (transform_scores) {
                            if (p.softcap > 0.f) {
                                const float t = ptx::tanh_fast(s * softcap_in);
                                s = p.softcap * t;
                                dtanh = 1.f - t * t;
                            } else {
                                s *= p.scale;
                            }
                            if (p.alibi_slopes) s += alibi_bias(alibi_slope, row, key, seq.seqlen_q, seq.seqlen_k);
                        }
                        float prob = ptx::exp2_fast(s * exp2_mult - sLse2[mc]);
                        if (tile_needs_mask) {
                            const KeyRange r =
                                visible_keys(row, seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right);
                            if (key < r.begin || key >= r.end || row >= seq.seqlen_q) prob = 0.f;
                        }
                        float dp = acc_dp[nt][2 * half + j];
                        float prob_dropped = prob;
                        if (dropout) {
                            const bool keep = dropout_keep(p.seed, p.offset, batch_head, row, key,
                                                           p.dropout_keep_threshold);
                            dp = keep ? dp * p.dropout_scale : 0.f;
                            prob_dropped = keep ? prob * p.dropout_scale : 0.f;
                        }
                        pv[j] = prob_dropped;
                        dsv[j] = prob * (dp - sD[mc]) * dtanh;
                    }
                    const int off = (n_row0 + group + 8 * half) * T::kPStride + s_col0 + nt * 8 + 2 * tig;
                    ptx::st_shared_32(ptx::smem_addr(sPt + off), ptx::pack2(pv[0], pv[1], Elem()));
                    ptx::st_shared_32(ptx::smem_addr(sdSt + off), ptx::pack2(dsv[0], dsv[1], Elem()));
                }
            __syncthreads();  // P^T and dS^T complete

            // ---- dV += P^T dO, dK += dS^T Q (this warp: 16 keys x kDCols) ----------------------------------------
#pragma unroll
            for (int ks = 0; ks < T::kBlockM / 16; ++ks) {
                uint32_t pa[4], sa[4];
                const int a_off = (n_row0 + lane % 16) * T::kPStride + ks * 16 + (lane / 16) * 8;
                ptx::ldmatrix_x4(pa, ptx::smem_addr(sPt + a_off));
                ptx::ldmatrix_x4(sa, ptx::smem_addr(sdSt + a_off));
#pragma unroll
                for (int dp2 = 0; dp2 < T::kDTiles / 2; ++dp2) {
                    const int b_off = (ks * 16 + ((lane / 8) % 2) * 8 + lane % 8) * T::kStride + d_col0 + dp2 * 16 +
                                      (lane / 16) * 8;
                    uint32_t ob[4], qb[4];
                    ptx::ldmatrix_x4_trans(ob, ptx::smem_addr(sdO + b_off));
                    ptx::ldmatrix_x4_trans(qb, ptx::smem_addr(sQ + b_off));
                    const uint32_t o0[2] = {ob[0], ob[1]}, o1[2] = {ob[2], ob[3]};
                    const uint32_t q0[2] = {qb[0], qb[1]}, q1[2] = {qb[2], qb[3]};
                    ptx::mma_m16n8k16(acc_dv[2 * dp2], pa, o0, Elem());
                    ptx::mma_m16n8k16(acc_dv[2 * dp2 + 1], pa, o1, Elem());
                    ptx::mma_m16n8k16(acc_dk[2 * dp2], sa, q0, Elem());
                    ptx::mma_m16n8k16(acc_dk[2 * dp2 + 1], sa, q1, Elem());
                }
            }

            // ---- dQ += dS K, into the fp32 accumulator ------------------------------------------------------------
            float acc_dq[T::kQDTiles][4];
#pragma unroll
            for (int dt = 0; dt < T::kQDTiles; ++dt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc_dq[dt][i] = 0.f;
#pragma unroll
            for (int ks = 0; ks < T::kBlockN / 16; ++ks) {
                uint32_t da[4];  // dS (query rows x keys) read transposed out of dS^T
                ptx::ldmatrix_x4_trans(da, ptx::smem_addr(sdSt + (ks * 16 + (lane / 16) * 8 + lane % 8) * T::kPStride +
                                                          q_mtile * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
                for (int dp2 = 0; dp2 < T::kQDTiles / 2; ++dp2) {
                    uint32_t kb[4];
                    ptx::ldmatrix_x4_trans(kb, ptx::smem_addr(sK + (ks * 16 + ((lane / 8) % 2) * 8 + lane % 8) * T::kStride +
                                                              q_dcol0 + dp2 * 16 + (lane / 16) * 8));
                    const uint32_t k0[2] = {kb[0], kb[1]}, k1[2] = {kb[2], kb[3]};
                    ptx::mma_m16n8k16(acc_dq[2 * dp2], da, k0, Elem());
                    ptx::mma_m16n8k16(acc_dq[2 * dp2 + 1], da, k1, Elem());
                }
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = m0 + q_mtile * 16 + group + 8 * half;
                if (row >= seq.seqlen_q) continue;
                float* acc = dq_acc_split + ((acc_row0 + row) * p.nheads + h) * int64_t(T::kHeadDim) + q_dcol0 + 2 * tig;
#pragma unroll
                for (int dt = 0; dt < T::kQDTiles; ++dt) {
                    atomicAdd(acc + dt * 8, acc_dq[dt][2 * half]);
                    atomicAdd(acc + dt * 8 + 1, acc_dq[dt][2 * half + 1]);
                }
            }
        }

        // ---- epilogue: dK (times the softmax scale) and dV through shared memory, 16-byte stores --------------------
        ptx::cp_async_wait<0>();
        __syncthreads();  // every warp is done with K and V: reuse them for dK and dV
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = n_row0 + group + 8 * half;
#pragma unroll
            for (int dt = 0; dt < T::kDTiles; ++dt) {
                const int c = d_col0 + dt * 8 + 2 * tig;
                ptx::st_shared_32(ptx::smem_addr(sK + r * T::kStride + c),
                                  ptx::pack2(acc_dk[dt][2 * half] * p.scale, acc_dk[dt][2 * half + 1] * p.scale, Elem()));
                ptx::st_shared_32(ptx::smem_addr(sV + r * T::kStride + c),
                                  ptx::pack2(acc_dv[dt][2 * half], acc_dv[dt][2 * half + 1], Elem()));
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
