// The Hopper forward's host side (sm90/fwd_launch.cu): which problems it takes, and its launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/params.h"

namespace flashattn::kernels {

// Whether the Hopper forward computes p: float16/bfloat16, head_dim == head_dim_v <= 256 or head_dim <= 192 with
// head_dim_v <= 128 (multiples of 8), dense or varlen batches, causal and window masks, softcap, ALiBi, GQA;
// pointers and strides the copy engine can address (16-byte multiples). Dropout and attention probabilities stay
// with the Ampere-class kernel. The device (compute capability 9.0) and the build (sm_90a compiled) are the
// dispatch's checks.
bool sm90_forward_handles(const AttnParams& p);

// The schedule the launch takes for p unless FLASHATTN_SM90_SCHEDULE names one: "serial1", "specialised" or
// "specialised3".
const char* sm90_default_schedule(const AttnParams& p);

// Whether the specialised schedule takes its wide key tiles for p (176 keys up to head dim 128, 80 at 256) unless
// FLASHATTN_SM90_BLOCK_N or FLASHATTN_SM90_PERSISTENT decide.
bool sm90_wide_key_tiles(const AttnParams& p);

// Whether the specialised schedule runs its persistent kernel for p unless FLASHATTN_SM90_PERSISTENT decides: head
// dims 65-128, rows seeing fewer than 3072 keys on average, no varlen, an output the copy engine can address.
bool sm90_default_persistent(const AttnParams& p);

// Whether the specialised schedule's consumer warpgroups take turns issuing their products for p: yes up to head dim
// 128 (and at 192/128), at head dim 256 only where rows see fewer than 2048 keys on average; never under
// FLASHATTN_SM90_SCHEDULE=specialised_free.
bool sm90_takes_turns(const AttnParams& p);

void launch_fwd_sm90(const AttnParams& p);

// The workspace launch_fwd_sm90 uses for p: the last wave's split parts (fwd_tail_split.cuh), 0 where it does not
// split. Given less, the launch runs the tiles whole.
size_t sm90_forward_workspace_bytes(const AttnParams& p);

// Launches so far in this process that split their last wave (FLASHATTN_SM90_TAIL_SPLIT: "0" never, "R,K" the last
// R work tiles in K parts): lets a test tell that the split ran.
int64_t sm90_forward_tail_splits();

// Launches so far in this process: lets a test tell that the Hopper path, not the fallback, computed its case.
int64_t sm90_forward_launches();

}  // namespace flashattn::kernels
