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
    // The Hopper kernel with more units of work than resident blocks: the counter its blocks draw units from (the
    // launch zeroes it). Null: a block a unit. It is the workspace's last bytes, which a caller may leave out.
    unsigned* unit_counter = nullptr;
    int resident_blocks = 0;       // with the counter: the grid (SMs x blocks an SM)
    size_t workspace_bytes = 0;    // what workspace_size() asks for
    size_t required_bytes = 0;     // of which the run cannot do without (all but the unit counter)
};

}  // namespace flashattn::kernels
