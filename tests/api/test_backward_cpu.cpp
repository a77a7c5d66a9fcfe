// End-to-end backward calls on CPU tensors: gradients checked against central finite differences of the forward
// (float64), and against identities every attention gradient satisfies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "api/api_fixtures.h"

namespace flashattn::testing {
namespace {

// L = sum(dout * out) for the problem's current q, k, v.
double loss(DenseProblem& p, const AttentionOptions& o) {
    HostTensor out(p.dtype, p.out.shape()), lse(DType::f32, p.lse.shape());
    ForwardArgs a = p.forward_args();
    a.out = out.view();
    a.softmax_lse = lse.view();
    a.options = o;
    forward(a);
    double l = 0;
    for (int64_t i = 0; i < out.numel(); ++i) l += p.dout.get(i) * out.get(i);
    return l;
}

void run_forward_backward(DenseProblem& p, const AttentionOptions& o) {
    ForwardArgs f = p.forward_args();
    f.options = o;
    forward(f);
    BackwardArgs b = p.backward_args();
    b.softmax_d = p.softmax_d.view();
    b.options = o;
    backward(b);
}

void expect_matches_finite_differences(DenseProblem& p, const AttentionOptions& o) {
    run_forward_backward(p, o);
    // The backward reads the forward's softmax_lse, stored as float32: its rounding (~6e-8 relative) carries into
    // the probabilities and so into every gradient, whatever the data's precision.
    constexpr double kEps = 1e-5, kRelTol = 1e-6;
    struct Pair {
        HostTensor* x;
        const HostTensor* grad;
        const char* name;
    };
    for (const Pair& pr : {Pair{&p.q, &p.dq, "dq"}, Pair{&p.k, &p.dk, "dk"}, Pair{&p.v, &p.dv, "dv"}})
        for (int64_t i = 0; i < pr.x->numel(); ++i) {
            const double x0 = pr.x->get(i);
            pr.x->set(i, x0 + kEps);
            const double up = loss(p, o);
            pr.x->set(i, x0 - kEps);
            const double down = loss(p, o);
            pr.x->set(i, x0);
            const double fd = (up - down) / (2 * kEps);
            EXPECT_NEAR(pr.grad->get(i), fd, kRelTol * std::max(1.0, std::fabs(fd))) << pr.name << "[" << i << "]";
        }
}

TEST(ApiBackward, MatchesFiniteDifferences) {
    DenseProblem p(DenseShape{1, 3, 4, 2, 1, 8, 8}, DType::f64);
    expect_matches_finite_differences(p, AttentionOptions{});
}

TEST(ApiBackward, MatchesFiniteDifferencesWithEveryFeature) {
    DenseProblem p(DenseShape{2, 4, 3, 2, 1, 8, 16}, DType::f64, 5);
    HostTensor slopes(DType::f32, {2});
    slopes.set(0, 0.5);
    slopes.set(1, 0.25);
    AttentionOptions o;
    o.causal = true;  // seqlen_q > seqlen_k: the first row sees no key
    o.window_left = 1;
    o.softcap = 2.0f;
    o.alibi_slopes = slopes.view();
    o.dropout_p = 0.3f;  // the mask is a function of (seed, offset): the same in every forward
    o.seed = 123;
    o.softmax_scale = 0.4f;
    expect_matches_finite_differences(p, o);
}

TEST(ApiBackward, SingleKeyGradients) {
    // One key: probability 1 whatever the scores, so dq = dk = 0 and dv = dout (up to the float32 LSE's rounding).
    DenseProblem p(DenseShape{1, 1, 1, 1, 1, 8, 8}, DType::f64);
    run_forward_backward(p, AttentionOptions{});
    constexpr double kLseRounding = 1e-6;
    for (int64_t d = 0; d < 8; ++d) {
        EXPECT_NEAR(p.dq.get(d), 0.0, kLseRounding);
        EXPECT_NEAR(p.dk.get(d), 0.0, kLseRounding);
        EXPECT_NEAR(p.dv.get(d), p.dout.get(d), kLseRounding * std::fabs(p.dout.get(d)));
    }
}

// A zero softmax_scale: the scores do not depend on q or k, so dq = dk = 0 exactly, and the finite differences agree.
TEST(ApiBackward, ZeroScale) {
    DenseProblem p(DenseShape{1, 3, 4, 2, 1, 8, 8}, DType::f64);
    AttentionOptions o;
    o.softmax_scale = 0.0f;
    run_forward_backward(p, o);
    for (int64_t i = 0; i < p.dq.numel(); ++i) EXPECT_EQ(p.dq.get(i), 0.0);
    for (int64_t i = 0; i < p.dk.numel(); ++i) EXPECT_EQ(p.dk.get(i), 0.0);
    DenseProblem fd(DenseShape{1, 3, 4, 2, 1, 8, 8}, DType::f64);
    expect_matches_finite_differences(fd, o);
}

// Rows of the softmax sum to one, so d(scores) sums to zero over keys: sum_j dk_j = 0; and sum_j dv_j equals the
// sum of dout over the rows (and query heads) that attend.
TEST(ApiBackward, KeyGradientSums) {
    DenseProblem p(DenseShape{2, 5, 7, 4, 2, 16, 8});
    AttentionOptions o;
    o.causal = true;  // seqlen_q <= seqlen_k: every row sees a key
    run_forward_backward(p, o);
    const DenseShape& s = p.s;
    const int64_t group = s.nheads / s.nheads_k;
    for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t hk = 0; hk < s.nheads_k; ++hk) {
            for (int64_t d = 0; d < s.head_dim; ++d) {
                double sum = 0;
                for (int64_t j = 0; j < s.seqlen_k; ++j) sum += p.dk.get(((b * s.seqlen_k + j) * s.nheads_k + hk) * s.head_dim + d);
                EXPECT_NEAR(sum, 0.0, 1e-4);
            }
            for (int64_t d = 0; d < s.head_dim_v; ++d) {
                double dv_sum = 0, dout_sum = 0;
                for (int64_t j = 0; j < s.seqlen_k; ++j)
                    dv_sum += p.dv.get(((b * s.seqlen_k + j) * s.nheads_k + hk) * s.head_dim_v + d);
                for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
                    for (int64_t i = 0; i < s.seqlen_q; ++i)
                        dout_sum += p.dout.get(((b * s.seqlen_q + i) * s.nheads + h) * s.head_dim_v + d);
                EXPECT_NEAR(dv_sum, dout_sum, 1e-4);
            }
        }
    // softmax_d = rowsum(dout * out)
    for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < s.nheads; ++h)
            for (int64_t i = 0; i < s.seqlen_q; ++i) {
                double d = 0;
                for (int64_t c = 0; c < s.head_dim_v; ++c) {
                    const int64_t at = ((b * s.seqlen_q + i) * s.nheads + h) * s.head_dim_v + c;
                    d += p.dout.get(at) * p.out.get(at);
                }
                EXPECT_NEAR(p.softmax_d.get((b * s.nheads + h) * s.seqlen_q + i), d, 1e-4);
            }
}

TEST(ApiBackward, VarlenMatchesPadded) {
    VarlenProblem v({3, 3}, {5, 5});
    DenseProblem d(DenseShape{2, 3, 5, 4, 2, 16, 16});
    for (int64_t i = 0; i < v.q.numel(); ++i) d.q.set(i, v.q.get(i));
    for (int64_t i = 0; i < v.k.numel(); ++i) d.k.set(i, v.k.get(i));
    for (int64_t i = 0; i < v.v.numel(); ++i) d.v.set(i, v.v.get(i));
    for (int64_t i = 0; i < v.dout.numel(); ++i) d.dout.set(i, v.dout.get(i));
    run_forward_backward(d, AttentionOptions{});
    varlen_forward(v.forward_args());
    varlen_backward(v.backward_args());
    for (int64_t i = 0; i < v.dq.numel(); ++i) EXPECT_NEAR(v.dq.get(i), d.dq.get(i), 1e-5);
    for (int64_t i = 0; i < v.dk.numel(); ++i) EXPECT_NEAR(v.dk.get(i), d.dk.get(i), 1e-5);
    for (int64_t i = 0; i < v.dv.numel(); ++i) EXPECT_NEAR(v.dv.get(i), d.dv.get(i), 1e-5);
}

}  // namespace
}  // namespace flashattn::testing
