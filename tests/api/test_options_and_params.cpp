// Validation of AttentionOptions, and the AttnParams built from validated arguments (defaults, normalisation,
// strides).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "api/api_fixtures.h"
#include "api/params_builder.h"
#include "api/validate.h"
#include "common/philox.h"

namespace flashattn::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

ForwardArgs with_options(DenseProblem& p, const AttentionOptions& o) {
    ForwardArgs a = p.forward_args();
    a.options = o;
    return a;
}

AttnParams params_of(const ForwardArgs& a) { return api::build_params(a, api::validate(a)); }

TEST(ApiOptions, NegativeWindowLeft) {
    DenseProblem p;
    AttentionOptions o;
    o.window_left = -2;
    EXPECT_INVALID(forward(with_options(p, o)), "options.window_left: expected a window size >= 0 (use -1 for unbounded), got -2");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiOptions, NegativeWindowRight) {
    DenseProblem p;
    AttentionOptions o;
    o.window_right = -5;
    EXPECT_INVALID(forward(with_options(p, o)), "options.window_right:", "use -1 for unbounded", "got -5");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiOptions, SoftmaxScaleMustBeFiniteAndNonNegative) {
    DenseProblem p;
    for (float bad : {kInf, -kInf, -0.5f}) {
        AttentionOptions o;
        o.softmax_scale = bad;
        EXPECT_INVALID(forward(with_options(p, o)), "options.softmax_scale: expected a finite value >= 0, or NaN");
    }
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiOptions, SoftcapMustBeFiniteAndNonNegative) {
    DenseProblem p;
    for (float bad : {kNan, kInf, -1.0f}) {
        AttentionOptions o;
        o.softcap = bad;
        EXPECT_INVALID(forward(with_options(p, o)), "options.softcap: expected a finite value >= 0");
    }
}

TEST(ApiOptions, DropoutMustBeAProbabilityBelowOne) {
    DenseProblem p;
    for (float bad : {1.0f, -0.1f, kNan, 1.5f}) {
        AttentionOptions o;
        o.dropout_p = bad;
        EXPECT_INVALID(forward(with_options(p, o)), "options.dropout_p: expected a probability in [0, 1)");
    }
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiOptions, DropoutMessageShowsValue) {
    DenseProblem p;
    AttentionOptions o;
    o.dropout_p = 1.0f;
    EXPECT_INVALID(forward(with_options(p, o)), "got 1");
}

TEST(ApiOptions, AlibiShapes) {
    DenseProblem p;
    HostTensor per_head(DType::f32, {4}), per_batch_head(DType::f32, {2, 4}), wrong(DType::f32, {3});
    AttentionOptions o;
    o.alibi_slopes = per_head.view();
    EXPECT_NO_THROW(api::validate(with_options(p, o)));
    o.alibi_slopes = per_batch_head.view();
    EXPECT_NO_THROW(api::validate(with_options(p, o)));
    o.alibi_slopes = wrong.view();
    EXPECT_INVALID(forward(with_options(p, o)), "options.alibi_slopes: expected shape (nheads=4) or (batch=2, nheads=4), got (3)");
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiOptions, AlibiMustBeFloat32) {
    DenseProblem p;
    HostTensor slopes(DType::f16, {4});
    AttentionOptions o;
    o.alibi_slopes = slopes.view();
    EXPECT_INVALID(forward(with_options(p, o)), "options.alibi_slopes: expected dtype float32, got float16");
}

TEST(ApiOptions, AlibiLastDimContiguous) {
    DenseProblem p;
    HostTensor slopes(DType::f32, {8});
    AttentionOptions o;
    o.alibi_slopes = make_strided_view(slopes.data(), DType::f32, {4}, {2});
    EXPECT_INVALID(forward(with_options(p, o)), "options.alibi_slopes: expected the last dimension contiguous");
}

TEST(ApiOptions, AlibiOnOtherDevice) {
    DenseProblem p;
    AttentionOptions o;
    o.alibi_slopes = cuda_view(0, DType::f32, {4});
    EXPECT_INVALID(forward(with_options(p, o)), "options.alibi_slopes: expected device cpu (the device of q)");
}

// ----- params -----

TEST(ApiParams, DefaultScaleIsInverseSqrtHeadDim) {
    DenseProblem p;  // head_dim 16
    const AttnParams params = params_of(p.forward_args());
    EXPECT_FLOAT_EQ(params.scale, 0.25f);
    EXPECT_FLOAT_EQ(params.scale_log2, 0.25f * 1.4426950408889634f);
}

TEST(ApiParams, ExplicitScaleKept) {
    DenseProblem p;
    AttentionOptions o;
    o.softmax_scale = 0.7f;
    EXPECT_FLOAT_EQ(params_of(with_options(p, o)).scale, 0.7f);
}

TEST(ApiParams, CausalSetsWindowRightToZero) {
    DenseProblem p;
    AttentionOptions o;
    o.causal = true;
    o.window_right = 5;  // FlashAttention ignores a right window with causal
    const AttnParams params = params_of(with_options(p, o));
    EXPECT_TRUE(params.causal);
    EXPECT_EQ(params.window_right, 0);
    EXPECT_EQ(params.window_left, -1);
}

TEST(ApiParams, WindowLeftBeyondKeysIsUnbounded) {
    DenseProblem p;  // seqlen_k 7
    AttentionOptions o;
    o.window_left = 7;
    o.window_right = 2;
    AttnParams params = params_of(with_options(p, o));
    EXPECT_EQ(params.window_left, -1);
    EXPECT_EQ(params.window_right, 2);
    o.window_left = 6;
    params = params_of(with_options(p, o));
    EXPECT_EQ(params.window_left, 6);
}

// FlashAttention's rule, as for the left side.
TEST(ApiParams, WindowRightOfSeqlenKOrMoreIsUnbounded) {
    DenseProblem p;  // seqlen_q 5, seqlen_k 7
    AttentionOptions o;
    o.window_right = 7;
    EXPECT_EQ(params_of(with_options(p, o)).window_right, -1);
    o.window_right = 2147483647;  // near INT32_MAX: the kernels add it to a position shift in 32 bits
    EXPECT_EQ(params_of(with_options(p, o)).window_right, -1);
    o.window_right = 6;
    EXPECT_EQ(params_of(with_options(p, o)).window_right, 6);
    o.causal = true;  // causal still sets it to 0
    o.window_right = 100;
    EXPECT_EQ(params_of(with_options(p, o)).window_right, 0);
}

// Windows wider than the sequences give what no window gives (the CPU path, exactly).
TEST(ApiParams, WideWindowsMatchNoWindow) {
    DenseProblem wide, none;
    AttentionOptions o;
    o.window_left = 2147483647;
    o.window_right = 2147483647;
    forward(with_options(wide, o));
    forward(none.forward_args());
    for (int64_t i = 0; i < wide.out.numel(); ++i) ASSERT_EQ(wide.out.get(i), none.out.get(i)) << i;
}

TEST(ApiParams, DropoutThresholdAndScale) {
    DenseProblem p;
    AttentionOptions o;
    o.dropout_p = 0.25f;
    o.seed = 42;
    o.offset = 7;
    const AttnParams params = params_of(with_options(p, o));
    EXPECT_EQ(params.dropout_keep_threshold, dropout_keep_threshold(0.25f));
    EXPECT_EQ(params.dropout_keep_threshold, 49152u);
    EXPECT_FLOAT_EQ(params.dropout_scale, 1.0f / 0.75f);
    EXPECT_EQ(params.seed, 42u);
    EXPECT_EQ(params.offset, 7u);
    EXPECT_EQ(params_of(p.forward_args()).dropout_keep_threshold, kDropoutThresholdOne);
}

TEST(ApiParams, SizesAndPointers) {
    DenseProblem p;
    HostTensor slopes(DType::f32, {2, 4});
    ForwardArgs a = p.forward_args();
    a.attn_probs = p.probs.view();
    a.options.alibi_slopes = slopes.view();
    a.options.softcap = 30.0f;
    const AttnParams params = params_of(a);
    EXPECT_EQ(params.op, OpKind::forward);
    EXPECT_EQ(params.dtype, ElemType::f32);
    EXPECT_EQ(params.batch, 2);
    EXPECT_EQ(params.seqlen_q, 5);
    EXPECT_EQ(params.seqlen_k, 7);
    EXPECT_EQ(params.nheads, 4);
    EXPECT_EQ(params.nheads_k, 2);
    EXPECT_EQ(params.head_dim, 16);
    EXPECT_EQ(params.head_dim_v, 24);
    EXPECT_EQ(params.q, p.q.data());
    EXPECT_EQ(params.out, p.out.data());
    EXPECT_EQ(params.softmax_lse, p.lse.data());
    EXPECT_EQ(params.attn_probs, p.probs.data());
    EXPECT_EQ(params.alibi_slopes, slopes.data());
    EXPECT_EQ(params.alibi_batch_stride, 4);
    EXPECT_EQ(params.softcap, 30.0f);
    EXPECT_FALSE(params.is_varlen);
}

TEST(ApiParams, StridesFromViews) {
    DenseProblem p;
    HostTensor big(DType::f32, {2, 5, 8, 32});  // q lives in a larger buffer: every stride differs from dense
    ForwardArgs a = p.forward_args();
    a.q = make_strided_view(big.data(), DType::f32, {2, 5, 4, 16}, {5 * 8 * 32, 8 * 32, 64, 1});
    const AttnParams params = params_of(a);
    EXPECT_EQ(params.q_batch_stride, 1280);
    EXPECT_EQ(params.q_row_stride, 256);
    EXPECT_EQ(params.q_head_stride, 64);
    EXPECT_EQ(params.k_batch_stride, 7 * 2 * 16);
    EXPECT_EQ(params.k_row_stride, 2 * 16);
    EXPECT_EQ(params.k_head_stride, 16);
    EXPECT_EQ(params.v_row_stride, 2 * 24);
    EXPECT_EQ(params.out_batch_stride, 5 * 4 * 24);
    EXPECT_EQ(params.lse_batch_stride, 4 * 5);
    EXPECT_EQ(params.lse_head_stride, 5);
}

TEST(ApiParams, UnitDimensionStridesBecomeZero) {
    DenseProblem p(DenseShape{1, 1, 3, 2, 2, 16, 16});
    ForwardArgs a = p.forward_args();
    a.q.stride[0] = 999999;
    const AttnParams params = params_of(a);
    EXPECT_EQ(params.q_batch_stride, 0);
    EXPECT_EQ(params.q_row_stride, 0);
    EXPECT_EQ(params.q_head_stride, 16);
}

TEST(ApiParams, BackwardFields) {
    DenseProblem p;
    BackwardArgs a = p.backward_args();
    a.softmax_d = p.softmax_d.view();
    a.options.deterministic = true;
    const AttnParams params = api::build_params(a, api::validate(a));
    EXPECT_EQ(params.op, OpKind::backward);
    EXPECT_EQ(params.dout, p.dout.data());
    EXPECT_EQ(params.dq, p.dq.data());
    EXPECT_EQ(params.dk, p.dk.data());
    EXPECT_EQ(params.dv, p.dv.data());
    EXPECT_EQ(params.softmax_d, p.softmax_d.data());
    EXPECT_EQ(params.dk_row_stride, 2 * 16);
    EXPECT_EQ(params.dv_batch_stride, 7 * 2 * 24);
    EXPECT_TRUE(params.deterministic);
}

TEST(ApiParams, VarlenLayout) {
    VarlenProblem p({3, 0, 5}, {4, 2, 6});
    const VarlenForwardArgs a = p.forward_args();
    const AttnParams params = api::build_params(a, api::validate(a));
    EXPECT_TRUE(params.is_varlen);
    EXPECT_EQ(params.batch, 3);
    EXPECT_EQ(params.seqlen_q, 5);  // max_seqlen_q
    EXPECT_EQ(params.seqlen_k, 6);
    EXPECT_EQ(params.total_q, 8);
    EXPECT_EQ(params.total_k, 12);
    EXPECT_EQ(params.q_batch_stride, 0);
    EXPECT_EQ(params.q_row_stride, 4 * 16);
    EXPECT_EQ(params.q_head_stride, 16);
    EXPECT_EQ(params.lse_batch_stride, 0);
    EXPECT_EQ(params.lse_head_stride, 8);
    EXPECT_EQ(params.cu_seqlens_q, p.cu_q.data());
    EXPECT_EQ(params.cu_seqlens_k, p.cu_k.data());
    EXPECT_EQ(params.seqused_k, nullptr);
}

TEST(ApiParams, KvCachePagedFields) {
    KvCacheProblem p({5, 9}, /*page_size=*/16);
    HostTensor cos(DType::f32, {40, 4}), sin(DType::f32, {40, 4});
    KvCacheArgs a = p.args();
    a.rotary_cos = cos.view();
    a.rotary_sin = sin.view();
    a.rotary_interleaved = false;
    a.num_splits = 3;
    const AttnParams params = api::build_params(a, api::validate(a));
    EXPECT_EQ(params.op, OpKind::kvcache);
    EXPECT_EQ(params.seqlen_k, 32);  // max_blocks_per_seq * page_size
    EXPECT_EQ(params.page_size, 16);
    EXPECT_EQ(params.max_blocks_per_seq, 2);
    EXPECT_EQ(params.block_table, p.block_table.data());
    EXPECT_EQ(params.block_table_batch_stride, 2);
    EXPECT_EQ(params.k, p.k_cache.data());
    EXPECT_EQ(params.k_cache_mut, p.k_cache.data());
    EXPECT_EQ(params.v_cache_mut, p.v_cache.data());
    EXPECT_EQ(params.k_batch_stride, 16 * 2 * 16);  // one physical block
    EXPECT_EQ(params.k_row_stride, 2 * 16);
    EXPECT_EQ(params.knew, p.knew.data());
    EXPECT_EQ(params.seqlen_new, 2);
    EXPECT_EQ(params.knew_row_stride, 2 * 16);
    EXPECT_EQ(params.cache_seqlens, p.cache_seqlens.data());
    EXPECT_EQ(params.rotary_dim, 8);
    EXPECT_EQ(params.seqlen_ro, 40);
    EXPECT_FALSE(params.rotary_interleaved);
    EXPECT_EQ(params.num_splits, 3);
}

TEST(ApiParams, KvCacheScalarLengthDefaultsToWholeCache) {
    KvCacheProblem p({0, 0});
    KvCacheArgs a = p.args(/*with_new=*/false);
    a.cache_seqlens = TensorView{};
    AttnParams params = api::build_params(a, api::validate(a));
    EXPECT_EQ(params.cache_seqlen, 32);
    EXPECT_EQ(params.cache_seqlens, nullptr);
    EXPECT_EQ(params.seqlen_k, 32);
    a.cache_seqlen = 10;
    params = api::build_params(a, api::validate(a));
    EXPECT_EQ(params.cache_seqlen, 10);
}

}  // namespace
}  // namespace flashattn::testing
