// Validation rules for CUDA tensors, with views at fake device addresses that are never dereferenced: every
// rejected call here must fail in validation, before any CUDA call (on a machine without a GPU a CUDA call would
// answer Status::cuda_error instead).
#include <gtest/gtest.h>

#include "api/api_fixtures.h"
#include "api/validate.h"
#include "common/build_config.h"

namespace flashattn::testing {
namespace {

TEST(ApiCudaValidation, ValidArgumentsPassValidation) {
    CudaForward f;
    const api::AttnDims d = api::validate(f.args);
    EXPECT_EQ(d.where.device, DeviceType::cuda);
    EXPECT_EQ(d.where.index, 0);
    EXPECT_EQ(d.dtype, DType::f16);
}

TEST(ApiCudaValidation, Float32Rejected) {
    CudaForward f(DenseShape{}, DType::f32);
    EXPECT_INVALID(forward(f.args),
                   "q: expected dtype float16 or bfloat16 (float32/float64 only for CPU tensors), got float32 on cuda:0");
}

TEST(ApiCudaValidation, Float64Rejected) {
    CudaForward f(DenseShape{}, DType::f64);
    EXPECT_INVALID(forward(f.args), "got float64 on cuda:0");
}

TEST(ApiCudaValidation, Bfloat16Accepted) {
    CudaForward f(DenseShape{}, DType::bf16);
    EXPECT_NO_THROW(api::validate(f.args));
}

TEST(ApiCudaValidation, PointerMustBe16ByteAligned) {
    CudaForward f;
    f.args.k.data = static_cast<char*>(f.args.k.data) + 8;
    EXPECT_INVALID(forward(f.args), "k: expected a 16-byte aligned data pointer for CUDA tensors");
}

TEST(ApiCudaValidation, StridesMustBeWhole16ByteUnits) {
    CudaForward f;  // q (2, 5, 4, 16) f16
    f.args.q = make_strided_view(fake_device_address(0), DType::f16, {2, 5, 4, 16}, {5 * 4 * 20, 4 * 20, 20, 1},
                                 DeviceType::cuda);
    EXPECT_INVALID(forward(f.args),
                   "q: expected the strides of all but the last dimension to be multiples of 8 elements (16 bytes) for CUDA "
                   "tensors, got strides (400, 80, 20, 1)");
}

TEST(ApiCudaValidation, LseNeedsOnlyElementAlignment) {
    CudaForward f;
    f.args.softmax_lse.data = static_cast<char*>(f.args.softmax_lse.data) + 4;
    EXPECT_NO_THROW(api::validate(f.args));
    f.args.softmax_lse.data = static_cast<char*>(f.args.softmax_lse.data) + 2;
    EXPECT_INVALID(forward(f.args), "softmax_lse: expected a data pointer aligned to its element size (4 bytes)");
}

TEST(ApiCudaValidation, NegativeDeviceIndex) {
    CudaForward f;
    f.args.q.device_index = -1;
    EXPECT_INVALID(forward(f.args), "q: expected a CUDA device index >= 0, got -1");
}

TEST(ApiCudaValidation, TensorsOnDifferentGpus) {
    CudaForward f;
    f.args.out.device_index = 1;
    EXPECT_INVALID(forward(f.args), "out: expected device cuda:0 (the device of q)", "got cuda:1");
}

TEST(ApiCudaValidation, CpuOutputForCudaInputs) {
    CudaForward f;
    HostTensor out(DType::f16, {2, 5, 4, 24});
    f.args.out = out.view();
    EXPECT_INVALID(forward(f.args), "out: expected device cuda:0 (the device of q)", "got cpu");
}

TEST(ApiCudaValidation, ShapeRulesApplyOnCuda) {
    CudaForward f(DenseShape{2, 5, 7, 4, 2, 16, 264});
    EXPECT_INVALID(forward(f.args), "v: expected head_dim_v a multiple of 8 in [8, 256], got 264");
}

TEST(ApiCudaValidation, BackwardOnCuda) {
    BackwardArgs a;
    a.q = cuda_view(0, DType::f16, {2, 5, 4, 64});
    a.k = cuda_view(1, DType::f16, {2, 7, 2, 64});
    a.v = cuda_view(2, DType::f16, {2, 7, 2, 64});
    a.out = cuda_view(3, DType::f16, {2, 5, 4, 64});
    a.dout = cuda_view(4, DType::f16, {2, 5, 4, 64});
    a.softmax_lse = cuda_view(5, DType::f32, {2, 4, 5});
    a.dq = cuda_view(6, DType::f16, {2, 5, 4, 64});
    a.dk = cuda_view(7, DType::f16, {2, 7, 2, 64});
    a.dv = cuda_view(8, DType::f16, {2, 7, 2, 64});
    EXPECT_NO_THROW(api::validate(a));
    a.dv = cuda_view(8, DType::bf16, {2, 7, 2, 64});
    EXPECT_INVALID(backward(a), "dv: expected dtype float16 (the dtype of q), got bfloat16");
    EXPECT_INVALID(workspace_size(a), "dv: expected dtype float16");
}

TEST(ApiCudaValidation, KvCacheValidArgumentsPassValidation) {
    KvCacheArgs a;
    a.q = cuda_view(0, DType::f16, {1, 1, 4, 64});
    a.k_cache = cuda_view(1, DType::f16, {1, 32, 4, 64});
    a.v_cache = cuda_view(2, DType::f16, {1, 32, 4, 64});
    a.out = cuda_view(3, DType::f16, {1, 1, 4, 64});
    const api::AttnDims d = api::validate(a);
    EXPECT_EQ(d.where.device, DeviceType::cuda);
    a.v_cache = cuda_view(2, DType::bf16, {1, 32, 4, 64});
    EXPECT_INVALID(kvcache_forward(a), "v_cache: expected dtype float16");
}

#if FLASHATTN_WITH_CUDA
// attn_probs without softmax_lse: the forward keeps the LSE in the workspace. A function of the sizes only.
TEST(ApiCudaValidation, ForwardWorkspaceForProbsWithoutLse) {
    CudaForward f;
    f.args.softmax_lse = TensorView{};
    EXPECT_EQ(workspace_size(f.args), 0u);
    f.args.attn_probs = cuda_view(5, DType::f32, {2, 4, 5, 7});
    EXPECT_EQ(workspace_size(f.args), sizeof(float) * 2 * 4 * 5);
}
#else
TEST(ApiCudaValidation, BuildWithoutCudaRefusesCudaTensors) {
    CudaForward f;
    EXPECT_TRUE(throws_error([&] { forward(f.args); }, Status::unsupported, {"no GPU support"}));
}
#endif

}  // namespace
}  // namespace flashattn::testing
