// Checks of single tensor views.
#include "api/tensor_checks.h"

#include <cstdio>
#include <cstring>
#include <sstream>

namespace flashattn::api {

namespace {

std::string strides_str(const TensorView& t) {
    std::ostringstream os;
    os << '(';
    for (int d = 0; d < t.ndim; ++d) os << (d ? ", " : "") << t.stride[d];
    os << ')';
    return os.str();
}

std::string pointer_str(const void* p) {
    char buf[2 + 2 * sizeof(void*) + 1];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
}

bool valid_dtype(DType d) { return static_cast<int32_t>(d) >= 0 && static_cast<int32_t>(d) <= static_cast<int32_t>(DType::i32); }

}  // namespace

void fail(const std::string& message) { throw Error(Status::invalid_argument, message); }

std::string shape_str(const TensorView& t) {
    std::ostringstream os;
    os << '(';
    for (int d = 0; d < t.ndim && d < kMaxDims; ++d) os << (d ? ", " : "") << t.shape[d];
    os << ')';
    return os.str();
}

std::string dims_str(std::initializer_list<Dim> dims) {
    std::ostringstream os;
    os << '(';
    bool first = true;
    for (const Dim& d : dims) {
        os << (first ? "" : ", ") << d.name;
        if (d.value >= 0) os << '=' << d.value;
        first = false;
    }
    os << ')';
    return os.str();
}

std::string device_str(DeviceType device, int32_t index) {
    switch (device) {
        case DeviceType::cpu: return "cpu";
        case DeviceType::cuda: return "cuda:" + std::to_string(index);
    }
    return "unknown device type " + std::to_string(static_cast<int32_t>(device));
}

void expect_present(const TensorView& t, const char* name) {
    if (t.ndim < 0 || t.ndim > kMaxDims)
        fail(std::string(name) + ": expected 0 (absent) to " + std::to_string(kMaxDims) + " dimensions, got " +
             std::to_string(t.ndim));
    if (!t.present()) fail(std::string(name) + ": required, got an absent tensor (ndim 0)");
}

void expect_shape(const TensorView& t, const char* name, std::initializer_list<Dim> dims) {
    const int rank = static_cast<int>(dims.size());
    if (t.ndim != rank)
        fail(std::string(name) + ": expected " + std::to_string(rank) + " dimension" + (rank == 1 ? " " : "s ") +
             dims_str(dims) + ", got " + std::to_string(t.ndim) + ": " + shape_str(t));
    for (int d = 0; d < rank; ++d)
        if (t.shape[d] < 0 || t.shape[d] > kMaxSize)
            fail(std::string(name) + ": expected sizes in [0, " + std::to_string(kMaxSize) + "] (int32), got " +
                 shape_str(t));
    int d = 0;
    for (const Dim& want : dims) {
        if (want.value >= 0 && t.shape[d] != want.value)
            fail(std::string(name) + ": expected shape " + dims_str(dims) + ", got " + shape_str(t));
        ++d;
    }
}

void expect_dtype(const TensorView& t, const char* name, DType dtype, const char* why) {
    if (t.dtype == dtype) return;
    std::string got = valid_dtype(t.dtype) ? dtype_name(t.dtype)
                                           : "unknown dtype " + std::to_string(static_cast<int32_t>(t.dtype));
    fail(std::string(name) + ": expected dtype " + dtype_name(dtype) + (why ? std::string(" (") + why + ")" : "") +
         ", got " + got);
}

void expect_layout(const TensorView& t, const char* name, Layout layout) {
    for (int d = 0; d < t.ndim; ++d)
        if (t.shape[d] > 1 && t.stride[d] < 0)
            fail(std::string(name) + ": expected non-negative strides, got " + strides_str(t));
    // No stride of a tensor without elements moves an address, so any is accepted there (frameworks give such
    // tensors the strides of extent-1 dimensions, or 0 when broadcast).
    bool empty = false;
    for (int d = 0; d < t.ndim; ++d) empty = empty || t.shape[d] == 0;
    const int last = t.ndim - 1;
    if (layout != Layout::contiguous && !empty && t.shape[last] > 1 && t.stride[last] != 1)
        fail(std::string(name) + ": expected the last dimension contiguous (stride 1), got strides " + strides_str(t));
    if (layout == Layout::contiguous && !empty) {
        // Strides of extent-1 dimensions never move the address, so any value is contiguous there.
        int64_t want = 1;
        bool ok = true;
        TensorView dense = t;
        for (int d = last; d >= 0; --d) {
            dense.stride[d] = want;
            if (t.shape[d] > 1 && t.stride[d] != want) ok = false;
            want *= t.shape[d];
        }
        if (!ok)
            fail(std::string(name) + ": expected a contiguous tensor (strides " + strides_str(dense) +
                 "), got strides " + strides_str(t));
    }
    // Every element offset (and its byte offset) must fit in int64; sizes are <= int32 max, so the products below
    // fit in 128 bits.
    __int128 numel = 1, max_offset = 0;
    for (int d = 0; d < t.ndim; ++d) {
        numel *= t.shape[d];
        if (t.shape[d] > 0) max_offset += static_cast<__int128>(t.shape[d] - 1) * t.stride[d];
    }
    const size_t elem = dtype_size(t.dtype);
    const __int128 last_byte = (max_offset + 1) * static_cast<__int128>(elem);
    if (numel > INT64_MAX || last_byte > INT64_MAX)
        fail(std::string(name) + ": element offsets overflow int64 (shape " + shape_str(t) + ", strides " +
             strides_str(t) + ")");
    if (numel == 0) return;
    if (t.data == nullptr) fail(std::string(name) + ": data is null for a non-empty tensor of shape " + shape_str(t));
    const uintptr_t address = reinterpret_cast<uintptr_t>(t.data);
    if (address % elem != 0)
        fail(std::string(name) + ": expected a data pointer aligned to its element size (" + std::to_string(elem) +
             " bytes), got " + pointer_str(t.data));
    if (static_cast<__int128>(address) + last_byte > static_cast<__int128>(UINTPTR_MAX))
        fail(std::string(name) + ": the tensor runs past the end of the address space (data " + pointer_str(t.data) +
             ", shape " + shape_str(t) + ", strides " + strides_str(t) + ")");
}

void expect_cuda_alignment(const TensorView& t, const char* name) {
    if (t.numel() == 0) return;
    if (reinterpret_cast<uintptr_t>(t.data) % kCudaAlignBytes != 0)
        fail(std::string(name) + ": expected a " + std::to_string(kCudaAlignBytes) +
             "-byte aligned data pointer for CUDA tensors, got " + pointer_str(t.data));
    const int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
    for (int d = 0; d + 1 < t.ndim; ++d)
        if (t.shape[d] > 1 && (t.stride[d] * elem) % kCudaAlignBytes != 0)
            fail(std::string(name) + ": expected the strides of all but the last dimension to be multiples of " +
                 std::to_string(kCudaAlignBytes / elem) + " elements (" + std::to_string(kCudaAlignBytes) +
                 " bytes) for CUDA tensors, got strides " + strides_str(t));
}

ByteSpan byte_span(const TensorView& t) {
    if (!t.present() || t.numel() == 0) return {};
    int64_t max_offset = 0;
    for (int d = 0; d < t.ndim; ++d) max_offset += (t.shape[d] - 1) * t.stride[d];
    const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data);
    return {begin, begin + static_cast<uintptr_t>((max_offset + 1) * static_cast<int64_t>(dtype_size(t.dtype)))};
}

std::vector<int32_t> host_values(const TensorView& t) {
    if (t.dtype != DType::i32 || t.device != DeviceType::cpu)
        throw Error(Status::internal, "host_values: expected an int32 CPU tensor");
    std::vector<int32_t> values(static_cast<size_t>(t.numel()));
    const unsigned char* base = static_cast<const unsigned char*>(t.data);
    int64_t index[kMaxDims] = {};
    for (size_t i = 0; i < values.size(); ++i) {
        int64_t offset = 0;
        for (int d = 0; d < t.ndim; ++d) offset += index[d] * t.stride[d];
        std::memcpy(&values[i], base + offset * static_cast<int64_t>(sizeof(int32_t)), sizeof(int32_t));
        for (int d = t.ndim - 1; d >= 0; --d) {  // row-major increment
            if (++index[d] < t.shape[d]) break;
            index[d] = 0;
        }
    }
    return values;
}

}  // namespace flashattn::api
