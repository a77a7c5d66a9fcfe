// What validation learns about a call: where it runs and its sizes. Params building reads it with the arguments.
#pragma once

#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn::api {

// The one device all tensors of a call live on.
struct Placement {
    DeviceType device = DeviceType::cpu;
    int32_t index = 0;
    bool on_cpu() const { return device == DeviceType::cpu; }
};

struct AttnDims {
    Placement where;
    DType dtype = DType::f16;  // of the data tensors
    int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, nheads = 0, nheads_k = 0, head_dim = 0, head_dim_v = 0;
    // varlen
    bool is_varlen = false;
    int64_t total_q = 0, total_k = 0;
    // kv-cache
    bool paged = false;
    int64_t batch_cache = 0;       // dense: entries of the cache; paged: physical blocks
    int64_t page_size = 0, max_blocks_per_seq = 0;
    int64_t seqlen_new = 0;        // rows of the new k/v, 0 when absent
    int64_t cache_seqlen = 0;      // the scalar length after defaulting (-1 -> the whole cache)
    int64_t rotary_dim = 0, seqlen_ro = 0;

    // Nothing to compute: every output is empty.
    bool empty_outputs() const { return batch == 0 || nheads == 0 || seqlen_q == 0; }
};

}  // namespace flashattn::api
