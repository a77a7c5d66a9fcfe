// The function attributes a kernel's launch needs: a dynamic shared-memory limit above the default 48 KB, and clusters
// of more than the portable 8 blocks. They are set once per kernel and CUDA context, not before every launch.
//
// Why: the two cudaFuncSetAttribute calls of a Hopper kv-cache launch took 0.61 us of host time on the H100 machine,
// where the whole C++ call took 7.4-9.6 us (bench/host_path.cu; bench/results/2026-11-27_h100_session30.md, run 2).
// The attributes belong to a context: a caller's cudaDeviceReset, or a launch on another device, meets a context
// where they are unset. So what was set is remembered by the driver's context id (cuCtxGetId: unique for the life of
// the process, never reused); where that id cannot be had, the attributes are set on every call, as before (and so
// with FLASHATTN_FUNC_ATTRIBUTES_EVERY_CALL=1, for measurements).
#pragma once

namespace flashattn::kernels {

// Raises `kernel`'s dynamic shared-memory limit to at least `dynamic_smem_bytes` and, with non_portable_clusters,
// allows clusters above 8, in the current context. `what` names the kernel in an error.
void ensure_func_attributes(const void* kernel, int dynamic_smem_bytes, bool non_portable_clusters, const char* what);

template <class Kernel>
void ensure_func_attributes(Kernel* kernel, int dynamic_smem_bytes, bool non_portable_clusters, const char* what) {
    ensure_func_attributes(reinterpret_cast<const void*>(kernel), dynamic_smem_bytes, non_portable_clusters, what);
}

}  // namespace flashattn::kernels
