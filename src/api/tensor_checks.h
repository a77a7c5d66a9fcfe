// Checks of single tensor views, shared by every operation's validation. Each throws
// Error(Status::invalid_argument, "<argument>: expected ..., got ...") and touches no tensor memory.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::api {

// Sizes are int32 in AttnParams (and in every index tensor).
constexpr int64_t kMaxSize = INT32_MAX;

[[noreturn]] void fail(const std::string& message);

// A named tensor argument.
struct NamedView {
    const char* name;
    const TensorView* view;
};

// One expected dimension: `value` < 0 leaves the size free (it is only named in messages).
struct Dim {
    const char* name;
    int64_t value = -1;
};

std::string shape_str(const TensorView& t);                // "(2, 17, 4, 72)"
std::string dims_str(std::initializer_list<Dim> dims);      // "(batch=2, seqlen_k, nheads_k, head_dim=64)"
std::string device_str(DeviceType device, int32_t index);  // "cpu", "cuda:1"

// The argument must be given (ndim > 0).
void expect_present(const TensorView& t, const char* name);

// Rank, then every size: the named ones equal, all in [0, kMaxSize].
void expect_shape(const TensorView& t, const char* name, std::initializer_list<Dim> dims);

// How a tensor is laid out in memory, by what it holds.
enum class Layout {
    rows,        // q, k, v, out and their gradients, caches: last dimension contiguous, the others free
    contiguous,  // statistics, index vectors, rotary tables: fully row-major
    last_dim,    // ALiBi slopes, block table: last dimension contiguous
};

// Strides (non-negative, last dimension as `layout` asks), element offsets representable in int64, the data
// pointer aligned to the element size and non-null unless the tensor is empty. Sizes must have been checked.
void expect_layout(const TensorView& t, const char* name, Layout layout);

// CUDA vectorised loads: 16-byte aligned data and strides of whole 16-byte units. For rows-layout tensors.
constexpr int64_t kCudaAlignBytes = 16;
void expect_cuda_alignment(const TensorView& t, const char* name);

// The tensor's element type.
void expect_dtype(const TensorView& t, const char* name, DType dtype, const char* why = nullptr);

// The span of bytes [begin, end) the view can touch; begin == end for an empty view.
struct ByteSpan {
    uintptr_t begin = 0, end = 0;
};
ByteSpan byte_span(const TensorView& t);

// The values of an int32 CPU tensor in row-major order (its layout must have been checked).
std::vector<int32_t> host_values(const TensorView& t);

}  // namespace flashattn::api
