// Whether two strided views share memory. Outputs must not alias inputs (a backend reads an input after it may
// have written an output) nor each other; views that interleave without touching, such as q, k and v of one packed
// qkv buffer or dq, dk and dv of one packed gradient, are told apart exactly.
#pragma once

#include "flashattn/flashattn.h"

namespace flashattn::api {

// True when some byte of `a` may also be a byte of `b`. Exact (a bounded search over the index equations) unless
// the search grows past a fixed number of steps, in which case it answers true.
bool may_overlap(const TensorView& a, const TensorView& b);

// True when two different elements of `t` may share a byte (a broadcast stride 0, or strides that interleave
// dimensions): such a view can be read but never written.
bool self_overlaps(const TensorView& t);

}  // namespace flashattn::api
