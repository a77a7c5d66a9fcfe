// The Hopper forward kernel, first version (sm_90a: TMA, mbarriers, wgmma).
//
// One thread block is kWarpgroups warpgroups (4 warps, 128 threads each), each computing 64 query rows of one
// (sequence, head) against the same K and V tiles:
//   the copy engine (TMA) brings the Q tile once and K and V tiles of 64 keys through a two-stage ring, each tile
//   completing on its own mbarrier, in the 128-byte swizzle wgmma reads (head dims split in 64-column boxes);
//   S = Q K^T is one chain of wgmma (A and B from shared memory), 32 fp32 accumulators a thread in the mma.sync C
//   layout, so the masks and the online softmax are the Ampere kernel's (sm80/warp_tiles.cuh) unchanged;
//   O += P V takes P from those registers (wgmma's register A operand) and V from shared memory as an N-major B.
// Thread 0 issues the copies; a stage is refilled after the block's barrier at the end of the tile that used it.
// With two warpgroups the K/V traffic per query row halves and one warpgroup's softmax can run while the other's
// wgmma do (the warp schedulers interleave them; no explicit ping-pong yet).
// Not yet here (bench/NOTES_sm90.md): a producer warp and register rebalancing, two consumer warpgroups in
// ping-pong, overlap of the softmax with the next S. Features: causal and window masks, GQA, any lengths; the
// dispatch sends dropout, softcap, ALiBi, varlen and attention probabilities to the Ampere kernel.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>

#include "common/mask.h"
#include "common/numeric.h"
#include "common/params.h"
#include "kernels/common/ptx_sm90.cuh"
#include "kernels/common/wgmma_ops.cuh"
#include "kernels/sm80/warp_tiles.cuh"

namespace flashattn::kernels {

constexpr int kSm90SmemAlign = 1024;  // the 128-byte swizzle repeats every 8 rows: tiles start on 1 KB boundaries

template <typename Elem_, int kHeadDim_, int kWarpgroups_>
struct Sm90FwdTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kWarpgroups = kWarpgroups_;
    static constexpr int kRowsPerWarpgroup = 64;  // wgmma's M
    static constexpr int kBlockM = kRowsPerWarpgroup * kWarpgroups;
    static constexpr int kBlockN = 64;  // keys per tile: S is m64n64, 32 accumulators a thread
    static constexpr int kThreads = 128 * kWarpgroups;
    static constexpr int kStages = 2;
    static constexpr int kBoxCols = 64;  // 16-bit columns in one 128-byte swizzled row
    static constexpr int kBoxes = kHeadDim / kBoxCols;
    static constexpr int kQBoxElems = kBlockM * kBoxCols;
    static constexpr int kKvBoxElems = kBlockN * kBoxCols;
    static constexpr uint32_t kQTileBytes = kBoxes * kQBoxElems * 2;
    static constexpr uint32_t kKvTileBytes = kBoxes * kKvBoxElems * 2;
    static constexpr int kKStepsPerBox = kBoxCols / 16;
    static constexpr int kRowBytes = kBoxCols * 2;
    // The per-warp view warp_tiles.cuh works on: one m16 tile of rows, n8 tiles of S and of O.
    static constexpr int kMTiles = 1;
    static constexpr int kNTiles = kBlockN / 8;
    static constexpr int kDTiles = kHeadDim / 8;
    static constexpr int kQkSteps = kHeadDim / 16;
    static constexpr int kPvSteps = kBlockN / 16;
    static_assert(kHeadDim % kBoxCols == 0, "whole 64-column boxes");
    static_assert(kBlockM <= 256, "one copy-engine box holds the Q tile's rows");
};

template <class T>
struct Sm90FwdSmem {
    using Elem = typename T::Elem;
    alignas(kSm90SmemAlign) Elem q[T::kBoxes][T::kQBoxElems];
    alignas(kSm90SmemAlign) Elem k[T::kStages][T::kBoxes][T::kKvBoxElems];
    alignas(kSm90SmemAlign) Elem v[T::kStages][T::kBoxes][T::kKvBoxElems];
    uint64_t q_full;
    uint64_t k_full[T::kStages];
    uint64_t v_full[T::kStages];
};

template <class T>
constexpr int sm90_fwd_smem_bytes() {
    return static_cast<int>(sizeof(Sm90FwdSmem<T>)) + kSm90SmemAlign;  // room to align the dynamic base
}

template <class T>
__global__ void __launch_bounds__(T::kThreads)
    fwd_sm90_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                    const __grid_constant__ CUtensorMap map_v, const AttnParams p) {
#if defined(__CUDA_ARCH__) && !FLASHATTN_SM90A
    __trap();  // sm_90a code only; the dispatch launches it on compute capability 9.0 alone
#else
    using Elem = typename T::Elem;
    extern __shared__ unsigned char smem_raw[];
    auto& s = *reinterpret_cast<Sm90FwdSmem<T>*>((reinterpret_cast<uintptr_t>(smem_raw) + kSm90SmemAlign - 1) /
                                                 kSm90SmemAlign * kSm90SmemAlign);

    // Causal blocks further down see more keys: the heaviest start first (as in the Ampere forward).
    const int m_block = p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    const int b = blockIdx.y, h = blockIdx.z;
    const int hk = h / (p.nheads / p.nheads_k);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    const int wg = tid / 128;  // this thread's warpgroup: rows [64 wg, 64 wg + 64) of the block
    const int m0 = m_block * T::kBlockM;
    const int rows = min(T::kBlockM, p.seqlen_q - m0);
    const int warp_row0 = warp * 16;  // = 64 wg + 16 (warp % 4)
    const uint32_t q_rows_offset = wg * T::kRowsPerWarpgroup * T::kRowBytes;  // this warpgroup's Q rows

    const KeyRange first = visible_keys(m0, p.seqlen_q, p.seqlen_k, p.window_left, p.window_right);
    const KeyRange last = visible_keys(m0 + rows - 1, p.seqlen_q, p.seqlen_k, p.window_left, p.window_right);
    const int n_tile_begin = static_cast<int>(first.begin / T::kBlockN);
    const int n_tile_end = last.end > first.begin ? static_cast<int>((last.end + T::kBlockN - 1) / T::kBlockN)
                                                  : n_tile_begin;

    if (tid == 0) {
        ptx::mbarrier_init(&s.q_full, 1);
        for (int st = 0; st < T::kStages; ++st) {
            ptx::mbarrier_init(&s.k_full[st], 1);
            ptx::mbarrier_init(&s.v_full[st], 1);
        }
        ptx::fence_mbarrier_init();
    }
    __syncthreads();

    // Thread 0 only: the copies of K and V tile n_tile into stage st.
    auto issue_kv = [&](int n_tile, int st) {
        ptx::mbarrier_arrive_expect_tx(&s.k_full[st], T::kKvTileBytes);
        for (int box = 0; box < T::kBoxes; ++box)
            ptx::tma_load_4d(s.k[st][box], &map_k, &s.k_full[st], box * T::kBoxCols, n_tile * T::kBlockN, hk, b);
        ptx::mbarrier_arrive_expect_tx(&s.v_full[st], T::kKvTileBytes);
        for (int box = 0; box < T::kBoxes; ++box)
            ptx::tma_load_4d(s.v[st][box], &map_v, &s.v_full[st], box * T::kBoxCols, n_tile * T::kBlockN, hk, b);
    };
    if (tid == 0) {
        ptx::mbarrier_arrive_expect_tx(&s.q_full, T::kQTileBytes);
        for (int box = 0; box < T::kBoxes; ++box)
            ptx::tma_load_4d(s.q[box], &map_q, &s.q_full, box * T::kBoxCols, m0, h, b);
        for (int i = 0; i < T::kStages && n_tile_begin + i < n_tile_end; ++i) issue_kv(n_tile_begin + i, i);
    }

    float acc_o[T::kMTiles][T::kDTiles][4];
    float row_max[T::kMTiles][2], row_sum[T::kMTiles][2];
    start_rows<T>(acc_o, row_max, row_sum);
    auto o_box = [&](int box) -> float (&)[32] { return reinterpret_cast<float(&)[32]>(acc_o[0][box * 8][0]); };
    auto& o_flat = reinterpret_cast<float(&)[T::kDTiles * 4]>(acc_o[0][0][0]);
    const float exp2_mult = p.scale_log2;  // no score transform on this path: the scale folds into exp2

    ptx::mbarrier_wait(&s.q_full, 0);
    for (int n_tile = n_tile_begin; n_tile < n_tile_end; ++n_tile) {
        const int it = n_tile - n_tile_begin;
        const int st = it % T::kStages;
        const uint32_t phase = (it / T::kStages) % 2;
        const int n0 = n_tile * T::kBlockN;

        // ---- S = Q K^T (both from shared memory) ------------------------------------------------------------------
        float acc_s[T::kMTiles][T::kNTiles][4] = {};
        auto& s_flat = reinterpret_cast<float(&)[T::kNTiles * 4]>(acc_s[0][0][0]);
        ptx::mbarrier_wait(&s.k_full[st], phase);
        ptx::fence_registers(s_flat);
        ptx::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < T::kQkSteps; ++ks) {
            const int box = ks / T::kKStepsPerBox;
            const uint32_t step = (ks % T::kKStepsPerBox) * 16 * 2;  // 16 columns further along the swizzled rows
            const uint64_t desc_q = ptx::smem_desc_sw128(ptx::smem_addr(s.q[box]) + q_rows_offset + step);
            const uint64_t desc_k = ptx::smem_desc_sw128(ptx::smem_addr(s.k[st][box]) + step);
            ptx::wgmma_ss_m64n64k16(s_flat, desc_q, desc_k, ks > 0 ? 1 : 0, Elem());
        }
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::fence_registers(s_flat);

        // ---- masks, only on tiles that cross a mask edge: element i of acc_s[0][nt] is row
        // m0 + warp_row0 + group + 8*(i/2), key n0 + nt*8 + 2*tig + i%2
        const bool tile_needs_mask = !(last.begin <= n0 && first.end >= n0 + T::kBlockN);
        if (tile_needs_mask) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = m0 + warp_row0 + group + 8 * half;
                const KeyRange r = visible_keys(row, p.seqlen_q, p.seqlen_k, p.window_left, p.window_right);
#pragma unroll
                for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int col = n0 + nt * 8 + 2 * tig + j;
                        if (col < r.begin || col >= r.end) acc_s[0][nt][2 * half + j] = -INFINITY;
                    }
            }
        }
        online_softmax<T>(acc_s, acc_o, row_max, row_sum, exp2_mult);

        // ---- O += P V: P from registers (the C layout of two n8 tiles is the A layout of one k16 step) -------------
        // Every A fragment is packed before the fence: registers written between wgmma operations would make the
        // compiler insert warpgroup waits.
        uint32_t a_frag[T::kPvSteps][4];
#pragma unroll
        for (int ps = 0; ps < T::kPvSteps; ++ps) {
            a_frag[ps][0] = ptx::pack2(acc_s[0][2 * ps][0], acc_s[0][2 * ps][1], Elem());
            a_frag[ps][1] = ptx::pack2(acc_s[0][2 * ps][2], acc_s[0][2 * ps][3], Elem());
            a_frag[ps][2] = ptx::pack2(acc_s[0][2 * ps + 1][0], acc_s[0][2 * ps + 1][1], Elem());
            a_frag[ps][3] = ptx::pack2(acc_s[0][2 * ps + 1][2], acc_s[0][2 * ps + 1][3], Elem());
        }
        ptx::mbarrier_wait(&s.v_full[st], phase);
        ptx::fence_registers(o_flat);
        ptx::wgmma_fence();
#pragma unroll
        for (int ps = 0; ps < T::kPvSteps; ++ps) {
            const uint32_t(&a)[4] = a_frag[ps];
#pragma unroll
            for (int box = 0; box < T::kBoxes; ++box) {
                // V's rows are keys: a k16 step is 16 swizzled rows further on.
                const uint64_t desc_v = ptx::smem_desc_sw128(ptx::smem_addr(s.v[st][box]) + ps * 16 * T::kRowBytes);
                ptx::wgmma_rs_m64n64k16<1>(o_box(box), a, desc_v, 1, Elem());
            }
        }
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::fence_registers(o_flat);

        __syncthreads();  // every warp is done with stage st: refill it
        if (tid == 0 && n_tile + T::kStages < n_tile_end) issue_kv(n_tile + T::kStages, st);
    }

    // ---- epilogue: normalise and write O (4-byte stores straight from the accumulators) and the LSE -----------------
    Elem* out = static_cast<Elem*>(p.out) + b * p.out_batch_stride + int64_t(m0) * p.out_row_stride +
                h * p.out_head_stride;
    float* lse = p.softmax_lse ? p.softmax_lse + b * p.lse_batch_stride + h * p.lse_head_stride + m0 : nullptr;
    const float max_to_natural = exp2_mult * kLn2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const float sum = ptx::quad_sum(row_sum[0][half]);
        const bool empty = !(sum > 0.f);  // saw no key: output 0, LSE +inf
        const float inv = empty ? 0.f : 1.f / sum;
        const int row = warp_row0 + group + 8 * half;
        if (row < rows) {
#pragma unroll
            for (int dt = 0; dt < T::kDTiles; ++dt) {
                const int col = dt * 8 + 2 * tig;
                if (col < p.head_dim_v)
                    *reinterpret_cast<uint32_t*>(out + int64_t(row) * p.out_row_stride + col) =
                        ptx::pack2(acc_o[0][dt][2 * half] * inv, acc_o[0][dt][2 * half + 1] * inv, Elem());
            }
            if (lse && tig == 0) lse[row] = empty ? INFINITY : row_max[0][half] * max_to_natural + logf(sum);
        }
    }
#endif
}

}  // namespace flashattn::kernels
