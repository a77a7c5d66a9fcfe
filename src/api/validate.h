// Argument validation of every operation. Each validate() checks all arguments before anything runs and returns
// the call's sizes; on error it throws Error(Status::invalid_argument) naming the argument, what was expected and
// what was given. Validation never dereferences device memory: index tensors (cu_seqlens, cache_seqlens, block
// tables, ...) are checked element by element only when they live on the CPU, and trusted on a GPU.
#pragma once

#include <initializer_list>

#include "api/attn_dims.h"
#include "api/tensor_checks.h"
#include "flashattn/flashattn.h"

namespace flashattn::api {

AttnDims validate(const ForwardArgs& args);
AttnDims validate(const VarlenForwardArgs& args);
AttnDims validate(const BackwardArgs& args);
AttnDims validate(const VarlenBackwardArgs& args);
AttnDims validate(const KvCacheArgs& args);
AttnDims validate(const MergeArgs& args);

// ----- pieces shared by the operations (validate_common.cpp) -----

// Every present tensor on one device; the first one listed decides which.
Placement check_devices(std::initializer_list<NamedView> tensors);

// The dtype of the data tensors, read from `q`: float16/bfloat16, float32/float64 only when on the CPU.
DType check_data_dtype(const TensorView& q, const char* name, Placement where);

// A data tensor (q, k, v, out, gradients, caches, new keys): dtype of q, last dimension contiguous, CUDA alignment.
void check_data_tensor(const TensorView& t, const char* name, DType dtype, Placement where);

// A float32 statistic (softmax_lse, softmax_d, attn_probs): contiguous.
void check_stat_tensor(const TensorView& t, const char* name);

// An int32 index vector or table (cu_seqlens, seqused_k, cache_seqlens, ...): contiguous unless `layout` says.
void check_index_tensor(const TensorView& t, const char* name, Layout layout = Layout::contiguous);

// A head dimension: a multiple of 8 in [8, 256].
constexpr int64_t kMinHeadDim = 8;
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kHeadDimMultiple = 8;
void check_head_dim(int64_t value, const char* tensor, const char* dim_name);

// nheads % nheads_k == 0 (MQA/GQA).
void check_head_groups(int64_t nheads, int64_t nheads_k, const char* k_name);

// softmax_scale, window, softcap, dropout and ALiBi slopes against the call's sizes.
void check_options(const AttentionOptions& options, const AttnDims& dims, bool allow_dropout);

// The sizes of q, k, v (checked against each other) into dims: padded (batch, seqlen, heads, dim) or varlen
// (total, heads, dim) layouts.
void read_padded_qkv(AttnDims& dims, const TensorView& q, const TensorView& k, const TensorView& v);
void read_varlen_qkv(AttnDims& dims, const TensorView& q, const TensorView& k, const TensorView& v);

// Outputs must not share memory with inputs nor with each other, nor with themselves (broadcast strides).
void check_no_aliasing(std::initializer_list<NamedView> outputs, std::initializer_list<NamedView> inputs);

// Host cu_seqlens: starts at 0, non-decreasing, ends at `total_rows`, every length <= max_seqlen.
void check_host_cu_seqlens(const TensorView& cu, const char* name, int64_t total_rows, const char* total_name,
                           int64_t max_seqlen, const char* max_name);

}  // namespace flashattn::api
