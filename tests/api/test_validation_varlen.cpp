// Validation of the variable-length operations: cu_seqlens, seqused_k, max lengths, packed shapes.
#include <gtest/gtest.h>

#include "api/api_fixtures.h"
#include "api/validate.h"

namespace flashattn::testing {
namespace {

void set_i32(HostTensor& t, int64_t i, int32_t v) { t.set(i, v); }

TEST(ApiVarlenValidation, ValidBatchAccepted) {
    VarlenProblem p({3, 0, 5}, {4, 2, 6});
    const api::AttnDims d = api::validate(p.forward_args());
    EXPECT_EQ(d.batch, 3);
    EXPECT_EQ(d.total_q, 8);
    EXPECT_TRUE(d.is_varlen);
}

TEST(ApiVarlenValidation, CuSeqlensMustBeInt32) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor cu(DType::f32, {3});
    VarlenForwardArgs a = p.forward_args();
    a.cu_seqlens_q = cu.view();
    EXPECT_INVALID(varlen_forward(a), "cu_seqlens_q: expected dtype int32, got float32");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiVarlenValidation, CuSeqlensMustStartAtZero) {
    VarlenProblem p({3, 5}, {4, 6});
    set_i32(p.cu_q, 0, 1);
    EXPECT_INVALID(varlen_forward(p.forward_args()), "cu_seqlens_q: expected cu_seqlens[0] = 0, got 1");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiVarlenValidation, CuSeqlensMustNotDecrease) {
    VarlenProblem p({3, 5, 2}, {4, 6, 1});
    set_i32(p.cu_k, 2, 3);  // {0, 4, 3, 11}
    EXPECT_INVALID(varlen_forward(p.forward_args()),
                   "cu_seqlens_k: expected non-decreasing offsets, got cu_seqlens[2] = 3 < cu_seqlens[1] = 4");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiVarlenValidation, LastOffsetMustBeTotalRows) {
    VarlenProblem p({3, 5}, {4, 6});
    set_i32(p.cu_q, 2, 7);
    EXPECT_INVALID(varlen_forward(p.forward_args()),
                   "cu_seqlens_q: expected the last offset to equal total_q (q.shape[0]) = 8, got cu_seqlens[2] = 7");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiVarlenValidation, LengthAboveMaxSeqlen) {
    VarlenProblem p({3, 5}, {4, 6});
    VarlenForwardArgs a = p.forward_args();
    a.max_seqlen_k = 5;
    EXPECT_INVALID(varlen_forward(a),
                   "cu_seqlens_k: expected every sequence length <= max_seqlen_k = 5, got length 6 for sequence 1");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiVarlenValidation, NegativeMaxSeqlen) {
    VarlenProblem p({3, 5}, {4, 6});
    VarlenForwardArgs a = p.forward_args();
    a.max_seqlen_q = -1;
    EXPECT_INVALID(varlen_forward(a), "max_seqlen_q: expected a length in [0, 2147483647], got -1");
}

TEST(ApiVarlenValidation, MismatchedBatchOfCuSeqlens) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor cu(DType::i32, {4});
    VarlenForwardArgs a = p.forward_args();
    a.cu_seqlens_k = cu.view();
    EXPECT_INVALID(varlen_forward(a), "cu_seqlens_k: expected shape (batch + 1=3), got (4)");
}

TEST(ApiVarlenValidation, EmptyCuSeqlensRejected) {
    VarlenProblem p({}, {});
    HostTensor empty(DType::i32, {0});
    VarlenForwardArgs a = p.forward_args();
    a.cu_seqlens_q = empty.view();
    EXPECT_INVALID(varlen_forward(a), "cu_seqlens_q: expected shape (batch + 1) with at least one entry, got (0)");
}

TEST(ApiVarlenValidation, CuSeqlensMustBeContiguous) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor wide(DType::i32, {6});
    for (int i = 0; i < 3; ++i) wide.set(2 * i, p.cu_q.get(i));
    VarlenForwardArgs a = p.forward_args();
    a.cu_seqlens_q = make_strided_view(wide.data(), DType::i32, {3}, {2});
    EXPECT_INVALID(varlen_forward(a), "cu_seqlens_q: expected a contiguous tensor");
}

TEST(ApiVarlenValidation, SequsedKBeyondSequence) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor used(DType::i32, {2});
    used.set(0, 4);
    used.set(1, 7);
    VarlenForwardArgs a = p.forward_args();
    a.seqused_k = used.view();
    EXPECT_INVALID(varlen_forward(a), "seqused_k: expected seqused_k[b] in [0, seqlen_k of sequence b], got seqused_k[1] = 7 with seqlen_k 6");
    EXPECT_TRUE(p.outputs_untouched());
    used.set(1, 6);
    EXPECT_NO_THROW(api::validate(a));
}

TEST(ApiVarlenValidation, SequsedKShape) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor used(DType::i32, {3});
    VarlenForwardArgs a = p.forward_args();
    a.seqused_k = used.view();
    EXPECT_INVALID(varlen_forward(a), "seqused_k: expected shape (batch=2), got (3)");
}

TEST(ApiVarlenValidation, PackedShapes) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor k(DType::f32, {10, 3, 16});
    VarlenForwardArgs a = p.forward_args();
    a.k = k.view();
    EXPECT_INVALID(varlen_forward(a), "k: expected nheads_k dividing nheads = 4");
    a = p.forward_args();
    a.q = make_view(p.q.data(), DType::f32, {8, 64});
    EXPECT_INVALID(varlen_forward(a), "q: expected 3 dimensions (total_q, nheads, head_dim), got 2: (8, 64)");
}

TEST(ApiVarlenValidation, VarlenLseShape) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor lse(DType::f32, {2, 4, 5});
    VarlenForwardArgs a = p.forward_args();
    a.softmax_lse = lse.view();
    EXPECT_INVALID(varlen_forward(a), "softmax_lse: expected 2 dimensions (nheads=4, total_q=8), got 3");
}

TEST(ApiVarlenValidation, VarlenAttnProbsShape) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor probs(DType::f32, {2, 4, 5, 6});
    VarlenForwardArgs a = p.forward_args();
    a.attn_probs = probs.view();
    EXPECT_NO_THROW(api::validate(a));
    HostTensor wrong(DType::f32, {2, 4, 8, 10});
    a.attn_probs = wrong.view();
    EXPECT_INVALID(varlen_forward(a), "attn_probs: expected shape (batch=2, nheads=4, max_seqlen_q=5, max_seqlen_k=6)");
}

TEST(ApiVarlenValidation, BackwardChecksCuSeqlens) {
    VarlenProblem p({3, 5}, {4, 6});
    set_i32(p.cu_k, 0, 2);
    EXPECT_INVALID(varlen_backward(p.backward_args()), "cu_seqlens_k: expected cu_seqlens[0] = 0, got 2");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiVarlenValidation, BackwardGradientShapes) {
    VarlenProblem p({3, 5}, {4, 6});
    HostTensor dk(DType::f32, {9, 2, 16});
    VarlenBackwardArgs a = p.backward_args();
    a.dk = dk.view();
    EXPECT_INVALID(varlen_backward(a), "dk: expected shape (total_k=10, nheads_k=2, head_dim=16), got (9, 2, 16)");
}

// On a GPU, index tensors are not read (that would need a copy and a synchronisation): they are trusted.
TEST(ApiVarlenValidation, DeviceCuSeqlensAreTrusted) {
    VarlenForwardArgs a;
    a.q = cuda_view(0, DType::f16, {8, 4, 64});
    a.k = cuda_view(1, DType::f16, {10, 2, 64});
    a.v = cuda_view(2, DType::f16, {10, 2, 64});
    a.out = cuda_view(3, DType::f16, {8, 4, 64});
    a.cu_seqlens_q = cuda_view(4, DType::i32, {3});
    a.cu_seqlens_k = cuda_view(5, DType::i32, {3});
    a.max_seqlen_q = 5;
    a.max_seqlen_k = 6;
    const api::AttnDims d = api::validate(a);
    EXPECT_EQ(d.where.device, DeviceType::cuda);
    EXPECT_EQ(d.batch, 2);
    a.cu_seqlens_k = cuda_view(5, DType::i32, {4});
    EXPECT_INVALID(api::validate(a), "cu_seqlens_k: expected shape (batch + 1=3), got (4)");
}

}  // namespace
}  // namespace flashattn::testing
