// Tensor maps for the bulk tensor copy engine (TMA), built on the host and passed to kernels by value as
// __grid_constant__ parameters. The driver's encoder is reached through the runtime (cudaGetDriverEntryPoint...),
// so nothing links libcuda directly.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/params.h"

namespace flashattn::kernels {

// A 2-D map over rows of a 16-bit tensor: `cols` elements per row (innermost, contiguous), `rows` rows
// `row_stride_elems` apart; boxes of box_cols x box_rows elements, written to shared memory in the 128-byte swizzle
// (box_cols * 2 must be 128 bytes or less). Elements outside the tensor read as zero.
CUtensorMap make_tensor_map_2d_sw128(const void* base, ElemType dtype, uint64_t cols, uint64_t rows,
                                     uint64_t row_stride_elems, uint32_t box_cols, uint32_t box_rows);

// A 4-D map over an attention tensor (batch, rows, heads, head dim) with the head dim contiguous: dims innermost
// first {head_dim, rows, heads, batch}, strides in elements {row, head, batch} (each a multiple of 8, i.e. 16 bytes),
// boxes of box_cols x box_rows x box_heads x 1 in the 128-byte swizzle (in shared memory head by head, each head's
// rows together). Elements outside the tensor (rows past the sequence, columns past the head dim) read as zero.
CUtensorMap make_tensor_map_4d_sw128(const void* base, ElemType dtype, const uint64_t (&dims)[4],
                                     const uint64_t (&strides_elems)[3], uint32_t box_cols, uint32_t box_rows,
                                     uint32_t box_heads = 1);

// A 5-D map, dims innermost first with strides in elements (each a multiple of 8) for dims 1-4 in any order, boxes of
// box[0] x ... x box[4] in the 128-byte swizzle, in shared memory dim 0 fastest and dim 4 slowest. The kv-cache
// kernel's folded K pieces (KvcPlan::k_fold) split a page's rows into 8-row groups and the head dim's two
// 64-column halves, so that one copy lands a piece as [row group][half][8 rows][64 columns].
CUtensorMap make_tensor_map_5d_sw128(const void* base, ElemType dtype, const uint64_t (&dims)[5],
                                     const uint64_t (&strides_elems)[4], const uint32_t (&box)[5]);

}  // namespace flashattn::kernels
