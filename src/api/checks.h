// Small checks that every argument validation is written with: each failure throws
// Error(Status::invalid_argument) with a message naming the argument, what was expected and what was given.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "flashattn/flashattn.h"

namespace flashattn::api {

[[noreturn]] void fail(const std::string& message);

std::string shape_str(const TensorView& t);
std::string device_str(DeviceType device, int32_t index);

// One expected dimension: a label for messages and the required size (kAnySize: any).
constexpr int64_t kAnySize = -1;
struct Dim {
    const char* label;
    int64_t size;
};

// t is present, of the given rank and sizes.
void expect_shape(const TensorView& t, const char* name, std::initializer_list<Dim> dims);
void expect_present(const TensorView& t, const char* name);
void expect_dtype(const TensorView& t, const char* name, DType dtype);
void expect_device(const TensorView& t, const char* name, DeviceType device, int32_t index);
// The last dimension is contiguous, strides are non-negative, and on CUDA the data is 16-byte aligned with every
// other stride a multiple of 16 bytes (the kernels move 16 bytes at a time).
void expect_layout(const TensorView& t, const char* name);
// Row-major contiguous (small side tensors: LSE, index tensors, slopes, rotary tables).
void expect_contiguous(const TensorView& t, const char* name);
// Byte range [first, last) that t's elements can touch; for overlap checks.
struct ByteRange {
    uintptr_t first = 0, last = 0;
};
ByteRange byte_range(const TensorView& t);
// An output must not share memory with an input.
void expect_no_alias(const TensorView& out, const char* out_name, const TensorView& in, const char* in_name);

// A head dim the kernels (and so the API) support: a multiple of 8 in [8, 256].
void expect_head_dim(int64_t d, const char* what);
// A size that fits the int32 fields of the params.
void expect_int32(int64_t v, const char* what);

}  // namespace flashattn::api
