// Moving tiles between global and shared memory, for the Ampere-class kernels.
//
// A shared-memory tile holds `rows` rows of kHeadDim 16-bit elements, each row padded by 8 elements (16 bytes):
// with kHeadDim / 8 even, a padded row is an odd number of 16-byte chunks, so the 8 row addresses of an ldmatrix
// fall in 8 different bank groups (no conflicts) without a swizzle.
#pragma once

#include <cstdint>

#include "kernels/common/ptx.cuh"

namespace flashattn::kernels {

constexpr int kChunkElems = 8;  // 16-byte chunk of 16-bit elements: the unit of every copy
constexpr int kRowPadElems = 8;

template <int kHeadDim>
struct SmemRow {
    static_assert(kHeadDim % 16 == 0, "head dim bucket must be a multiple of 16");
    static constexpr int kStride = kHeadDim + kRowPadElems;  // elements between row starts
    static constexpr int kChunks = kHeadDim / kChunkElems;   // chunks per row
    static constexpr int kRowPeriod = 1;                     // rows after which the placement repeats
    // The element offset of (row, col), col a multiple of 8; row8 == row % 8 (unused here).
    static __device__ __forceinline__ int offset(int row, int col, int /*row8*/) { return row * kStride + col; }
};

// The other layout: rows unpadded (each starts on a 128-byte boundary) and chunk c of row r stored at position
// c ^ (r % 8), for head dims that are a multiple of 64. The 8 rows of an ldmatrix read the same chunk, which lands in 8
// different bank groups; and each row's 128-byte pieces stay whole, so an asynchronous copy of a row writes whole
// 128-byte lines of shared memory (with the padded layout, a row's 16-byte shift splits them: the profiles of the
// backward measured 2.6 times the ideal shared-memory wavefronts for its copies).
template <int kHeadDim>
struct SmemSwizzledRow {
    static_assert(kHeadDim % 64 == 0, "the swizzle permutes groups of 8 chunks");
    static constexpr int kStride = kHeadDim;
    static constexpr int kChunks = kHeadDim / kChunkElems;
    static constexpr int kRowPeriod = 8;
    static __device__ __forceinline__ int offset(int row, int col, int row8) {
        return row * kStride + ((col / kChunkElems) ^ row8) * kChunkElems;
    }
    // The ldmatrix addresses of a tile in this layout without per-use index arithmetic. A lane reads row
    // row0 + lane_row, columns col0 + lane_col: row0 a multiple of 8 and col0 of 16, both known at compile time in an
    // unrolled loop; lane_col is 0 or 8. lane_addr() is the byte address at row0 = col0 = 0; chunk_addr() moves it.
    // The tile starts on a 128-byte boundary (dynamic shared memory is 1024-byte aligned and every tile is a
    // multiple of 128 bytes), so bits 4-6 of an address are the chunk's position in its group of 8, and the even
    // chunk offset of col0 within its group flips them by one XOR (lane_col's chunk is the low bit): one LOP3 with
    // an immediate and an immediate offset per use, rather than a register per column group held through the loop.
    // The XOR is an asm statement so that the compiler neither hoists nor shares it across the loop.
    static __device__ __forceinline__ uint32_t lane_addr(uint32_t tile, int lane_row, int lane_col) {
        return tile + lane_row * kStride * 2 + (((lane_col / kChunkElems) ^ (lane_row % 8)) * 16);
    }
    static __device__ __forceinline__ uint32_t chunk_addr(uint32_t lane_addr, int row0, int col0) {
        uint32_t a = lane_addr;
        const uint32_t flip = ((col0 / kChunkElems) % 8) * 16;
        if (flip != 0) asm volatile("xor.b32 %0, %0, %1;" : "+r"(a) : "r"(flip));
        return a + (row0 * kStride + (col0 / 64) * 64) * 2;
    }
};

// A tile whose rows are not evenly spaced in global memory (gathered query heads, paged caches):
// row r comes from row_ptr(r), called only for r < valid_rows. `any_row` is a readable address for the zero-filled
// chunks' (unused) source operand.
// Row is the shared-memory layout (SmemRow or SmemSwizzledRow) in this and the copies below.
template <int kRows, int kHeadDim, int kThreads, typename Row = SmemRow<kHeadDim>, typename Elem, typename RowPtr>
__device__ __forceinline__ void load_rows_async(Elem* smem, RowPtr row_ptr, const Elem* any_row, int valid_rows,
                                                int valid_cols, int tid) {
    constexpr int kTotal = kRows * Row::kChunks;
#pragma unroll
    for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
        const int chunk = tid + i * kThreads;
        if (kTotal % kThreads != 0 && chunk >= kTotal) break;
        const int r = chunk / Row::kChunks;
        const int c = (chunk % Row::kChunks) * kChunkElems;
        const bool valid = r < valid_rows && c < valid_cols;
        ptx::cp_async_16(ptx::smem_addr(smem + Row::offset(r, c, r % 8)), valid ? row_ptr(r) + c : any_row, valid);
    }
}

// Rows [0, valid_rows) and columns [0, valid_cols) of a shared-memory tile to scattered rows of global memory, 16
// bytes at a time: row r goes to row_ptr(r), called only for r < valid_rows.
template <int kRows, int kHeadDim, int kThreads, typename Row = SmemRow<kHeadDim>, typename Elem, typename RowPtr>
__device__ __forceinline__ void store_rows(RowPtr row_ptr, const Elem* smem, int valid_rows, int valid_cols,
                                           int tid) {
    constexpr int kTotal = kRows * Row::kChunks;
#pragma unroll
    for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
        const int chunk = tid + i * kThreads;
        if (kTotal % kThreads != 0 && chunk >= kTotal) break;
        const int r = chunk / Row::kChunks;
        const int c = (chunk % Row::kChunks) * kChunkElems;
        if (r < valid_rows && c < valid_cols)
            ptx::st_global_16(row_ptr(r) + c, ptx::ld_shared_16(ptx::smem_addr(smem + Row::offset(r, c, r % 8))));
    }
}

// Start an asynchronous copy of rows [0, kRows) of a tile from global memory into shared memory `smem`.
// Row r comes from gmem + r * row_stride; rows >= valid_rows and columns >= valid_cols (a multiple of 8) are
// zero-filled, so padded rows and head dims contribute nothing to any product. A zero-filled chunk reads nothing, so
// gmem need not point inside the tensor when valid_rows <= 0 (a part of a tile past the end of a sequence).
template <int kRows, int kHeadDim, int kThreads, typename Row = SmemRow<kHeadDim>, typename Elem>
__device__ __forceinline__ void load_tile_async(Elem* smem, const Elem* gmem, int64_t row_stride, int valid_rows,
                                                int valid_cols, int tid) {
    if constexpr (kThreads % Row::kChunks == 0 && (kThreads / Row::kChunks) % Row::kRowPeriod == 0) {
        // Each thread copies the same column chunk of rows r0, r0 + kRowsPerPass, ...: one running pointer per
        // thread instead of one per chunk keeps the address arithmetic out of the register budget. (The chunk's
        // position must repeat from pass to pass, which a swizzled layout allows only for passes of 8 rows or more.)
        constexpr int kRowsPerPass = kThreads / Row::kChunks;
        static_assert(kRows % kRowsPerPass == 0, "tile rows must divide evenly among passes");
        const int r0 = tid / Row::kChunks;
        const int c = (tid % Row::kChunks) * kChunkElems;
        constexpr int kPasses = kRows / kRowsPerPass;
        // With many passes (16 at head dim 256 in 64-row tiles of 128 threads) the row test compares each pass's
        // compile-time row offset with one register, rows_left: written as r0 + i * kRowsPerPass < valid_rows, every
        // pass's row index became a register of its own, live through the caller's whole main loop (15 of the
        // hd256 forward's; freeing them measured +0.6 to +2.7% there). With few passes that form measured faster
        // (hd64 forward, 4 passes: by 1-3%), and stays.
        constexpr bool kManyPasses = kPasses > 8;
        const bool col_valid = c < valid_cols;
        const int rows_left = col_valid ? valid_rows - r0 : 0;
        const Elem* src = gmem + r0 * row_stride + c;
        uint32_t dst = ptx::smem_addr(smem + Row::offset(r0, c, r0 % 8));
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
            const bool valid =
                kManyPasses ? i * kRowsPerPass < rows_left : col_valid && r0 + i * kRowsPerPass < valid_rows;
            ptx::cp_async_16(dst, valid ? src : gmem, valid);
            src += kRowsPerPass * row_stride;
            dst += kRowsPerPass * Row::kStride * sizeof(Elem);
        }
    } else {
        // Rows of a chunk count that does not divide the block (head dims 96, 192), or swizzled rows that a pass
        // covers fewer than 8 of: chunk by chunk.
        load_rows_async<kRows, kHeadDim, kThreads, Row>(
            smem, [&](int r) { return gmem + r * row_stride; }, gmem, valid_rows, valid_cols, tid);
    }
}

// load_tile_async for a tile with every row and column in range: no per-chunk predicate or source select (the
// compiler cannot tell that the row test of the general copy always passes, as it does not know tid < kThreads).
template <int kRows, int kHeadDim, int kThreads, typename Row = SmemRow<kHeadDim>, typename Elem>
__device__ __forceinline__ void load_full_tile_async(Elem* smem, const Elem* gmem, int64_t row_stride, int tid) {
    constexpr int kTotal = kRows * Row::kChunks;
    if constexpr (kThreads % Row::kChunks == 0) {
        // Same column chunk of rows r0, r0 + kRowsPerPass, ...: one running pointer per thread.
        constexpr int kRowsPerPass = kThreads / Row::kChunks;
        static_assert(kRows % kRowsPerPass == 0, "tile rows must divide evenly among passes");
        static_assert(kRowsPerPass % Row::kRowPeriod == 0, "every pass puts the thread's chunk at the same position");
        const int r0 = tid / Row::kChunks;
        const int c = (tid % Row::kChunks) * kChunkElems;
        const Elem* src = gmem + r0 * row_stride + c;
        const uint32_t dst = ptx::smem_addr(smem + Row::offset(r0, c, r0 % 8));
#pragma unroll
        for (int i = 0; i < kRows / kRowsPerPass; ++i) {
            ptx::cp_async_16(dst + i * kRowsPerPass * Row::kStride * int(sizeof(Elem)), src, true);
            src += kRowsPerPass * row_stride;
        }
    } else {
#pragma unroll
        for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
            const int chunk = tid + i * kThreads;
            if (kTotal % kThreads != 0 && chunk >= kTotal) break;
            const int r = chunk / Row::kChunks;
            const int c = (chunk % Row::kChunks) * kChunkElems;
            ptx::cp_async_16(ptx::smem_addr(smem + Row::offset(r, c, r % 8)), gmem + r * row_stride + c, true);
        }
    }
}

// Copy rows [0, valid_rows) and columns [0, valid_cols) of a shared-memory tile to global memory, 16 bytes at a time.
template <int kRows, int kHeadDim, int kThreads, typename Row = SmemRow<kHeadDim>, typename Elem>
__device__ __forceinline__ void store_tile(Elem* gmem, const Elem* smem, int64_t row_stride, int valid_rows,
                                           int valid_cols, int tid) {
    store_rows<kRows, kHeadDim, kThreads, Row>([&](int r) { return gmem + r * row_stride; }, smem, valid_rows,
                                               valid_cols, tid);
}

}  // namespace flashattn::kernels
