// GPU test support: detecting a usable GPU (tests skip, with the reason, where there is none), device memory that
// owns its allocation, and every CUDA runtime call checked.
//
// This header names no CUDA type (streams are void*), so test files need not include the CUDA headers.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "support/host_tensor.h"

namespace flashattn::testing {

// Compute capability the kernels need.
constexpr int kMinComputeMajor = 8;

// Why the GPU tests cannot run here, or "" when a GPU of compute capability >= 8.0 is visible. Computed once.
const std::string& gpu_skip_reason();

// Whether the sm_90a kernels (the Hopper forward and kv-cache kernels) run here: a GPU of compute capability 9.0 and
// sm_90a in this build's architectures. Computed once.
bool sm90a_kernels_run_here();

// Every GPU test derives from this: SetUp skips the test, with the reason, when no usable GPU is visible.
class GpuTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (const std::string& reason = gpu_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
    }
};

// Sets an environment variable for one scope (the dispatch reads its FLASHATTN_* choices at each call), restoring
// what was there.
class ScopedEnv {
  public:
    ScopedEnv(const char* name, const char* value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

  private:
    const char* name_;
    std::string saved_;
    bool had_ = false;
};

// Throws std::runtime_error naming `what` and the CUDA error if `status` (a cudaError_t) is not cudaSuccess.
void cuda_check(int status, const std::string& what);
// Waits for the device and checks both the launch and the execution status of everything queued so far.
void cuda_sync_check(const std::string& what);
// Waits for one stream (nullptr: the default stream) and checks its status.
void cuda_stream_sync(void* stream, const std::string& what);
// Captures what `enqueue` puts on `stream` into a CUDA graph (global capture mode: work sent to any other stream,
// or a synchronising call, fails the capture), then launches the graph on the stream and waits for it.
void capture_and_replay(void* stream, const std::function<void()>& enqueue);

// Raw device memory. Never null, even for 0 bytes (a 256-byte minimum), so that empty tensors still have an address.
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    ~DeviceBuffer();

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }

    // Every byte 0xFF: a NaN in fp16, bf16 and fp32, so elements a kernel failed to write stay visible.
    void poison(void* stream = nullptr);
    void upload(const void* host, size_t bytes, void* stream = nullptr);
    void download(void* host, size_t bytes, void* stream = nullptr) const;

  private:
    void release() noexcept;
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

// A contiguous device tensor: a DeviceBuffer with a dtype and a shape.
class DeviceTensor {
  public:
    DeviceTensor() = default;
    DeviceTensor(DType dtype, std::vector<int64_t> shape);
    // A device copy of `host`.
    static DeviceTensor upload(const HostTensor& host, void* stream = nullptr);

    DType dtype() const { return dtype_; }
    const std::vector<int64_t>& shape() const { return shape_; }
    int64_t numel() const;
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
    void* data() const { return buffer_.data(); }

    void poison(void* stream = nullptr) { buffer_.poison(stream); }
    // A host copy (synchronous unless a stream is given, in which case the caller synchronises before reading).
    HostTensor download(void* stream = nullptr) const;
    void download_into(HostTensor& host, void* stream = nullptr) const;

    // The whole tensor, contiguous, as a CUDA view.
    TensorView view() const;
    // A strided CUDA view into this tensor: `offset` elements from the start, with the given shape and strides.
    TensorView strided_view(int64_t offset, std::vector<int64_t> shape, std::vector<int64_t> stride) const;

  private:
    DType dtype_ = DType::f32;
    std::vector<int64_t> shape_;
    DeviceBuffer buffer_;
};

// The workspace a call asks for, poisoned (a kernel must not rely on its contents), and the context naming it.
struct Workspace {
    DeviceBuffer buffer;
    ExecutionContext ctx;
};
template <class Args>
Workspace make_workspace(const Args& args, void* stream = nullptr) {
    Workspace w;
    const size_t bytes = workspace_size(args);
    w.ctx.stream = stream;
    if (bytes > 0) {
        w.buffer = DeviceBuffer(bytes);
        w.buffer.poison(stream);
        w.ctx.workspace = w.buffer.data();
        w.ctx.workspace_bytes = bytes;
    }
    return w;
}

// A CUDA stream owned by the test (cudaStreamCreate, or non-blocking with respect to the legacy default stream).
class CudaStream {
  public:
    explicit CudaStream(bool non_blocking = false);
    CudaStream(const CudaStream&) = delete;
    CudaStream& operator=(const CudaStream&) = delete;
    ~CudaStream();
    void* get() const { return stream_; }
    void synchronize() const;

  private:
    void* stream_ = nullptr;
};

}  // namespace flashattn::testing
