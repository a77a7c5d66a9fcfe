// The CPU reference backend: exact attention computed tile by tile (memory linear in sequence length), threaded
// over (batch, head). It is the oracle for every GPU test and the path the API takes for CPU tensors.
//
// Each entry point reads one validated AttnParams (src/common/params.h); element types f16, bf16, f32 and f64 are
// read through the params' dtype. Accumulation is fp32 by default, fp64 on request (tests).
#pragma once

#include "common/params.h"

namespace flashattn::reference {

enum class Accum { f32, f64 };

// Forward, padded or varlen (p.is_varlen): writes out, and softmax_lse / attn_probs when their pointers are set.
void forward(const AttnParams& p, Accum acc = Accum::f32);

// Backward: reads dout, q, k, v, out, softmax_lse; writes dq, dk, dv (GQA: dk/dv summed over the query heads of
// a group) and softmax_d when set. Dropout is regenerated from (seed, offset).
void backward(const AttnParams& p, Accum acc = Accum::f32);

// KV-cache forward: rotates and appends the new k/v into the cache (in place), rotates q, then attends.
void kvcache_forward(const AttnParams& p, Accum acc = Accum::f32);

// Merge of two results over disjoint keys by their LSEs (flashattn.h, MergeArgs), in double.
void merge(const AttnParams& p);

// Threads the reference uses (all hardware threads; FLASHATTN_CPU_THREADS overrides).
int num_threads();

}  // namespace flashattn::reference
