// What the launches ask of the current CUDA device (its SM count, compute capability, L2 size), asked of the runtime
// once per device and kept.
#pragma once

#include <cstdint>

namespace flashattn::kernels {

struct DeviceProps {
    int device;
    int sm_count;
    int cc_major, cc_minor;
    int64_t l2_bytes;  // the L2 cache's size
};

// The current device's (cudaGetDevice); throws flashattn::Error where the runtime fails.
DeviceProps current_device_props();

}  // namespace flashattn::kernels
