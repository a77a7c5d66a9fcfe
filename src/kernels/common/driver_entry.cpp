// Looking up the CUDA driver's functions by name (driver_entry.h).
#include "kernels/common/driver_entry.h"

#include <cuda_runtime_api.h>

namespace flashattn::kernels {

void* driver_entry_point(const char* name, unsigned abi_version) {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion(name, &ptr, abi_version, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return ptr;
}

}  // namespace flashattn::kernels
