// The CUDA driver's functions, reached through the runtime (cudaGetDriverEntryPointByVersion): flashattn links the
// runtime alone, never libcuda, so a driver call the runtime does not wrap (cuCtxGetId, cuTensorMapEncodeTiled) is
// looked up by name once and called through its pointer.
#pragma once

#include <cuda_runtime_api.h>

namespace flashattn::kernels {

struct DriverEntry {
    void* function = nullptr;         // null where the driver lacks it, or the lookup failed
    cudaError_t error = cudaSuccess;  // the lookup's own error; the runtime's last error is the caller's to clear
};

// The driver's `name` with the signature it had in CUDA `abi_version` (12000 for 12.0).
DriverEntry driver_entry_point(const char* name, unsigned abi_version);

template <class Fn>
Fn driver_function(const DriverEntry& entry) {
    return reinterpret_cast<Fn>(entry.function);
}

}  // namespace flashattn::kernels
