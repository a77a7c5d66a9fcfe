// The warp-level steps every Ampere-class attention main loop shares (the forward and kv-cache kernels): a warp
// owns T::kMTiles m16 tiles of query rows; S and O live in its registers in the mma.sync C layout.
//   start_rows:     O = 0, running max -inf, running sums 0
//   scores_tile:    S = Q K^T against the T::kBlockN keys of a shared-memory K tile
//   online_softmax: P = exp2(S * mult - running max * mult), rescaling O and the running row sums (also in two
//                   steps: softmax_scores, then rescale_rows)
//   accumulate_pv:  O += P V, P taken straight from the S registers (the C layout of two n8 tiles is the A layout of
//                   one k16 step), V from a shared-memory tile
// T provides Elem, kMTiles, kNTiles, kDTiles, kQkSteps, kPvSteps and Row (the shared-memory layout of the K and V
// tiles: tile_io.cuh's SmemRow or SmemSwizzledRow).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/ptx.cuh"

namespace flashattn::kernels {

// The shared-memory address a lane gives ldmatrix: row row0 + lane_row, column col0 + lane_col of a tile in layout
// Row (row0 a multiple of 8 and col0 of 16, compile-time in the unrolled loops; lane_col 0 or 8). For the swizzled
// layout `lane` is ldmatrix_lane()'s address of the lane's chunk at row0 = col0 = 0, computed once per product.
template <class Row, class Elem>
__device__ __forceinline__ uint32_t ldmatrix_lane(const Elem* tile, int lane_row, int lane_col) {
    if constexpr (Row::kRowPeriod == 1)
        return 0;  // unused: the padded layout's address is a plain offset
    else
        return Row::lane_addr(ptx::smem_addr(tile), lane_row, lane_col);
}
template <class Row, class Elem>
__device__ __forceinline__ uint32_t ldmatrix_addr(const Elem* tile, uint32_t lane, int lane_row, int lane_col, int row0,
                                                  int col0) {
    if constexpr (Row::kRowPeriod == 1)
        return ptx::smem_addr(tile + (row0 + lane_row) * Row::kStride + col0 + lane_col);
    else
        return Row::chunk_addr(lane, row0, col0);
}

template <class T>
__device__ __forceinline__ void start_rows(float (&acc_o)[T::kMTiles][T::kDTiles][4], float (&row_max)[T::kMTiles][2],
                                           float (&row_sum)[T::kMTiles][2]) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
        for (int dt = 0; dt < T::kDTiles; ++dt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc_o[mt][dt][i] = 0.f;
        row_max[mt][0] = row_max[mt][1] = -INFINITY;
        row_sum[mt][0] = row_sum[mt][1] = 0.f;
    }
}

// load_a(a, mt, ks) fills the A fragment of m16 tile mt at k16 step ks (from registers or shared memory).
template <class T, class LoadA>
__device__ __forceinline__ void scores_tile(float (&acc_s)[T::kMTiles][T::kNTiles][4], const typename T::Elem* sK,
                                            int lane, LoadA load_a) {
    using Elem = typename T::Elem;
    const int k_row = (lane / 16) * 8 + lane % 8, k_col = ((lane / 8) % 2) * 8;  // the lane's row and column
    const uint32_t k_lane = ldmatrix_lane<typename T::Row>(sK, k_row, k_col);
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc_s[mt][nt][i] = 0.f;
#pragma unroll
    for (int ks = 0; ks < T::kQkSteps; ++ks) {
        uint32_t a[T::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt) load_a(a[mt], mt, ks);
#pragma unroll
        for (int np = 0; np < T::kNTiles / 2; ++np) {
            uint32_t kb[4];
            ptx::ldmatrix_x4(kb, ldmatrix_addr<typename T::Row>(sK, k_lane, k_row, k_col, np * 16, ks * 16));
            const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt) {
                ptx::mma_m16n8k16(acc_s[mt][2 * np], a[mt], b0, Elem());
                ptx::mma_m16n8k16(acc_s[mt][2 * np + 1], a[mt], b1, Elem());
            }
        }
    }
}

// Scores are in units whose exp2 after multiplying by exp2_mult is the softmax numerator. A row that has seen only
// masked keys keeps its max at -inf; 0 is subtracted then, so that exp2 gives 0 rather than NaN (scaled_max).
__device__ __forceinline__ float scaled_max(float max, float exp2_mult) {
    return max == -INFINITY ? 0.f : max * exp2_mult;
}
// The maximum of S over this tile's keys in one row of m16 tile mt (half 0: the fragment's row `group`, 1: group + 8),
// across the quad of threads that hold the row.
template <class T>
__device__ __forceinline__ float row_tile_max(const float (&acc_s)[T::kMTiles][T::kNTiles][4], int mt, int half) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
        tile_max = fmaxf(tile_max, fmaxf(acc_s[mt][nt][2 * half], acc_s[mt][nt][2 * half + 1]));
    return ptx::quad_max(tile_max);
}
// P = exp2(S * exp2_mult - max_scaled) in place over that row's scores held by this thread; returns their sum.
template <class T>
__device__ __forceinline__ float row_exp2_sum(float (&acc_s)[T::kMTiles][T::kNTiles][4], int mt, int half,
                                              float exp2_mult, float max_scaled) {
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float& s = acc_s[mt][nt][2 * half + j];
            s = ptx::exp2_fast(s * exp2_mult - max_scaled);
            sum += s;
        }
    return sum;
}

// The online softmax in two steps: softmax_scores turns S into P and updates the running max and sums, returning in
// `rescale` the factor O must be multiplied by; rescale_rows applies it. A kernel whose O is still being accumulated
// by an asynchronous product (the Hopper forward) runs the first step meanwhile and the second after. kHalves = 1:
// the fragments' first row (`group`) alone, for a warp whose rows group + 8 are all padding (the decode kernel's).
template <class T, int kHalves = 2>
__device__ __forceinline__ void softmax_scores(float (&acc_s)[T::kMTiles][T::kNTiles][4],
                                               float (&row_max)[T::kMTiles][2], float (&row_sum)[T::kMTiles][2],
                                               float exp2_mult, float (&rescale)[T::kMTiles][2]) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int half = 0; half < kHalves; ++half) {
            const float new_max = fmaxf(row_max[mt][half], row_tile_max<T>(acc_s, mt, half));
            const float max_scaled = scaled_max(new_max, exp2_mult);
            rescale[mt][half] = ptx::exp2_fast(row_max[mt][half] * exp2_mult - max_scaled);
            row_max[mt][half] = new_max;
            const float sum = row_exp2_sum<T>(acc_s, mt, half, exp2_mult, max_scaled);
            row_sum[mt][half] = row_sum[mt][half] * rescale[mt][half] + sum;
        }
}

template <class T, int kHalves = 2>
__device__ __forceinline__ void rescale_rows(float (&acc_o)[T::kMTiles][T::kDTiles][4],
                                             const float (&rescale)[T::kMTiles][2]) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int half = 0; half < kHalves; ++half)
#pragma unroll
            for (int dt = 0; dt < T::kDTiles; ++dt) {
                acc_o[mt][dt][2 * half] *= rescale[mt][half];
                acc_o[mt][dt][2 * half + 1] *= rescale[mt][half];
            }
}

template <class T, int kHalves = 2>
__device__ __forceinline__ void online_softmax(float (&acc_s)[T::kMTiles][T::kNTiles][4],
                                               float (&acc_o)[T::kMTiles][T::kDTiles][4],
                                               float (&row_max)[T::kMTiles][2], float (&row_sum)[T::kMTiles][2],
                                               float exp2_mult) {
    float rescale[T::kMTiles][2];
    softmax_scores<T, kHalves>(acc_s, row_max, row_sum, exp2_mult, rescale);
    rescale_rows<T, kHalves>(acc_o, rescale);
}

template <class T>
__device__ __forceinline__ void accumulate_pv(float (&acc_o)[T::kMTiles][T::kDTiles][4],
                                              const float (&acc_s)[T::kMTiles][T::kNTiles][4],
                                              const typename T::Elem* sV, int lane) {
    using Elem = typename T::Elem;
    const int v_row = ((lane / 8) % 2) * 8 + lane % 8, v_col = (lane / 16) * 8;  // the lane's row and column
    const uint32_t v_lane = ldmatrix_lane<typename T::Row>(sV, v_row, v_col);
#pragma unroll
    for (int ps = 0; ps < T::kPvSteps; ++ps) {
        uint32_t a[T::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt) {
            a[mt][0] = ptx::pack2(acc_s[mt][2 * ps][0], acc_s[mt][2 * ps][1], Elem());
            a[mt][1] = ptx::pack2(acc_s[mt][2 * ps][2], acc_s[mt][2 * ps][3], Elem());
            a[mt][2] = ptx::pack2(acc_s[mt][2 * ps + 1][0], acc_s[mt][2 * ps + 1][1], Elem());
            a[mt][3] = ptx::pack2(acc_s[mt][2 * ps + 1][2], acc_s[mt][2 * ps + 1][3], Elem());
        }
#pragma unroll
        for (int dp = 0; dp < T::kDTiles / 2; ++dp) {
            uint32_t vb[4];
            ptx::ldmatrix_x4_trans(vb, ldmatrix_addr<typename T::Row>(sV, v_lane, v_row, v_col, ps * 16, dp * 16));
            const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt) {
                ptx::mma_m16n8k16(acc_o[mt][2 * dp], a[mt], b0, Elem());
                ptx::mma_m16n8k16(acc_o[mt][2 * dp + 1], a[mt], b1, Elem());
            }
        }
    }
}

}  // namespace flashattn::kernels
