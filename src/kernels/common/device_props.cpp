#include "kernels/common/device_props.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "kernels/common/cuda_check.h"

namespace flashattn::kernels {

DeviceProps current_device_props() {
    static std::mutex mutex;
    static std::map<int, DeviceProps> known;
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    {
        const std::lock_guard<std::mutex> lock(mutex);
        if (const auto it = known.find(device); it != known.end()) return it->second;
    }
    DeviceProps d{device, 0, 0, 0, 0};
    check_cuda(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device),
               "cudaDeviceGetAttribute");
    int l2 = 0;
    check_cuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute");
    d.l2_bytes = l2;
    const std::lock_guard<std::mutex> lock(mutex);
    known.emplace(device, d);
    return d;
}

}  // namespace flashattn::kernels
