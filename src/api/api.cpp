// The public entry points: validate, then run on the backend where the tensors live.
#include <string>

#include "api/arguments.h"
#include "common/build_config.h"
#include "flashattn/flashattn.h"
#include "reference/reference.h"

#if FLASHATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/common/cuda_check.h"
#include "kernels/launch.h"
#endif

namespace flashattn {

namespace {

// CPU tensors: the reference, accumulating in fp64 for float64 inputs and fp32 otherwise.
reference::Accum cpu_accum(const AttnParams& p) {
    return p.dtype == ElemType::f64 ? reference::Accum::f64 : reference::Accum::f32;
}

#if FLASHATTN_WITH_CUDA
// Makes the tensors' device current for the duration of a call, and restores the caller's.
class DeviceGuard {
  public:
    explicit DeviceGuard(int device) {
        kernels::check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) kernels::check_cuda(cudaSetDevice(device), "cudaSetDevice");
        restore_ = previous_ != device;
    }
    ~DeviceGuard() {
        if (restore_) cudaSetDevice(previous_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    int previous_ = 0;
    bool restore_ = false;
};
#endif

#if !FLASHATTN_WITH_CUDA
[[noreturn]] void no_gpu_build() {
    throw Error(Status::unsupported,
                "this build of flashattn has no GPU kernels (built without CUDA): pass CPU tensors, or rebuild with "
                "nvcc available (FLASHATTN_ENABLE_CUDA=ON)");
}
#endif

void run(const api::Call& c) {
    if (c.empty) return;
    const AttnParams& p = c.params;
    if (c.on_cpu) {
        switch (p.op) {
            case OpKind::forward: reference::forward(p, cpu_accum(p)); return;
            case OpKind::backward: reference::backward(p, cpu_accum(p)); return;
            case OpKind::kvcache: reference::kvcache_forward(p, cpu_accum(p)); return;
        }
    }
#if FLASHATTN_WITH_CUDA
    DeviceGuard guard(c.device_index);
    switch (p.op) {
        case OpKind::forward: kernels::run_forward(p); return;
        case OpKind::backward: kernels::run_backward(p); return;
        case OpKind::kvcache:
            throw Error(Status::unsupported,
                        "kv-cache attention on the GPU is not implemented yet; CPU tensors use the reference");
    }
#else
    no_gpu_build();
#endif
}

size_t workspace_of(const api::Call& c) {
    if (c.empty || c.on_cpu) return 0;
#if FLASHATTN_WITH_CUDA
    DeviceGuard guard(c.device_index);
    switch (c.params.op) {
        case OpKind::forward: return kernels::forward_workspace_bytes(c.params);
        case OpKind::backward: return kernels::backward_workspace_bytes(c.params);
        case OpKind::kvcache: return 0;
    }
    return 0;
#else
    no_gpu_build();
#endif
}

}  // namespace

void forward(const ForwardArgs& args) { run(api::build_call(args)); }
void varlen_forward(const VarlenForwardArgs& args) { run(api::build_call(args)); }
void backward(const BackwardArgs& args) { run(api::build_call(args)); }
void varlen_backward(const VarlenBackwardArgs& args) { run(api::build_call(args)); }
void kvcache_forward(const KvCacheArgs& args) { run(api::build_call(args)); }

size_t workspace_size(const ForwardArgs& args) { return workspace_of(api::build_call(args)); }
size_t workspace_size(const VarlenForwardArgs& args) { return workspace_of(api::build_call(args)); }
size_t workspace_size(const BackwardArgs& args) { return workspace_of(api::build_call(args)); }
size_t workspace_size(const VarlenBackwardArgs& args) { return workspace_of(api::build_call(args)); }
size_t workspace_size(const KvCacheArgs& args) { return workspace_of(api::build_call(args)); }

const char* version() { return FLASHATTN_VERSION; }

}  // namespace flashattn
