// Running validated params on a backend: the CPU reference for CPU tensors, the GPU kernels for CUDA tensors.
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/attn_dims.h"
#include "common/params.h"
#include "flashattn/flashattn.h"

namespace flashattn::api {

// Runs p where its tensors live. Backend failures other than flashattn::Error become Status::internal.
void run_backend(const AttnParams& p, Placement where);
size_t backend_workspace_bytes(const AttnParams& p, Placement where);

// Writes zeros to every element of t (a validated output) where it lives; CUDA: on `stream`, asynchronously.
void zero_fill(const TensorView& t, Placement where, void* stream);

// ----- the GPU side (cuda_dispatch.cpp): the one place that picks a GPU kernel -----
void cuda_dispatch(const AttnParams& p, int32_t device_index);
size_t cuda_workspace_bytes(const AttnParams& p, int32_t device_index);
void cuda_zero_fill(const TensorView& t, int32_t device_index, void* stream);

}  // namespace flashattn::api
