// Small owning problems for the API tests: random inputs, poisoned outputs, argument structs over them, and
// helpers to check an error's status and message.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "support/host_tensor.h"

namespace flashattn::testing {

// Passes when fn throws flashattn::Error with `status` and a message containing every fragment.
::testing::AssertionResult throws_error(const std::function<void()>& fn, Status status,
                                        std::initializer_list<std::string> fragments);

// Shorthand for the common case: an invalid argument.
#define EXPECT_INVALID(call, ...) \
    EXPECT_TRUE(::flashattn::testing::throws_error([&] { call; }, ::flashattn::Status::invalid_argument, {__VA_ARGS__}))

// Every element still carries the poison pattern (NaN, or int32 max).
bool all_poisoned(const HostTensor& t);

// Sizes of a padded-batch problem.
struct DenseShape {
    int64_t batch = 2, seqlen_q = 5, seqlen_k = 7, nheads = 4, nheads_k = 2, head_dim = 16, head_dim_v = 24;
};

// A padded forward/backward on the CPU.
struct DenseProblem {
    DenseShape s;
    DType dtype;
    HostTensor q, k, v, out, lse, probs, dout, dq, dk, dv, softmax_d;

    explicit DenseProblem(DenseShape shape = {}, DType dtype = DType::f32, uint64_t seed = 1);
    ForwardArgs forward_args();    // q, k, v, out, softmax_lse
    BackwardArgs backward_args();  // + dout, dq, dk, dv (out and lse as they are)
    bool outputs_untouched() const;  // every output still poisoned
};

// A varlen problem: sequences of the given lengths packed along the first dimension.
struct VarlenProblem {
    std::vector<int32_t> lens_q, lens_k;
    int64_t nheads = 4, nheads_k = 2, head_dim = 16, head_dim_v = 16;
    DType dtype;
    HostTensor q, k, v, out, lse, cu_q, cu_k, dout, dq, dk, dv;
    int64_t max_q = 0, max_k = 0;

    VarlenProblem(std::vector<int32_t> lens_q, std::vector<int32_t> lens_k, DType dtype = DType::f32, uint64_t seed = 2);
    VarlenForwardArgs forward_args();
    VarlenBackwardArgs backward_args();
    bool outputs_untouched() const;
};

// A kv-cache problem, dense or paged (page_size > 0): the cache holds random keys, new keys are appended.
struct KvCacheProblem {
    int64_t batch = 2, seqlen_q = 3, nheads = 4, nheads_k = 2, head_dim = 16, head_dim_v = 16;
    int64_t capacity = 32, seqlen_new = 2, page_size = 0, num_blocks = 0;
    DType dtype = DType::f32;
    HostTensor q, k_cache, v_cache, knew, vnew, cache_seqlens, block_table, out, lse;

    // lens: keys already in each sequence's cache. Paged caches get a shuffled block table.
    KvCacheProblem(std::vector<int32_t> lens, int64_t page_size = 0, uint64_t seed = 3);
    KvCacheArgs args(bool with_new = true);
    bool outputs_untouched() const;
};

// Distinct, 256-byte aligned addresses far apart: stand-ins for device memory that is never dereferenced.
void* fake_device_address(size_t index);

// A contiguous view tagged as living on CUDA device `device_index` at a fake address.
TensorView cuda_view(size_t address_index, DType dtype, std::initializer_list<int64_t> shape, int32_t device_index = 0);

// A padded forward whose every tensor lives on a fake CUDA device (valid as built).
struct CudaForward {
    ForwardArgs args;
    explicit CudaForward(DenseShape s = {}, DType dtype = DType::f16);
};

}  // namespace flashattn::testing
