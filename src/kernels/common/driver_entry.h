// The CUDA driver's functions, reached through the runtime (cudaGetDriverEntryPointByVersion): flashattn links the
// runtime alone, never libcuda, so a driver call the runtime does not wrap (cuCtxGetId, cuTensorMapEncodeTiled) is
// looked up by name once and called through its pointer.
#pragma once

namespace flashattn::kernels {

// The driver's `name` with the signature it had in CUDA `abi_version` (12000 for 12.0); null where the driver lacks
// it. A failed lookup leaves no error behind in the runtime (cudaGetLastError is cleared).
void* driver_entry_point(const char* name, unsigned abi_version);

template <class Fn>
Fn driver_function(const char* name, unsigned abi_version) {
    return reinterpret_cast<Fn>(driver_entry_point(name, abi_version));
}

}  // namespace flashattn::kernels
