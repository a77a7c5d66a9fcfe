// Looking up the CUDA driver's functions by name (driver_entry.h).
#include "kernels/common/driver_entry.h"

namespace flashattn::kernels {

DriverEntry driver_entry_point(const char* name, unsigned abi_version) {
    DriverEntry entry;
    cudaDriverEntryPointQueryResult found{};
    entry.error = cudaGetDriverEntryPointByVersion(name, &entry.function, abi_version, cudaEnableDefault, &found);
    if (entry.error != cudaSuccess || found != cudaDriverEntryPointSuccess) entry.function = nullptr;
    return entry;
}

}  // namespace flashattn::kernels
