// Where the rows of one (sequence, head) of a tensor live, and moving blocks of them in and out of tiles.
//
// A row is one head's vector (head_dim or head_dim_v values, contiguous). Rows are numbered within the sequence.
// Dense tensors (padded, varlen, a dense kv-cache) place row r at first + r * row_stride; a paged kv-cache maps
// position pos0 + r through the block table to (block, row within the page).
#pragma once

#include <cstdint>

#include "common/params.h"
#include "reference/element_access.h"
#include "reference/tile.h"

namespace flashattn::reference {

struct RowLayout {
    const void* base = nullptr;
    ElemType dtype = ElemType::f32;
    int64_t dim = 0;         // values per row
    int64_t first = 0;       // dense: element offset of row 0; paged: offset of the head within a page row
    int64_t row_stride = 0;  // elements between consecutive rows (of a page, when paged)
    // Paged only: the sequence's block table row, the stride between physical blocks, the page size, and the
    // position row 0 stands for (rows are positions pos0, pos0 + 1, ...).
    const int32_t* block_table = nullptr;
    int64_t block_stride = 0;
    int64_t page_size = 0;
    int64_t pos0 = 0;

    int64_t offset(int64_t r) const {
        if (!block_table) return first + r * row_stride;
        const int64_t pos = pos0 + r;
        const int64_t block = block_table[pos / page_size];
        return block * block_stride + (pos % page_size) * row_stride + first;
    }
};

// A dense layout: row r of (batch b, head h) where the sequence starts at absolute row `row0` (varlen; 0 padded).
inline RowLayout dense_rows(const void* base, ElemType dtype, int64_t dim, int64_t batch_stride, int64_t row_stride,
                            int64_t head_stride, int64_t b, int64_t row0, int64_t h) {
    RowLayout l;
    l.base = base;
    l.dtype = dtype;
    l.dim = dim;
    l.first = b * batch_stride + row0 * row_stride + h * head_stride;
    l.row_stride = row_stride;
    return l;
}

// Rows [r0, r0 + n) into tile rows [0, n).
template <class Acc>
void load_rows(const RowLayout& l, int64_t r0, int64_t n, Tile<Acc>& dst) {
    dst.reshape(n, l.dim);
    for (int64_t r = 0; r < n; ++r) read_row(l.dtype, l.base, l.offset(r0 + r), l.dim, dst.row(r));
}

// The same rows transposed: tile (dim, n), so that a row of queries times this tile walks contiguous memory.
template <class Acc>
void load_rows_transposed(const RowLayout& l, int64_t r0, int64_t n, Tile<Acc>& dst, Tile<Acc>& scratch) {
    load_rows(l, r0, n, scratch);
    dst.reshape(l.dim, n);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < l.dim; ++c) dst.at(c, r) = scratch.at(r, c);
}

// Tile rows [0, n) to rows [r0, r0 + n), rounded to the layout's dtype. `base` is the writable alias of l.base.
template <class Acc>
void store_rows(const RowLayout& l, void* base, int64_t r0, int64_t n, const Tile<Acc>& src) {
    for (int64_t r = 0; r < n; ++r) write_row(l.dtype, base, l.offset(r0 + r), l.dim, src.row(r));
}

}  // namespace flashattn::reference
