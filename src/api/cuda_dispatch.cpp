// The GPU side of dispatch: the one place where a call on CUDA tensors is matched with a compiled kernel.
// kernels/launch.h picks the kernel by (architecture, dtype, head dim); builds without CUDA answer
// Status::unsupported.
#include <string>

#include "api/dispatch.h"
#include "common/build_config.h"

#if FLASHATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/common/cuda_check.h"
#include "kernels/launch.h"
#endif

namespace flashattn::api {

namespace {

const char* op_name(OpKind op) {
    switch (op) {
        case OpKind::forward: return "forward";
        case OpKind::backward: return "backward";
        case OpKind::kvcache: return "kvcache_forward";
        case OpKind::merge: return "merge_attention";
    }
    return "?";
}

#if FLASHATTN_WITH_CUDA
// Makes the tensors' GPU the current device for the call and restores the caller's afterwards.
class DeviceGuard {
  public:
    explicit DeviceGuard(int32_t device) {
        check(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) check(cudaSetDevice(device), ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
    }
    ~DeviceGuard() {
        int current = previous_;
        if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    // Also clears the runtime's last error, which a caller checking cudaGetLastError() after its own next launch
    // would otherwise take for that launch's failure.
    static void check(cudaError_t err, const char* what) {
        if (err != cudaSuccess) cudaGetLastError();
        kernels::check_cuda(err, what);
    }

    int previous_ = 0;
};

#else
[[noreturn]] void no_cuda(OpKind op) {
    throw Error(Status::unsupported,
                std::string(op_name(op)) +
                    ": this build of flashattn has no GPU support (configured without CUDA); pass CPU tensors, or "
                    "rebuild with nvcc installed and -DFLASHATTN_ENABLE_CUDA=ON");
}
#endif

}  // namespace

void cuda_dispatch(const AttnParams& p, int32_t device_index) {
#if FLASHATTN_WITH_CUDA
    DeviceGuard guard(device_index);
    if (p.op == OpKind::forward) kernels::run_forward(p);
    else if (p.op == OpKind::backward) kernels::run_backward(p);
    else if (p.op == OpKind::kvcache) kernels::run_kvcache(p);
    else if (p.op == OpKind::merge) kernels::run_merge(p);
    else throw Error(Status::internal, std::string("cuda_dispatch: unknown operation ") + op_name(p.op));
#else
    (void)device_index;
    no_cuda(p.op);
#endif
}

size_t cuda_workspace_bytes(const AttnParams& p, int32_t device_index) {
#if FLASHATTN_WITH_CUDA
    if (p.op == OpKind::merge) return 0;
    // A function of the sizes alone, but for split counts (the packed forward's, the kv-cache's, the deterministic
    // backward's, the Hopper forward's last wave, which reads the current device's SM count), which depend on the GPU.
    if (p.op == OpKind::forward && !kernels::use_packed_forward(p)) {
        int current = 0;  // no GPU answers (a query on a machine without one): nothing here depends on it
        if (cudaGetDevice(&current) != cudaSuccess) {
            cudaGetLastError();
            return kernels::forward_workspace_bytes(p);
        }
        DeviceGuard guard(device_index);  // the Hopper forward's split reads the tensors' device
        return kernels::forward_workspace_bytes(p);
    }
    DeviceGuard guard(device_index);
    if (p.op == OpKind::forward) return kernels::forward_workspace_bytes(p);
    if (p.op == OpKind::kvcache) return kernels::kvcache_workspace_bytes(p);
    return kernels::backward_workspace_bytes(p);
#else
    (void)device_index;
    no_cuda(p.op);
#endif
}

void cuda_zero_fill(const TensorView& t, int32_t device_index, void* stream) {
#if FLASHATTN_WITH_CUDA
    DeviceGuard guard(device_index);
    const auto s = static_cast<cudaStream_t>(stream);
    const size_t elem = dtype_size(t.dtype);
    const int last = t.ndim - 1;
    bool contiguous = true;
    for (int64_t d = last, want = 1; d >= 0; want *= t.shape[d], --d)
        if (t.shape[d] > 1 && t.stride[d] != want) contiguous = false;
    if (contiguous) {
        kernels::check_cuda(cudaMemsetAsync(t.data, 0, static_cast<size_t>(t.numel()) * elem, s), "cudaMemsetAsync");
        return;
    }
    // Planes of (second-last, last) dimensions, one 2D memset each; the other dimensions are walked here.
    const int rows_dim = last - 1;
    const size_t width = static_cast<size_t>(t.shape[last]) * elem;
    const size_t pitch = t.shape[rows_dim] > 1 ? static_cast<size_t>(t.stride[rows_dim]) * elem : width;
    int64_t index[kMaxDims] = {};
    const int64_t planes = t.numel() / (t.shape[last] * t.shape[rows_dim]);
    for (int64_t i = 0; i < planes; ++i) {
        int64_t offset = 0;
        for (int d = 0; d < rows_dim; ++d) offset += index[d] * t.stride[d];
        kernels::check_cuda(cudaMemset2DAsync(static_cast<unsigned char*>(t.data) + offset * static_cast<int64_t>(elem),
                                              pitch, 0, width, static_cast<size_t>(t.shape[rows_dim]), s),
                            "cudaMemset2DAsync");
        for (int d = rows_dim - 1; d >= 0; --d) {
            if (++index[d] < t.shape[d]) break;
            index[d] = 0;
        }
    }
#else
    (void)t, (void)device_index, (void)stream;
    no_cuda(OpKind::backward);
#endif
}

}  // namespace flashattn::api
