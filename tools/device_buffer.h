// A buffer on the run's device: a copy of a host tensor on the GPU, or the host tensor itself on the CPU.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

#include "common/build_config.h"
#include "flashattn/flashattn.h"
#include "support/host_tensor.h"

#if FLASHATTN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashattn::tools {

class DeviceBuffer {
  public:
    // Scratch of `bytes` bytes (uninitialised).
    DeviceBuffer(size_t bytes, DeviceType device) : device_(device), bytes_(bytes) { allocate(); }
    // A copy of `host` on `device` (on the CPU it aliases host's storage).
    DeviceBuffer(testing::HostTensor& host, DeviceType device) : device_(device), bytes_(host.nbytes()), host_(&host) {
        if (device_ == DeviceType::cpu) {
            data_ = host.data();
            return;
        }
        allocate();
#if FLASHATTN_WITH_CUDA
        check(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device");
#endif
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
#if FLASHATTN_WITH_CUDA
        if (device_ == DeviceType::cuda && data_) cudaFree(data_);
#endif
        if (device_ == DeviceType::cpu && !host_) std::free(data_);
    }

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }

    // The host tensor's view, pointing at this buffer.
    TensorView view() const {
        TensorView t = host_->view();
        t.data = data_;
        t.device = device_;
        return t;
    }

    void copy_to(testing::HostTensor& host) const {
        if (device_ == DeviceType::cpu) {
            if (host.data() != data_) std::memcpy(host.data(), data_, bytes_);
            return;
        }
#if FLASHATTN_WITH_CUDA
        check(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
#endif
    }

  private:
    void allocate() {
        if (bytes_ == 0) return;
        if (device_ == DeviceType::cpu) {
            data_ = std::malloc(bytes_);
            return;
        }
#if FLASHATTN_WITH_CUDA
        check(cudaMalloc(&data_, bytes_), "cudaMalloc");
#endif
    }
#if FLASHATTN_WITH_CUDA
    static void check(cudaError_t err, const char* what) {
        if (err != cudaSuccess) throw Error(Status::cuda_error, std::string(what) + ": " + cudaGetErrorString(err));
    }
#endif

    DeviceType device_;
    size_t bytes_ = 0;
    testing::HostTensor* host_ = nullptr;
    void* data_ = nullptr;
};

}  // namespace flashattn::tools
