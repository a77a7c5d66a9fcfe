#include "api/checks.h"

#include <limits>
#include <sstream>

namespace flashattn::api {

namespace {
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kHeadDimMultiple = 8;
constexpr uintptr_t kCudaAlignBytes = 16;  // the kernels' widest access
}  // namespace

void fail(const std::string& message) { throw Error(Status::invalid_argument, message); }

std::string shape_str(const TensorView& t) {
    std::ostringstream os;
    os << '(';
    for (int d = 0; d < t.ndim; ++d) os << (d ? ", " : "") << t.shape[d];
    os << ')';
    return os.str();
}

std::string device_str(DeviceType device, int32_t index) {
    return device == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

void expect_present(const TensorView& t, const char* name) {
    if (!t.present()) fail(std::string(name) + ": required, but not given");
}

void expect_shape(const TensorView& t, const char* name, std::initializer_list<Dim> dims) {
    expect_present(t, name);
    bool ok = t.ndim == static_cast<int32_t>(dims.size());
    int d = 0;
    for (const Dim& dim : dims) {
        if (ok && dim.size != kAnySize && t.shape[d] != dim.size) ok = false;
        ++d;
    }
    for (int i = 0; ok && i < t.ndim; ++i)
        if (t.shape[i] < 0) ok = false;
    if (ok) return;
    std::ostringstream os;
    os << name << ": expected shape (";
    d = 0;
    for (const Dim& dim : dims) {
        os << (d++ ? ", " : "") << dim.label;
        if (dim.size != kAnySize) os << '=' << dim.size;
    }
    os << "), got " << shape_str(t);
    fail(os.str());
}

void expect_dtype(const TensorView& t, const char* name, DType dtype) {
    if (t.dtype != dtype)
        fail(std::string(name) + ": expected dtype " + dtype_name(dtype) + ", got " + dtype_name(t.dtype));
}

void expect_device(const TensorView& t, const char* name, DeviceType device, int32_t index) {
    if (t.device != device || (device == DeviceType::cuda && t.device_index != index))
        fail(std::string(name) + ": expected a tensor on " + device_str(device, index) + " (where q is), got one on " +
             device_str(t.device, t.device_index));
}

void expect_layout(const TensorView& t, const char* name) {
    for (int d = 0; d < t.ndim; ++d)
        if (t.stride[d] < 0)
            fail(std::string(name) + ": strides must be non-negative, got " + std::to_string(t.stride[d]) +
                 " in dimension " + std::to_string(d));
    if (t.shape[t.ndim - 1] > 1 && t.stride[t.ndim - 1] != 1)
        fail(std::string(name) + ": the last dimension must be contiguous (stride 1), got stride " +
             std::to_string(t.stride[t.ndim - 1]));
    if (t.device != DeviceType::cuda || t.numel() == 0) return;
    if (reinterpret_cast<uintptr_t>(t.data) % kCudaAlignBytes != 0)
        fail(std::string(name) + ": GPU data must be 16-byte aligned, got address " +
             std::to_string(reinterpret_cast<uintptr_t>(t.data)));
    const int64_t elems_per_16b = static_cast<int64_t>(kCudaAlignBytes / dtype_size(t.dtype));
    for (int d = 0; d + 1 < t.ndim; ++d)
        if (t.shape[d] > 1 && t.stride[d] % elems_per_16b != 0)
            fail(std::string(name) + ": on the GPU every stride but the last must be a multiple of " +
                 std::to_string(elems_per_16b) + " elements (16 bytes), got " + std::to_string(t.stride[d]) +
                 " in dimension " + std::to_string(d));
}

void expect_contiguous(const TensorView& t, const char* name) {
    int64_t expected = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
        if (t.shape[d] > 1 && t.stride[d] != expected)
            fail(std::string(name) + ": expected a contiguous tensor, got strides that are not row-major for shape " +
                 shape_str(t));
        expected *= t.shape[d];
    }
}

ByteRange byte_range(const TensorView& t) {
    ByteRange r;
    if (!t.present() || t.numel() == 0 || !t.data) return r;
    int64_t last = 0;
    for (int d = 0; d < t.ndim; ++d) last += (t.shape[d] - 1) * t.stride[d];
    r.first = reinterpret_cast<uintptr_t>(t.data);
    r.last = r.first + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(dtype_size(t.dtype)));
    return r;
}

void expect_no_alias(const TensorView& out, const char* out_name, const TensorView& in, const char* in_name) {
    const ByteRange a = byte_range(out), b = byte_range(in);
    if (a.first == a.last || b.first == b.last) return;
    if (out.device != in.device || out.device_index != in.device_index) return;
    if (a.first < b.last && b.first < a.last)
        fail(std::string(out_name) + ": an output must not share memory with the input " + in_name);
}

void expect_head_dim(int64_t d, const char* what) {
    if (d < kHeadDimMultiple || d > kMaxHeadDim || d % kHeadDimMultiple != 0)
        fail(std::string(what) + ": expected a multiple of 8 between 8 and 256, got " + std::to_string(d));
}

void expect_int32(int64_t v, const char* what) {
    if (v > std::numeric_limits<int32_t>::max())
        fail(std::string(what) + ": at most 2^31 - 1 is supported, got " + std::to_string(v));
}

}  // namespace flashattn::api
