// What every kv-cache kernel needs: where a sequence's cache positions live (dense or paged) and how long it is.
//
// Positions are absolute cache positions (src/reference/kvcache.cpp): sequence b's cache holds [leftpad, length);
// new key t goes to position length + t; attention reads positions [leftpad, length + seqlen_new), key column j
// being position leftpad + j.
#pragma once

#include <cstdint>

#include "common/mask.h"
#include "common/params.h"
#include "kernels/common/ptx.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm80/kvcache_plan.h"

namespace flashattn::kernels {

struct CacheSeq {
    int length;   // positions filled before this call's append
    int leftpad;  // first valid position
    int seqlen_k;  // keys attended to
};

__device__ __forceinline__ CacheSeq cache_seq(const AttnParams& p, int b) {
    CacheSeq s;
    s.length = p.cache_seqlens ? p.cache_seqlens[b] : static_cast<int>(p.cache_seqlen);
    s.leftpad = p.cache_leftpad ? p.cache_leftpad[b] : 0;
    s.seqlen_k = max(s.length + p.seqlen_new - s.leftpad, 0);
    return s;
}

// One kv head of one sequence's cache: row(pos) is the address of position pos.
template <typename Elem>
struct CacheView {
    Elem* base;            // dense: the sequence's cache entry; paged: the cache (both offset to the kv head)
    int64_t block_stride;  // paged: between physical blocks
    int64_t row_stride;
    const int32_t* blocks;  // paged: the sequence's block table row; null for a dense cache
    int page_size;

    __device__ __forceinline__ Elem* row(int64_t pos) const {
        if (blocks) return base + blocks[pos / page_size] * block_stride + (pos % page_size) * row_stride;
        return base + pos * row_stride;
    }
};

template <typename Elem>
__device__ __forceinline__ CacheView<Elem> cache_view(const AttnParams& p, const void* cache, int64_t batch_stride,
                                                      int64_t row_stride, int64_t head_stride, int b, int hk) {
    CacheView<Elem> v;
    Elem* head = static_cast<Elem*>(const_cast<void*>(cache)) + hk * head_stride;
    v.row_stride = row_stride;
    v.page_size = p.page_size;
    if (p.block_table) {
        v.base = head;
        v.block_stride = batch_stride;
        v.blocks = p.block_table + b * p.block_table_batch_stride;
    } else {
        const int entry = p.cache_batch_idx ? p.cache_batch_idx[b] : b;
        v.base = head + entry * batch_stride;
        v.block_stride = 0;
        v.blocks = nullptr;
    }
    return v;
}

// Where this thread's 16-byte chunks of one key tile come from: (block, row in block) per chunk, with chunk
// tid + i * kThreads being row chunk / kChunks as in load_rows_async. A paged cache's rows cost a block-table read
// each; looking them up a tile ahead keeps those reads off the path of the tile's copies, and K and V share them.
template <int kRows, int kHeadDim, int kThreads>
struct KeyTileRows {
    static constexpr int kChunks = SmemRow<kHeadDim>::kChunks;
    static constexpr int kTotal = kRows * kChunks;
    static constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
    // Where every thread's chunk i is row tid / kChunks + i * kRowStep (whole rows per pass of the block), rows
    // are placed by stepping (see locate).
    static constexpr bool kStepped = kThreads % kChunks == 0 && kTotal % kThreads == 0 && kThreads / kChunks <= 16;
    static constexpr int kRowStep = kThreads / kChunks;
    int32_t block[kIters];     // physical block; 0 for a dense cache
    int32_t in_block[kIters];  // row inside that block; the position itself for a dense cache

    // The rows of the tile whose row 0 is cache position first_pos; rows >= valid_rows are not looked up.
    // A thread's rows are kRowStep apart. For a paged cache one division places its first row; each later row steps
    // its offset inside the page on and wraps into the next page at most once (kRowStep <= 16 <= any page size), so
    // the per-row divisions by the run-time page size (a few dozen instructions each, measured at a quarter of the
    // paged decode's time) are gone.
    template <typename View>
    __device__ __forceinline__ void locate(const View& cache, int first_pos, int valid_rows, int tid) {
        if constexpr (kStepped) {
            const int r0 = tid / kChunks;
            if (cache.blocks) {
                int page = (first_pos + r0) / cache.page_size;
                int in_page = (first_pos + r0) - page * cache.page_size;
#pragma unroll
                for (int i = 0; i < kIters; ++i) {
                    const bool valid = r0 + i * kRowStep < valid_rows;
                    block[i] = valid ? ptx::ld_global_nc_early_s32(cache.blocks + page) : 0;
                    in_block[i] = valid ? in_page : 0;
                    in_page += kRowStep;
                    if (in_page >= cache.page_size) in_page -= cache.page_size, ++page;
                }
            } else {
#pragma unroll
                for (int i = 0; i < kIters; ++i) {
                    block[i] = 0;
                    in_block[i] = r0 + i * kRowStep < valid_rows ? first_pos + r0 + i * kRowStep : 0;
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < kIters; ++i) {
                const int chunk = tid + i * kThreads;
                const int r = chunk / kChunks;
                const int pos = first_pos + r;
                const bool valid = (kTotal % kThreads == 0 || chunk < kTotal) && r < valid_rows;
                if (cache.blocks) {
                    block[i] = valid ? ptx::ld_global_nc_early_s32(cache.blocks + pos / cache.page_size) : 0;
                    in_block[i] = valid ? pos % cache.page_size : 0;
                } else {
                    block[i] = 0;
                    in_block[i] = valid ? pos : 0;
                }
            }
        }
    }

    // Start the copy of the tile's rows [0, valid_rows), columns [0, valid_cols) from `cache` (K or V) into smem;
    // the rest is zero-filled.
    template <typename Elem, typename View>
    __device__ __forceinline__ void load_async(Elem* smem, const View& cache, const Elem* any_row, int valid_rows,
                                               int valid_cols, int tid) const {
#pragma unroll
        for (int i = 0; i < kIters; ++i) {
            const int chunk = tid + i * kThreads;
            if (kTotal % kThreads != 0 && chunk >= kTotal) break;
            const int r = chunk / kChunks;
            const int c = (chunk % kChunks) * kChunkElems;
            const bool valid = r < valid_rows && c < valid_cols;
            const Elem* src =
                cache.base + int64_t(block[i]) * cache.block_stride + int64_t(in_block[i]) * cache.row_stride + c;
            ptx::cp_async_16(ptx::smem_addr(smem + r * SmemRow<kHeadDim>::kStride + c), valid ? src : any_row, valid);
        }
    }
};

// The key tiles [begin, end) of split `split` out of `num_splits` over the tiles [first, last).
struct TileRange {
    int begin, end;
};
__device__ __forceinline__ TileRange split_tiles(int first, int last, int split, int num_splits) {
    const int per_split = (last - first + num_splits - 1) / num_splits;
    const int begin = min(last, first + split * per_split);
    return TileRange{begin, min(last, begin + per_split)};
}

// One block of a kv-cache attention kernel (the Ampere-class and the Hopper one): grid (packed row blocks, batch x kv
// head groups, splits). A block computes `head_group` consecutive kv heads from hk (1 but for the Hopper kernel's
// grouped paged tiles, KvcPlan::head_group): packed row r is row r % kv_rows of kv head hk + r / kv_rows, and row j
// of a kv head is token j / heads_per_kv of query head kv_head * heads_per_kv + j % heads_per_kv. The block has rows
// [m0, m0 + rows), and its split the key tiles `tiles` (of keys_per_tile keys; key column j is cache position
// leftpad + j) out of those its rows can see.
struct KvcBlock {
    int split, b, hk, heads_per_kv, kv_rows, packed_rows, m0, rows;
    CacheSeq seq;
    KeyRange first, last;  // keys visible to the block's first and last token (visible ranges grow with the token)
    TileRange tiles;
    TileRange unit_tiles;  // every split's: the tiles the block's rows see (the Hopper kernel's balanced splits)

    __device__ __forceinline__ KvcBlock(const AttnParams& p, int num_splits, int block_m, int keys_per_tile,
                                        int head_group = 1) {
        split = blockIdx.z;
        const int groups = p.nheads_k / head_group;
        b = blockIdx.y / groups, hk = blockIdx.y % groups * head_group;
        heads_per_kv = p.nheads / p.nheads_k;
        kv_rows = p.seqlen_q * heads_per_kv;
        packed_rows = kv_rows * head_group;
        m0 = blockIdx.x * block_m;
        rows = min(block_m, packed_rows - m0);
        seq = cache_seq(p, b);
        // A block of several kv heads holds every row of each (kv_rows * head_group <= block_m), so its first and last
        // rows are the first and the last token.
        first = visible_keys(token_of(m0), p.seqlen_q, seq.seqlen_k, p.window_left, p.window_right);
        last = visible_keys(token_of(m0 + rows - 1), p.seqlen_q, seq.seqlen_k, p.window_left, p.window_right);
        const int all_begin = static_cast<int>(first.begin / keys_per_tile);
        const int all_end =
            last.end > first.begin ? static_cast<int>((last.end + keys_per_tile - 1) / keys_per_tile) : all_begin;
        tiles = split_tiles(all_begin, all_end, split, num_splits);
        unit_tiles = TileRange{all_begin, all_end};
    }
    __device__ __forceinline__ int kv_head_of(int packed) const { return packed / kv_rows; }  // within the block's
    __device__ __forceinline__ int token_of(int packed) const { return packed % kv_rows / heads_per_kv; }
    __device__ __forceinline__ int head_of(int packed) const {
        return (hk + kv_head_of(packed)) * heads_per_kv + packed % heads_per_kv;
    }
};

// Where the queries come from: the rotated ones in the workspace (contiguous (batch, seqlen_q, nheads, head_dim)),
// else q itself.
template <typename Elem>
struct KvcQueries {
    const Elem* q;
    int64_t row_stride, head_stride, batch_stride;

    __device__ __forceinline__ KvcQueries(const AttnParams& p, const void* q_rot)
        : q(static_cast<const Elem*>(q_rot ? q_rot : p.q)),
          row_stride(q_rot ? int64_t(p.nheads) * p.head_dim : p.q_row_stride),
          head_stride(q_rot ? p.head_dim : p.q_head_stride),
          batch_stride(q_rot ? int64_t(p.seqlen_q) * row_stride : p.q_batch_stride) {}
    // Packed row `packed` of the block's (sequence, kv head).
    __device__ __forceinline__ const Elem* row(const KvcBlock& blk, int packed) const {
        return q + blk.b * batch_stride + blk.token_of(packed) * row_stride + blk.head_of(packed) * head_stride;
    }
};

// What a thread needs of each of its two rows of an m16 tile (packed rows `packed0` and packed0 + 8) for the score
// modifiers and masks: query token, visible keys, ALiBi slope, and the row's kv head within the block's.
struct KvcRowPair {
    int token[2];
    KeyRange keys[2];
    float slope[2];
    int kv_head[2];
};
// Rows past the block's packed rows (padding) get no slope.
__device__ __forceinline__ KvcRowPair kvc_row_pair(const AttnParams& p, const KvcBlock& blk, int packed0) {
    KvcRowPair r;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int packed = packed0 + 8 * half;
        r.token[half] = blk.token_of(packed);
        r.keys[half] = visible_keys(r.token[half], p.seqlen_q, blk.seq.seqlen_k, p.window_left, p.window_right);
        r.slope[half] = p.alibi_slopes && packed < blk.packed_rows
                            ? p.alibi_slopes[blk.b * p.alibi_batch_stride + blk.head_of(packed)]
                            : 0.f;
        r.kv_head[half] = blk.kv_head_of(packed);
    }
    return r;
}

// Where a tile's key-rows (its columns of scores) come from. A tile of one kv head holds key column c. A grouped tile
// (the Hopper kernel's, KvcPlan::head_group = 2^heads_shift kv heads) holds pieces of 2^piece_shift keys (kvc_box_rows:
// 16, or 8 with 8 kv heads), piece by piece, each piece of every kv head in turn (one copy brings a piece of all of
// them): column c is key (c >> (piece_shift + heads_shift) << piece_shift) + c % 2^piece_shift of kv head
// (c >> piece_shift) % 2^heads_shift. With heads_shift 0 that is key c of kv head 0. Asked per n8 column tile (nt:
// columns nt * 8 + x, x < 8; a piece is whole n8 tiles), so that the piece arithmetic is on the tile index, a constant
// of the unrolled loops.
struct KvcTileCols {
    static constexpr int kN8Shift = 3;  // columns an n8 tile: 2^3
    int heads_shift = 0, piece_shift = 4;
    __device__ __forceinline__ int key(int nt) const {  // of column nt * 8
        const int tiles_shift = piece_shift - kN8Shift;  // n8 tiles a piece: 2^tiles_shift
        return ((nt >> tiles_shift >> heads_shift) << piece_shift) | ((nt & ((1 << tiles_shift) - 1)) << kN8Shift);
    }
    __device__ __forceinline__ int kv_head(int nt) const {
        return (nt >> (piece_shift - kN8Shift)) & ((1 << heads_shift) - 1);
    }
};

// One m16 x (kNTiles x 8) score tile in the mma C layout (element i of s[nt]: row half i / 2, column nt * 8 + 2 * tig
// + i % 2): the score modifiers (softcap, or the scale, then ALiBi) where `transform`, then the masks where `masked`
// (the tile crosses some row's visible range). Column c is key col0 + c; with kGrouped, as `cols` places it among the
// block's kv heads (KvcTileCols), and a row's scores of the other kv heads' columns are masked on every tile.
template <int kNTiles, bool kGrouped = false>
__device__ __forceinline__ void kvc_prepare_scores(float (&s)[kNTiles][4], const AttnParams& p, const KvcRowPair& rows,
                                                   int col0, int tig, int seqlen_k, bool transform, bool masked,
                                                   float softcap_in, const KvcTileCols& cols = {}) {
    auto key_of = [&](int nt, int j) { return col0 + (kGrouped ? cols.key(nt) : nt * 8) + 2 * tig + j; };
    if (transform) {
        // ALiBi's distance in 32 bits (the lengths are int32): a row's origin once, then one subtraction a score.
        const int origin[2] = {rows.token[0] + seqlen_k - p.seqlen_q, rows.token[1] + seqlen_k - p.seqlen_q};
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float x = s[nt][i];
                x = p.softcap > 0.f ? p.softcap * ptx::tanh_fast(x * softcap_in) : x * p.scale;
                const int col = key_of(nt, i % 2);
                s[nt][i] = x + alibi_bias_at(rows.slope[i / 2], origin[i / 2] - col);
            }
    }
    if (masked) {
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int col = key_of(nt, j);
                    if (col < rows.keys[half].begin || col >= rows.keys[half].end) s[nt][2 * half + j] = -INFINITY;
                }
    }
    if constexpr (kGrouped) {  // every tile: a row sees its own kv head's columns alone
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
                if (cols.kv_head(nt) != rows.kv_head[half]) s[nt][2 * half] = s[nt][2 * half + 1] = -INFINITY;
    }
}

// Query rows rotate at length + i when the mask is causal or windowed, else all at length (FlashAttention's rule).
__device__ __forceinline__ bool rotate_queries_per_row(const AttnParams& p) {
    return p.causal || p.window_left >= 0 || p.window_right >= 0;
}

}  // namespace flashattn::kernels
