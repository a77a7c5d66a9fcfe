#include "kernels/gpu_test_util.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "common/build_config.h"

#if FLASHATTN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashattn::testing {

namespace {

constexpr size_t kMinAllocationBytes = 256;
constexpr int kPoisonByte = 0xFF;

#if FLASHATTN_WITH_CUDA
cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }
#endif

#if !FLASHATTN_WITH_CUDA
[[noreturn]] void no_cuda_build(const char* what) {
    throw std::runtime_error(std::string(what) + ": flashattn was built without CUDA");
}
#endif

std::string detect_gpu() {
#if !FLASHATTN_WITH_CUDA
    return "flashattn was built without CUDA (FLASHATTN_ENABLE_CUDA=OFF)";
#else
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear it: nothing else will run
        return std::string("no CUDA GPU visible (") + cudaGetErrorString(err) + ")";
    }
    if (count == 0) return "no CUDA GPU visible (cudaGetDeviceCount found 0 devices)";
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        const cudaError_t last = cudaGetLastError();
        return std::string("no CUDA GPU visible (cannot query device: ") + cudaGetErrorString(last) + ")";
    }
    if (major < kMinComputeMajor)
        return "GPU sm_" + std::to_string(major) + std::to_string(minor) + " is below sm_" +
               std::to_string(kMinComputeMajor) + "0";
    return "";
#endif
}

}  // namespace

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old, had_ = true;
    setenv(name, value, 1);
}
ScopedEnv::~ScopedEnv() {
    if (had_)
        setenv(name_, saved_.c_str(), 1);
    else
        unsetenv(name_);
}

const std::string& gpu_skip_reason() {
    static const std::string reason = detect_gpu();
    return reason;
}

bool sm90a_kernels_run_here() {
    static const bool here = [] {
#if FLASHATTN_WITH_CUDA
        if (!gpu_skip_reason().empty()) return false;
        int device = 0, major = 0, minor = 0;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        return major == 9 && minor == 0 && std::strstr(FLASHATTN_CUDA_ARCHS, "90a") != nullptr;
#else
        return false;
#endif
    }();
    return here;
}

void cuda_check(int status, const std::string& what) {
#if FLASHATTN_WITH_CUDA
    const auto err = static_cast<cudaError_t>(status);
    if (err != cudaSuccess)
        throw std::runtime_error(what + ": CUDA error " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
#else
    if (status != 0) no_cuda_build(what.c_str());
#endif
}

void cuda_sync_check(const std::string& what) {
#if FLASHATTN_WITH_CUDA
    cuda_check(cudaGetLastError(), what + " (launch)");
    cuda_check(cudaDeviceSynchronize(), what + " (execution)");
#else
    (void)what;
#endif
}

void cuda_stream_sync(void* stream, const std::string& what) {
#if FLASHATTN_WITH_CUDA
    cuda_check(cudaStreamSynchronize(as_stream(stream)), what + " (stream synchronize)");
#else
    (void)stream;
    (void)what;
#endif
}

void capture_and_replay(void* stream, const std::function<void()>& enqueue) {
#if FLASHATTN_WITH_CUDA
    const cudaStream_t s = as_stream(stream);
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    cudaGraph_t graph = nullptr;
    try {
        enqueue();
    } catch (...) {
        cudaStreamEndCapture(s, &graph);  // leave the stream usable; the first error is the one reported
        if (graph != nullptr) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
    }
    cuda_check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture (was work sent outside the capturing stream?)");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    if (inst != cudaSuccess) cudaGraphDestroy(graph);
    cuda_check(inst, "cudaGraphInstantiate");
    const cudaError_t launch = cudaGraphLaunch(exec, s);
    const cudaError_t sync = launch == cudaSuccess ? cudaStreamSynchronize(s) : launch;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cuda_check(launch, "cudaGraphLaunch");
    cuda_check(sync, "cudaStreamSynchronize (graph replay)");
#else
    (void)stream;
    (void)enqueue;
    no_cuda_build("capture_and_replay");
#endif
}

// ----- DeviceBuffer ------------------------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
#if FLASHATTN_WITH_CUDA
    cuda_check(cudaMalloc(&data_, bytes < kMinAllocationBytes ? kMinAllocationBytes : bytes),
               "cudaMalloc(" + std::to_string(bytes) + " bytes)");
#else
    no_cuda_build("DeviceBuffer");
#endif
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() noexcept {
#if FLASHATTN_WITH_CUDA
    if (data_ != nullptr) {
        const cudaError_t err = cudaFree(data_);
        if (err != cudaSuccess) ADD_FAILURE() << "cudaFree: " << cudaGetErrorString(err);
    }
#endif
    data_ = nullptr;
    bytes_ = 0;
}

void DeviceBuffer::poison(void* stream) {
    if (bytes_ == 0) return;
#if FLASHATTN_WITH_CUDA
    cuda_check(cudaMemsetAsync(data_, kPoisonByte, bytes_, as_stream(stream)), "cudaMemsetAsync (poison)");
    if (stream == nullptr) cuda_check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (poison)");
#else
    (void)stream;
    no_cuda_build("DeviceBuffer::poison");
#endif
}

void DeviceBuffer::upload(const void* host, size_t bytes, void* stream) {
    if (bytes > bytes_) throw std::invalid_argument("DeviceBuffer::upload: more bytes than the buffer holds");
    if (bytes == 0) return;
#if FLASHATTN_WITH_CUDA
    if (stream == nullptr)
        cuda_check(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
    else
        cuda_check(cudaMemcpyAsync(data_, host, bytes, cudaMemcpyHostToDevice, as_stream(stream)),
                   "cudaMemcpyAsync host to device");
#else
    (void)host;
    (void)stream;
    no_cuda_build("DeviceBuffer::upload");
#endif
}

void DeviceBuffer::download(void* host, size_t bytes, void* stream) const {
    if (bytes > bytes_) throw std::invalid_argument("DeviceBuffer::download: more bytes than the buffer holds");
    if (bytes == 0) return;
#if FLASHATTN_WITH_CUDA
    if (stream == nullptr)
        cuda_check(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
    else
        cuda_check(cudaMemcpyAsync(host, data_, bytes, cudaMemcpyDeviceToHost, as_stream(stream)),
                   "cudaMemcpyAsync device to host");
#else
    (void)host;
    (void)stream;
    no_cuda_build("DeviceBuffer::download");
#endif
}

// ----- DeviceTensor ------------------------------------------------------------------------------------------------

DeviceTensor::DeviceTensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
    if (shape_.empty() || shape_.size() > static_cast<size_t>(kMaxDims))
        throw std::invalid_argument("DeviceTensor: rank must be 1.." + std::to_string(kMaxDims));
    buffer_ = DeviceBuffer(nbytes());
}

int64_t DeviceTensor::numel() const {
    if (shape_.empty()) return 0;
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    return n;
}

DeviceTensor DeviceTensor::upload(const HostTensor& host, void* stream) {
    DeviceTensor t(host.dtype(), host.shape());
    t.buffer_.upload(host.data(), host.nbytes(), stream);
    return t;
}

HostTensor DeviceTensor::download(void* stream) const {
    HostTensor host(dtype_, shape_);
    download_into(host, stream);
    return host;
}

void DeviceTensor::download_into(HostTensor& host, void* stream) const {
    if (host.dtype() != dtype_ || host.nbytes() != nbytes())
        throw std::invalid_argument("DeviceTensor::download_into: dtype or size differs");
    buffer_.download(host.data(), nbytes(), stream);
}

TensorView DeviceTensor::view() const {
    TensorView t;
    t.data = buffer_.data();
    t.dtype = dtype_;
    t.device = DeviceType::cuda;
    t.device_index = 0;
    t.ndim = static_cast<int32_t>(shape_.size());
    int64_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
        t.shape[d] = shape_[d];
        t.stride[d] = stride;
        stride *= shape_[d];
    }
#if FLASHATTN_WITH_CUDA
    cuda_check(cudaGetDevice(&t.device_index), "cudaGetDevice");
#endif
    return t;
}

TensorView DeviceTensor::strided_view(int64_t offset, std::vector<int64_t> shape, std::vector<int64_t> stride) const {
    if (shape.size() != stride.size() || shape.empty() || shape.size() > static_cast<size_t>(kMaxDims))
        throw std::invalid_argument("DeviceTensor::strided_view: bad rank");
    TensorView t = view();
    t.data = static_cast<char*>(buffer_.data()) + offset * static_cast<int64_t>(dtype_size(dtype_));
    t.ndim = static_cast<int32_t>(shape.size());
    for (int d = 0; d < t.ndim; ++d) {
        t.shape[d] = shape[d];
        t.stride[d] = stride[d];
    }
    return t;
}

// ----- CudaStream --------------------------------------------------------------------------------------------------

CudaStream::CudaStream(bool non_blocking) {
#if FLASHATTN_WITH_CUDA
    cudaStream_t s = nullptr;
    if (non_blocking)
        cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    else
        cuda_check(cudaStreamCreate(&s), "cudaStreamCreate");
    stream_ = s;
#else
    (void)non_blocking;
    no_cuda_build("CudaStream");
#endif
}

CudaStream::~CudaStream() {
#if FLASHATTN_WITH_CUDA
    if (stream_ != nullptr) {
        const cudaError_t err = cudaStreamDestroy(as_stream(stream_));
        if (err != cudaSuccess) ADD_FAILURE() << "cudaStreamDestroy: " << cudaGetErrorString(err);
    }
#endif
}

void CudaStream::synchronize() const {
#if FLASHATTN_WITH_CUDA
    cuda_check(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize");
#endif
}

}  // namespace flashattn::testing
