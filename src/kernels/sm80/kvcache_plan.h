// How a kv-cache forward runs: the split count and where its scratch buffers live in the workspace. Computed on the
// host (kernels/dispatch.cpp), passed by value to the kernels.
#pragma once

#include <cstddef>

namespace flashattn::kernels {

struct KvcPlan {
    int num_splits = 1;
    void* q_rot = nullptr;         // rotated queries, contiguous (batch, seqlen_q, nheads, head_dim); null: no rotary
    float* o_accum = nullptr;      // num_splits > 1: partial outputs (num_splits, batch, nheads, seqlen_q, head_dim_v)
    float* lse_accum = nullptr;    // num_splits > 1: their LSEs (num_splits, batch, nheads, seqlen_q)
    size_t workspace_bytes = 0;
};

}  // namespace flashattn::kernels
