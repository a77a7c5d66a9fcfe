// What every kv-cache kernel needs: where a sequence's cache positions live (dense or paged) and how long it is.
//
// Positions are absolute cache positions (src/reference/kvcache.cpp): sequence b's cache holds [leftpad, length);
// new key t goes to position length + t; attention reads positions [leftpad, length + seqlen_new), key column j
// being position leftpad + j.
#pragma once

#include <cstdint>

#include "common/params.h"

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

// Query rows rotate at length + i when the mask is causal or windowed, else all at length (FlashAttention's rule).
__device__ __forceinline__ bool rotate_queries_per_row(const AttnParams& p) {
    return p.causal || p.window_left >= 0 || p.window_right >= 0;
}

}  // namespace flashattn::kernels
