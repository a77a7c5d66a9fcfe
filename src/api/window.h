// The attention window after normalisation, shared by validation (which needs it for the rotary positions) and
// params building.
#pragma once

#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn::api {

struct Window {
    int32_t left = -1, right = -1;  // -1: unbounded
    bool bounded() const { return left >= 0 || right >= 0; }
};

// FlashAttention's rule: a window of seqlen_k or more on either side is unbounded; then causal sets window_right = 0
// (also over a larger window_right). For the left side that is exact (every row's window already starts before key
// 0); for the right side it is exact when seqlen_q <= seqlen_k + 1, and otherwise FlashAttention's definition, which
// users of it expect (the kv-cache path also rotates the queries per row only when the window stays bounded).
// It also keeps the kernels' 32-bit window arithmetic (position shift plus window) from overflowing for windows near
// INT32_MAX. seqlen_k is the largest of a batch (the cache's capacity for the kv-cache path).
inline Window normalized_window(const AttentionOptions& o, int64_t seqlen_k) {
    Window w{o.window_left >= seqlen_k ? -1 : o.window_left, o.window_right >= seqlen_k ? -1 : o.window_right};
    if (o.causal) w.right = 0;
    return w;
}

}  // namespace flashattn::api
