// What the launches ask of the current CUDA device (its SM count, compute capability, L2 size, memory bandwidth),
// asked of the runtime once per device and kept.
#pragma once

#include <cstdint>

namespace flashattn::kernels {

struct DeviceProps {
    int device;
    int sm_count;
    int cc_major, cc_minor;
    int64_t l2_bytes;  // the L2 cache's size
    // The memory's peak bandwidth by its clock and bus width (two transfers a clock), 0 where the runtime does not
    // say: an H100 SXM's 3.35 TB/s, an H200's 4.8 TB/s.
    int64_t dram_bytes_per_s;
};

// The current device's (cudaGetDevice); throws flashattn::Error where the runtime fails.
DeviceProps current_device_props();

}  // namespace flashattn::kernels
