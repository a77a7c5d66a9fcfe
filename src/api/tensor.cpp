// TensorView helpers of the public API.
#include <stdexcept>

#include "flashattn/flashattn.h"

namespace flashattn {

int64_t TensorView::numel() const {
    if (ndim <= 0) return 0;
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
}

static TensorView view_from(void* data, DType dtype, std::initializer_list<int64_t> shape, DeviceType device,
                            int32_t device_index) {
    if (shape.size() == 0 || shape.size() > static_cast<size_t>(kMaxDims))
        throw Error(Status::invalid_argument, "make_view: rank must be 1.." + std::to_string(kMaxDims) +
                                                  ", got " + std::to_string(shape.size()));
    TensorView t;
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    t.device_index = device_index;
    t.ndim = static_cast<int32_t>(shape.size());
    int d = 0;
    for (int64_t s : shape) t.shape[d++] = s;
    return t;
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, DeviceType device,
                     int32_t device_index) {
    TensorView t = view_from(data, dtype, shape, device, device_index);
    int64_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
        t.stride[d] = stride;
        stride *= t.shape[d];
    }
    return t;
}

TensorView make_strided_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                             std::initializer_list<int64_t> stride, DeviceType device, int32_t device_index) {
    if (stride.size() != shape.size())
        throw Error(Status::invalid_argument, "make_strided_view: " + std::to_string(shape.size()) +
                                                  " sizes but " + std::to_string(stride.size()) + " strides");
    TensorView t = view_from(data, dtype, shape, device, device_index);
    int d = 0;
    for (int64_t s : stride) t.stride[d++] = s;
    return t;
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::f16: return "float16";
        case DType::bf16: return "bfloat16";
        case DType::f32: return "float32";
        case DType::f64: return "float64";
        case DType::i32: return "int32";
    }
    return "unknown";
}

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::f16:
        case DType::bf16: return 2;
        case DType::f32:
        case DType::i32: return 4;
        case DType::f64: return 8;
    }
    return 0;
}

}  // namespace flashattn
