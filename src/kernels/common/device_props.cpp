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
    DeviceProps d{device, 0, 0, 0, 0, 0};
    check_cuda(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device),
               "cudaDeviceGetAttribute");
    int l2 = 0;
    check_cuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute");
    d.l2_bytes = l2;
    // Not every platform reports the memory's clock: a failed query reads as an unknown bandwidth, not an error.
    int memory_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
        (void)cudaGetLastError();
        memory_khz = bus_bits = 0;
    }
    constexpr int64_t kTransfersPerClock = 2, kBitsPerByte = 8, kHzPerKhz = 1000;
    d.dram_bytes_per_s = kTransfersPerClock * int64_t(memory_khz) * kHzPerKhz * bus_bits / kBitsPerByte;
    const std::lock_guard<std::mutex> lock(mutex);
    known.emplace(device, d);
    return d;
}

}  // namespace flashattn::kernels
