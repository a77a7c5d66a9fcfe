// The last wave's split (the one-tile Hopper forward): a grid of one block a work tile runs its tiles in waves of one
// block an SM; when the last wave is only partly full, its SMs idle for a tile's time at the end (2048 tiles on 132
// SMs: 15.5 waves, 3% of the run at hd128 8k, bench/NOTES_sm90.md v18). The last `tiles` work tiles are then each
// split into `parts` blocks over their key tiles; each block writes its rows' normalised O (fp32) and LSE to the
// workspace, and sm90_tail_combine merges a tile's parts by their LSEs into the output and the LSE.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/sm90/fwd_kernel.cuh"

namespace flashattn::kernels {

// What the kernel and the combine need to know (parts <= 1: no split). Blocks [first, first + tiles * parts) of the
// grid are the split tiles' parts: block first + i * parts + j is part j of work tile first + i.
struct Sm90TailSplit {
    int first = 0;   // the first split work tile (= the first part's block)
    int tiles = 0;   // work tiles split
    int parts = 1;   // blocks a split tile
    float* o = nullptr;    // (tiles, parts, block rows, head dim bucket) fp32
    float* lse = nullptr;  // (tiles, parts, block rows)
};

// A block's work tile and, for a split tile, its part (-1: the whole tile).
struct Sm90BlockTile {
    int tile, part;
};
__host__ __device__ inline Sm90BlockTile sm90_block_tile(const Sm90TailSplit& split, int block) {
    if (split.parts <= 1 || block < split.first) return {block, -1};
    const int i = block - split.first;
    return {split.first + i / split.parts, i % split.parts};
}
// Part `part` of `parts` of the key tiles [begin, end), balanced: n / parts tiles each, the first n % parts one more
// (every part non-empty where n >= parts).
__host__ __device__ inline void sm90_part_range(int& begin, int& end, int part, int parts) {
    const int n = end - begin, base = n / parts, extra = n % parts;
    begin += part * base + (part < extra ? part : extra);
    end = begin + base + (part < extra ? 1 : 0);
}

// A split block's epilogue: its rows' O normalised by its own sum, and its LSE (-inf where it saw no key, which the
// combine weighs 0), into the workspace slot of (tile index among the split ones, part).
template <class T>
__device__ __forceinline__ void store_partial_rows(const float (&acc_o)[T::kMTiles][T::kDTiles][4],
                                                   const float (&row_max)[T::kMTiles][2],
                                                   const float (&row_sum)[T::kMTiles][2], const AttnParams& p,
                                                   const Sm90Place<T>& at, const Sm90TailSplit& split,
                                                   Sm90BlockTile bt) {
    const int64_t slot = int64_t(bt.tile - split.first) * split.parts + bt.part;
    float* o = split.o + slot * T::kBlockM * T::kHeadDimV;
    float* lse = split.lse + slot * T::kBlockM;
    const float max_to_natural = score_exp2_mult(p) * kLn2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        // The quad's sum by every lane before any leaves: the shuffle is a full-warp one.
        const float sum = ptx::quad_sum(row_sum[0][half]);
        const int row = at.warp_row0 + at.group + 8 * half;
        if (row >= at.rows) continue;
        const bool empty = !(sum > 0.f);
        const float inv = empty ? 0.f : __fdividef(1.f, sum);
        if (at.tig == 0) lse[row] = empty ? -INFINITY : row_max[0][half] * max_to_natural + __logf(sum);
#pragma unroll
        for (int dt = 0; dt < T::kDTiles; ++dt) {
            const int col = dt * 8 + 2 * at.tig;
            if (col < p.head_dim_v)
                *reinterpret_cast<float2*>(o + row * T::kHeadDimV + col) =
                    make_float2(acc_o[0][dt][2 * half] * inv, acc_o[0][dt][2 * half + 1] * inv);
        }
    }
}

// The combine: one warp a row of a split tile, lanes over the head dim in 4-float steps. Out = sum_j w_j O_j with
// w_j = exp(lse_j - lse) and lse = log sum_j exp(lse_j); a row no part saw a key of gets 0 and +inf (the forward's
// convention for an empty row).
constexpr int kTailCombineWarps = 4;
template <class T>
__global__ void __launch_bounds__(kTailCombineWarps * 32)
    sm90_tail_combine(const AttnParams p, const Sm90TailSplit split, int m_blocks) {
    using Elem = typename T::Elem;
    const int i = blockIdx.x;  // split tile index
    const int row = blockIdx.y * kTailCombineWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
    const Sm90Tile w = sm90_tile(p, split.first + i, m_blocks);
    const int m0 = w.m_block * T::kBlockM;
    if (row >= T::kBlockM || m0 + row >= p.seqlen_q) return;
    const int64_t slot0 = int64_t(i) * split.parts;
    auto lse_of = [&](int j) { return split.lse[(slot0 + j) * T::kBlockM + row]; };
    float top = -INFINITY;
    for (int j = 0; j < split.parts; ++j) top = fmaxf(top, lse_of(j));
    float total = 0.f;
    for (int j = 0; j < split.parts; ++j) total += top == -INFINITY ? 0.f : expf(lse_of(j) - top);
    const float norm = total > 0.f ? __fdividef(1.f, total) : 0.f;
    Elem* out = static_cast<Elem*>(p.out) + w.b * p.out_batch_stride + int64_t(m0 + row) * p.out_row_stride +
                w.h * p.out_head_stride;
    for (int col = lane * 4; col < p.head_dim_v; col += 128) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int j = 0; j < split.parts; ++j) {
            const float4 v =
                *reinterpret_cast<const float4*>(split.o + ((slot0 + j) * T::kBlockM + row) * T::kHeadDimV + col);
            const float wj = (top == -INFINITY ? 0.f : expf(lse_of(j) - top)) * norm;
            acc.x += wj * v.x, acc.y += wj * v.y, acc.z += wj * v.z, acc.w += wj * v.w;
        }
        *reinterpret_cast<uint32_t*>(out + col) = ptx::pack2(acc.x, acc.y, Elem());
        *reinterpret_cast<uint32_t*>(out + col + 2) = ptx::pack2(acc.z, acc.w, Elem());
    }
    if (p.softmax_lse && lane == 0)
        p.softmax_lse[w.b * p.lse_batch_stride + w.h * p.lse_head_stride + m0 + row] =
            total > 0.f ? top + __logf(total) : INFINITY;
}

}  // namespace flashattn::kernels
