// Validation of tensor arguments: presence, device, dtype, rank, shape, layout and aliasing. Every rejected call
// must name the argument and leave the outputs untouched.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "api/api_fixtures.h"
#include "api/validate.h"

namespace flashattn::testing {
namespace {

TEST(ApiValidation, MissingInputIsNamed) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.k = TensorView{};
    EXPECT_INVALID(forward(a), "k: required, got an absent tensor");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, MissingOutIsNamed) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.out = TensorView{};
    EXPECT_INVALID(forward(a), "out: required");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, SoftmaxLseIsOptional) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.softmax_lse = TensorView{};
    EXPECT_NO_THROW(api::validate(a));
}

TEST(ApiValidation, WrongDtype) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.q.dtype = DType::i32;
    EXPECT_INVALID(forward(a), "q: expected dtype float16 or bfloat16 (float32/float64 only for CPU tensors), got int32");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, UnknownDtypeValue) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.q.dtype = static_cast<DType>(9);
    EXPECT_INVALID(forward(a), "q: expected dtype float16 or bfloat16", "got unknown dtype 9");
}

TEST(ApiValidation, MixedDtypes) {
    DenseProblem p;
    HostTensor k16 = p.k.to(DType::f16);
    ForwardArgs a = p.forward_args();
    a.k = k16.view();
    EXPECT_INVALID(forward(a), "k: expected dtype float32 (the dtype of q), got float16");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, OutDtypeMustMatch) {
    DenseProblem p;
    HostTensor out64(DType::f64, p.out.shape());
    out64.poison();
    ForwardArgs a = p.forward_args();
    a.out = out64.view();
    EXPECT_INVALID(forward(a), "out: expected dtype float32 (the dtype of q), got float64");
    EXPECT_TRUE(all_poisoned(out64));
}

TEST(ApiValidation, LseMustBeFloat32) {
    DenseProblem p;
    HostTensor lse16(DType::f16, p.lse.shape());
    lse16.poison();
    ForwardArgs a = p.forward_args();
    a.softmax_lse = lse16.view();
    EXPECT_INVALID(forward(a), "softmax_lse: expected dtype float32, got float16");
    EXPECT_TRUE(all_poisoned(lse16) && p.outputs_untouched());
}

TEST(ApiValidation, AttnProbsMustBeFloat32) {
    DenseProblem p;
    HostTensor probs64(DType::f64, p.probs.shape());
    ForwardArgs a = p.forward_args();
    a.attn_probs = probs64.view();
    EXPECT_INVALID(forward(a), "attn_probs: expected dtype float32, got float64");
}

TEST(ApiValidation, Float64AcceptedOnCpu) {
    DenseProblem p(DenseShape{}, DType::f64);
    EXPECT_NO_THROW(api::validate(p.forward_args()));
}

TEST(ApiValidation, MixedDevices) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.k.device = DeviceType::cuda;
    EXPECT_INVALID(forward(a), "k: expected device cpu (the device of q)", "got cuda:0");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, UnknownDeviceType) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.v.device = static_cast<DeviceType>(7);
    EXPECT_INVALID(forward(a), "v: expected device type cpu (0) or cuda (1), got 7");
}

TEST(ApiValidation, CpuDeviceIndexIsIgnored) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.k.device_index = 3;
    EXPECT_NO_THROW(api::validate(a));
}

TEST(ApiValidation, WrongRank) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.q = make_view(p.q.data(), DType::f32, {2, 5, 64});
    EXPECT_INVALID(forward(a), "q: expected 4 dimensions (batch, seqlen_q, nheads, head_dim), got 3: (2, 5, 64)");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, RankOutOfRange) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.softmax_lse.ndim = 5;
    EXPECT_INVALID(forward(a), "softmax_lse: expected 0 (absent) to 4 dimensions, got 5");
}

TEST(ApiValidation, MismatchedBatch) {
    DenseProblem p;
    HostTensor k3(DType::f32, {3, 7, 2, 16});
    ForwardArgs a = p.forward_args();
    a.k = k3.view();
    EXPECT_INVALID(forward(a), "k: expected shape (batch=2, seqlen_k, nheads_k, head_dim=16), got (3, 7, 2, 16)");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, MismatchedHeadDimOfK) {
    DenseProblem p;
    HostTensor k(DType::f32, {2, 7, 2, 24});
    ForwardArgs a = p.forward_args();
    a.k = k.view();
    EXPECT_INVALID(forward(a), "k: expected shape (batch=2, seqlen_k, nheads_k, head_dim=16), got (2, 7, 2, 24)");
}

TEST(ApiValidation, MismatchedSeqlenOfV) {
    DenseProblem p;
    HostTensor v(DType::f32, {2, 6, 2, 24});
    ForwardArgs a = p.forward_args();
    a.v = v.view();
    EXPECT_INVALID(forward(a), "v: expected shape (batch=2, seqlen_k=7, nheads_k=2, head_dim_v), got (2, 6, 2, 24)");
}

TEST(ApiValidation, OutShapeMustMatch) {
    DenseProblem p;
    HostTensor out(DType::f32, {2, 5, 4, 16});
    out.poison();
    ForwardArgs a = p.forward_args();
    a.out = out.view();
    EXPECT_INVALID(forward(a), "out: expected shape (batch=2, seqlen_q=5, nheads=4, head_dim_v=24), got (2, 5, 4, 16)");
    EXPECT_TRUE(all_poisoned(out));
}

TEST(ApiValidation, LseShapeMustMatch) {
    DenseProblem p;
    HostTensor lse(DType::f32, {2, 5, 4});
    ForwardArgs a = p.forward_args();
    a.softmax_lse = lse.view();
    EXPECT_INVALID(forward(a), "softmax_lse: expected shape (batch=2, nheads=4, seqlen_q=5), got (2, 5, 4)");
}

TEST(ApiValidation, AttnProbsShapeMustMatch) {
    DenseProblem p;
    HostTensor probs(DType::f32, {2, 4, 5, 8});
    ForwardArgs a = p.forward_args();
    a.attn_probs = probs.view();
    EXPECT_INVALID(forward(a), "attn_probs: expected shape (batch=2, nheads=4, seqlen_q=5, seqlen_k=7), got (2, 4, 5, 8)");
}

TEST(ApiValidation, HeadsMustDivide) {
    DenseProblem p(DenseShape{2, 5, 7, 4, 3, 16, 16});
    EXPECT_INVALID(forward(p.forward_args()), "k: expected nheads_k dividing nheads = 4", "got nheads_k = 3");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, HeadDimOver256) {
    DenseProblem p(DenseShape{1, 2, 3, 1, 1, 264, 16});
    EXPECT_INVALID(forward(p.forward_args()), "q: expected head_dim a multiple of 8 in [8, 256], got 264");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, HeadDimNotMultipleOf8) {
    DenseProblem p(DenseShape{1, 2, 3, 1, 1, 20, 16});
    EXPECT_INVALID(forward(p.forward_args()), "q: expected head_dim a multiple of 8 in [8, 256], got 20");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, HeadDimVTooSmall) {
    DenseProblem p(DenseShape{1, 2, 3, 1, 1, 16, 4});
    EXPECT_INVALID(forward(p.forward_args()), "v: expected head_dim_v a multiple of 8 in [8, 256], got 4");
}

TEST(ApiValidation, HeadDim256Accepted) {
    DenseProblem p(DenseShape{1, 2, 3, 1, 1, 256, 256});
    EXPECT_NO_THROW(api::validate(p.forward_args()));
}

TEST(ApiValidation, NegativeSize) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.q.shape[1] = -1;
    EXPECT_INVALID(forward(a), "q: expected sizes in [0, 2147483647] (int32), got (2, -1, 4, 16)");
}

TEST(ApiValidation, SizeBeyondInt32) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.k.shape[1] = int64_t{1} << 31;
    EXPECT_INVALID(forward(a), "k: expected sizes in [0, 2147483647] (int32)");
}

TEST(ApiValidation, LastDimMustBeContiguous) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.v = make_strided_view(p.v.data(), DType::f32, {2, 7, 2, 8}, {7 * 2 * 24, 2 * 24, 24, 2});
    HostTensor out(DType::f32, {2, 5, 4, 8});
    a.out = out.view();
    EXPECT_INVALID(forward(a), "v: expected the last dimension contiguous (stride 1), got strides (336, 48, 24, 2)");
}

TEST(ApiValidation, NegativeStride) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.k.stride[1] = -a.k.stride[1];
    EXPECT_INVALID(forward(a), "k: expected non-negative strides, got (224, -32, 16, 1)");
}

TEST(ApiValidation, StridesOfUnitDimensionsAreFree) {
    DenseProblem p(DenseShape{1, 1, 3, 2, 2, 16, 16});
    ForwardArgs a = p.forward_args();
    a.q.stride[0] = -12345;  // frameworks leave size-1 strides arbitrary
    a.q.stride[1] = 7;
    EXPECT_NO_THROW(api::validate(a));
}

TEST(ApiValidation, LseMustBeContiguous) {
    DenseProblem p;
    HostTensor big(DType::f32, {2, 4, 10});
    ForwardArgs a = p.forward_args();
    a.softmax_lse = make_strided_view(big.data(), DType::f32, {2, 4, 5}, {40, 10, 1});
    EXPECT_INVALID(forward(a), "softmax_lse: expected a contiguous tensor (strides (20, 5, 1)), got strides (40, 10, 1)");
}

TEST(ApiValidation, OffsetsOverflowingInt64) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.k.stride[0] = int64_t{1} << 62;  // never dereferenced: validation rejects it first
    EXPECT_INVALID(forward(a), "k: element offsets overflow int64");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, NullDataOfNonEmptyTensor) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.q.data = nullptr;
    EXPECT_INVALID(forward(a), "q: data is null for a non-empty tensor of shape (2, 5, 4, 16)");
}

TEST(ApiValidation, MisalignedElements) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.q.data = static_cast<char*>(p.q.data()) + 2;
    EXPECT_INVALID(forward(a), "q: expected a data pointer aligned to its element size (4 bytes)");
}

TEST(ApiValidation, BackwardNeedsEveryGradient) {
    DenseProblem p;
    BackwardArgs a = p.backward_args();
    a.dk = TensorView{};
    EXPECT_INVALID(backward(a), "dk: required");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, BackwardGradientShapes) {
    DenseProblem p;
    HostTensor dv(DType::f32, {2, 7, 2, 16});
    BackwardArgs a = p.backward_args();
    a.dv = dv.view();
    EXPECT_INVALID(backward(a), "dv: expected shape (batch=2, seqlen_k=7, nheads_k=2, head_dim_v=24), got (2, 7, 2, 16)");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, BackwardDoutShape) {
    DenseProblem p;
    BackwardArgs a = p.backward_args();
    a.dout = p.q.view();
    EXPECT_INVALID(backward(a), "dout: expected shape (batch=2, seqlen_q=5, nheads=4, head_dim_v=24), got (2, 5, 4, 16)");
}

TEST(ApiValidation, BackwardSoftmaxDShape) {
    DenseProblem p;
    HostTensor d(DType::f32, {2, 4, 6});
    BackwardArgs a = p.backward_args();
    a.softmax_d = d.view();
    EXPECT_INVALID(backward(a), "softmax_d: expected shape (batch=2, nheads=4, seqlen_q=5), got (2, 4, 6)");
}

TEST(ApiValidation, BackwardGradientDtype) {
    DenseProblem p;
    HostTensor dq16 = p.dq.to(DType::bf16);
    BackwardArgs a = p.backward_args();
    a.dq = dq16.view();
    EXPECT_INVALID(backward(a), "dq: expected dtype float32 (the dtype of q), got bfloat16");
}

// ----- aliasing -----

TEST(ApiValidation, OutMustNotAliasAnInput) {
    DenseProblem p(DenseShape{2, 5, 5, 4, 4, 16, 16});
    ForwardArgs a = p.forward_args();
    a.out = p.q.view();  // same shape as q: in-place attention is not supported
    const HostTensor before = p.q;
    EXPECT_INVALID(forward(a), "out: expected an output that does not overlap the input q");
    EXPECT_EQ(std::memcmp(before.data(), p.q.data(), p.q.nbytes()), 0);
}

TEST(ApiValidation, OutputsMustNotOverlapEachOther) {
    DenseProblem p;
    HostTensor shared(DType::f32, {2, 4, 5, 7});
    shared.poison();
    ForwardArgs a = p.forward_args();
    a.attn_probs = shared.view();
    a.softmax_lse = make_view(shared.data(), DType::f32, {2, 4, 5});
    EXPECT_INVALID(forward(a), "attn_probs: expected an output that does not overlap the output softmax_lse");
    EXPECT_TRUE(all_poisoned(shared));
}

TEST(ApiValidation, PartialOverlapIsCaught) {
    DenseProblem p(DenseShape{1, 4, 4, 1, 1, 8, 8});
    HostTensor buf(DType::f32, {64});
    ForwardArgs a = p.forward_args();
    a.k = make_view(buf.data(), DType::f32, {1, 4, 1, 8});
    a.out = make_view(static_cast<float*>(buf.data()) + 31, DType::f32, {1, 4, 1, 8});  // shares k's last element
    EXPECT_INVALID(forward(a), "out: expected an output that does not overlap the input k");
}

TEST(ApiValidation, BroadcastOutputRejected) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.out.stride[1] = 0;
    EXPECT_INVALID(forward(a), "out: expected every element at its own address");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiValidation, BroadcastInputAccepted) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.k.stride[0] = 0;  // both sequences read the same keys
    EXPECT_NO_THROW(api::validate(a));
}

// q, k, v as interleaved views of one packed (batch, seqlen, 3, nheads, d) buffer, as FlashAttention's qkvpacked
// functions pass them: they share a buffer but no element.
TEST(ApiValidation, PackedQkvAccepted) {
    constexpr int64_t b = 2, s = 6, h = 2, d = 16;
    HostTensor qkv(DType::f32, {b * s, 3, h, d});
    HostTensor out(DType::f32, {b, s, h, d});
    float* base = static_cast<float*>(qkv.data());
    ForwardArgs a;
    for (int i = 0; i < 3; ++i) {
        TensorView t = make_strided_view(base + i * h * d, DType::f32, {b, s, h, d}, {s * 3 * h * d, 3 * h * d, d, 1});
        (i == 0 ? a.q : i == 1 ? a.k : a.v) = t;
    }
    a.out = out.view();
    EXPECT_NO_THROW(api::validate(a));
}

TEST(ApiValidation, PackedGradientsAccepted) {
    constexpr int64_t b = 1, s = 4, h = 2, d = 8;
    DenseProblem p(DenseShape{b, s, s, h, h, d, d});
    HostTensor dqkv(DType::f32, {b * s, 3, h, d});
    float* base = static_cast<float*>(dqkv.data());
    BackwardArgs a = p.backward_args();
    a.dq = make_strided_view(base, DType::f32, {b, s, h, d}, {s * 3 * h * d, 3 * h * d, d, 1});
    a.dk = make_strided_view(base + h * d, DType::f32, {b, s, h, d}, {s * 3 * h * d, 3 * h * d, d, 1});
    a.dv = make_strided_view(base + 2 * h * d, DType::f32, {b, s, h, d}, {s * 3 * h * d, 3 * h * d, d, 1});
    EXPECT_NO_THROW(api::validate(a));
    a.dv = make_strided_view(base + 1, DType::f32, {b, s, h, d}, {s * 3 * h * d, 3 * h * d, d, 1});
    EXPECT_INVALID(backward(a), "dv: expected an output that does not overlap the output dq");
}

TEST(ApiValidation, BackwardGradientMustNotAliasInput) {
    DenseProblem p(DenseShape{1, 4, 4, 2, 2, 8, 8});
    BackwardArgs a = p.backward_args();
    a.dk = p.k.view();
    EXPECT_INVALID(backward(a), "dk: expected an output that does not overlap the input k");
}

TEST(ApiValidation, WorkspaceSizeValidatesToo) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.q.dtype = DType::i32;
    EXPECT_INVALID(workspace_size(a), "q: expected dtype float16 or bfloat16");
    EXPECT_EQ(workspace_size(p.forward_args()), 0u);  // CPU tensors need no device workspace
    EXPECT_EQ(workspace_size(p.backward_args()), 0u);
}

}  // namespace
}  // namespace flashattn::testing
