// Empty problems: batch 0, seqlen_q 0 and nheads 0 are valid no-ops; seqlen_k 0 gives out 0 and LSE +inf; a
// backward without queries gives zero key gradients.
#include <gtest/gtest.h>

#include <limits>

#include "api/api_fixtures.h"

namespace flashattn::testing {
namespace {

TEST(ApiEmpty, BatchZeroForwardIsANoOp) {
    DenseProblem p(DenseShape{0, 5, 7, 4, 2, 16, 16});
    EXPECT_NO_THROW(forward(p.forward_args()));
    EXPECT_NO_THROW(backward(p.backward_args()));
    EXPECT_EQ(workspace_size(p.forward_args()), 0u);
}

TEST(ApiEmpty, SeqlenQZeroForwardIsANoOp) {
    DenseProblem p(DenseShape{2, 0, 7, 4, 2, 16, 16});
    ForwardArgs a = p.forward_args();
    a.attn_probs = p.probs.view();
    EXPECT_NO_THROW(forward(a));
}

TEST(ApiEmpty, NoHeadsIsANoOp) {
    DenseProblem p(DenseShape{2, 5, 7, 0, 0, 16, 16});
    EXPECT_NO_THROW(forward(p.forward_args()));
}

TEST(ApiEmpty, EmptyTensorsMayHaveNullData) {
    DenseProblem p(DenseShape{0, 5, 7, 4, 2, 16, 16});
    ForwardArgs a = p.forward_args();
    EXPECT_EQ(a.q.data, nullptr);
    EXPECT_NO_THROW(forward(a));
}

TEST(ApiEmpty, EmptyTensorsMayHaveAnyStrides) {
    // torch gives an empty (0, 4, 5) tensor the strides (20, 5, 1), not the (0, 0, 1) that 0 * 4 * 5 would give.
    DenseProblem p(DenseShape{0, 5, 7, 4, 2, 16, 16});
    ForwardArgs a = p.forward_args();
    a.softmax_lse.stride[0] = 4 * 5;
    a.softmax_lse.stride[1] = 5;
    EXPECT_NO_THROW(forward(a));
    ForwardArgs broadcast = p.forward_args();  // a broadcast empty tensor: all strides 0
    for (int d = 0; d < broadcast.q.ndim; ++d) broadcast.q.stride[d] = 0;
    EXPECT_NO_THROW(forward(broadcast));
}

TEST(ApiEmpty, EmptyProblemsAreStillValidated) {
    DenseProblem p(DenseShape{0, 5, 7, 4, 3, 16, 16});
    EXPECT_INVALID(forward(p.forward_args()), "k: expected nheads_k dividing nheads = 4");
}

TEST(ApiEmpty, SeqlenKZeroGivesZeroOutAndInfiniteLse) {
    DenseProblem p(DenseShape{2, 3, 0, 4, 2, 16, 16});
    forward(p.forward_args());
    for (int64_t i = 0; i < p.out.numel(); ++i) EXPECT_EQ(p.out.get(i), 0.0);
    for (int64_t i = 0; i < p.lse.numel(); ++i) EXPECT_EQ(p.lse.get(i), std::numeric_limits<double>::infinity());
}

TEST(ApiEmpty, BackwardWithoutQueriesZeroesKeyGradients) {
    DenseProblem p(DenseShape{2, 0, 7, 4, 2, 16, 16});
    backward(p.backward_args());
    for (int64_t i = 0; i < p.dk.numel(); ++i) EXPECT_EQ(p.dk.get(i), 0.0);
    for (int64_t i = 0; i < p.dv.numel(); ++i) EXPECT_EQ(p.dv.get(i), 0.0);
}

TEST(ApiEmpty, BackwardWithoutQueriesZeroesStridedGradients) {
    DenseProblem p(DenseShape{2, 0, 3, 2, 2, 8, 8});
    HostTensor wide(DType::f32, {2, 3, 3, 8});  // dk is 2 of 3 heads: the third must stay untouched
    wide.poison();
    BackwardArgs a = p.backward_args();
    a.dk = make_strided_view(wide.data(), DType::f32, {2, 3, 2, 8}, {3 * 3 * 8, 3 * 8, 8, 1});
    backward(a);
    for (int64_t i = 0; i < wide.numel(); ++i) {
        const bool third_head = (i / 8) % 3 == 2;
        if (third_head) EXPECT_TRUE(std::isnan(wide.get(i)));
        else EXPECT_EQ(wide.get(i), 0.0);
    }
}

TEST(ApiEmpty, VarlenWithoutSequences) {
    VarlenProblem p({}, {});
    EXPECT_NO_THROW(varlen_forward(p.forward_args()));
    EXPECT_NO_THROW(varlen_backward(p.backward_args()));
}

TEST(ApiEmpty, VarlenAllQueriesEmptyZeroesKeyGradients) {
    VarlenProblem p({0, 0}, {3, 2});
    varlen_backward(p.backward_args());
    for (int64_t i = 0; i < p.dk.numel(); ++i) EXPECT_EQ(p.dk.get(i), 0.0);
    for (int64_t i = 0; i < p.dv.numel(); ++i) EXPECT_EQ(p.dv.get(i), 0.0);
}

TEST(ApiEmpty, KvCacheBatchZero) {
    KvCacheProblem p({});
    EXPECT_NO_THROW(kvcache_forward(p.args()));
}

TEST(ApiEmpty, KvCacheWithoutQueriesStillAppends) {
    KvCacheProblem p({3, 5});
    p.seqlen_q = 0;
    HostTensor q(DType::f32, {2, 0, 4, 16}), out(DType::f32, {2, 0, 4, 16}), lse(DType::f32, {2, 4, 0});
    KvCacheArgs a = p.args();
    a.q = q.view();
    a.out = out.view();
    a.softmax_lse = lse.view();
    kvcache_forward(a);
    for (int64_t d = 0; d < p.head_dim; ++d)  // sequence 0, new key 0, kv head 0 at position 3
        EXPECT_EQ(p.k_cache.get((3 * p.nheads_k) * p.head_dim + d), p.knew.get(d));
}

}  // namespace
}  // namespace flashattn::testing
