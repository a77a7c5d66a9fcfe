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

// causal sets window_right = 0 (also over a larger window_right, as FlashAttention does); a left window reaching
// past the first key of every row (window_left >= seqlen_k) is unbounded, exactly, and so is a right window reaching
// past the last key of every row: row 0 sees up to key seqlen_k - seqlen_q + window_right, the last one when
// window_right >= seqlen_q. Beyond keeping the meaning, this keeps the kernels' window arithmetic (position shift plus
// window, in 32 bits) from overflowing for windows near INT32_MAX. seqlen_q and seqlen_k are the largest of a batch.
inline Window normalized_window(const AttentionOptions& o, int64_t seqlen_q, int64_t seqlen_k) {
    Window w{o.window_left, o.causal ? 0 : o.window_right};
    if (w.left >= seqlen_k) w.left = -1;
    if (w.right >= seqlen_q) w.right = -1;
    return w;
}

}  // namespace flashattn::api
