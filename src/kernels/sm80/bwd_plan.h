// How the backward uses its workspace: the fp32 dQ accumulator (one copy per split in deterministic mode) and,
// when the caller did not ask for softmax_d, the D = rowsum(dO * O) buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"
#include "common/params.h"

namespace flashattn::kernels {

// The smallest key tile of any backward shape (bwd_launch.cuh): bounds the useful number of splits.
constexpr int kBwdMinBlockN = 64;

struct BwdPlan {
    int n_splits = 1;          // copies of the dQ accumulator
    int64_t split_stride = 0;  // floats between copies
    float* dq_accum = nullptr;
    float* softmax_d = nullptr;
    size_t workspace_bytes = 0;
};

// Rows of q: batch * seqlen_q, or total_q for varlen. The dQ accumulator's (row, head, dim) layout holds them in this
// order, followed by kDqAccumPadRows query rows (of nheads x head-dim bucket floats each) that no pass reads.
FLASHATTN_HD int64_t q_rows(const AttnParams& p) { return p.is_varlen ? p.total_q : int64_t(p.batch) * p.seqlen_q; }

// The padding lets the backward kernel add a whole query tile to the accumulator without a per-row guard (straight-line
// reductions the compiler can schedule among the next products): the rows of a tile past the end of its sequence add
// exact zeros (their Q and dO rows are zero-filled, LSE +inf, D 0, so P and dS are 0 for finite K and V), into the
// next sequence's rows or, for the last sequence, into the padding. A K or V holding Inf or NaN makes those rows NaN,
// and then the first rows of the next sequence's dQ too (with a row guard they stayed inside the sequence).
constexpr int kDqAccumPadRows = 128;  // at least every backward kBlockM (bwd_launch.cuh checks)
FLASHATTN_HD int64_t accum_rows(const AttnParams& p) { return q_rows(p) + kDqAccumPadRows; }

// The plan for p on a device with `sm_count` multiprocessors; pointers are set when p.workspace is.
BwdPlan make_bwd_plan(const AttnParams& p, int sm_count);

}  // namespace flashattn::kernels
