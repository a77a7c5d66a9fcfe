// The reference backward against finite differences of the reference forward, all in fp64 (f64 tensors, fp64
// accumulation): checks the gradient formulas themselves, independently of the naive backward.
//
// The loss is L = sum(out o W) for a fixed random W, so dL/dout = W is the dout given to the backward. Every input
// element x gets the central difference (L(x + h) - L(x - h)) / 2h. Dropout uses a fixed seed, so the mask is the
// same in every forward and L is smooth.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "reference/attention_problem.h"
#include "reference/closeness.h"
#include "reference/reference.h"

namespace flashattn::testing {
namespace {

// Step of the central differences: the truncation error is O(h^2) ~ 1e-10, the cancellation error ~ 1e-16 / h.
constexpr double kStep = 1e-5;
// Agreement expected between analytic and numerical gradients (relative to the largest gradient element). The
// backward recomputes P from the LSE, which the API stores in fp32: relative errors of ~1e-7.
constexpr Tolerance kGradCheckTolerance{1e-5, 1e-6};

ProblemConfig small(int nheads, int nheads_k) {
    ProblemConfig c;
    c.dtype = DType::f64;
    c.batch = 2;
    c.nheads = nheads;
    c.nheads_k = nheads_k;
    c.head_dim = 8;
    c.head_dim_v = 6;
    c.seqlen_q = 9;
    c.seqlen_k = 13;
    return c;
}

double loss(Problem& prob, const std::vector<double>& weights) {
    reference::forward(prob.params(OpKind::forward), reference::Accum::f64);
    const std::vector<double> out = prob.out.logical();
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * weights[i];
    return l;
}

// Central differences of the loss with respect to every element of t.
std::vector<double> numerical_gradient(Problem& prob, StridedTensor& t, const std::vector<double>& weights) {
    std::vector<double> grad(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t at = t.storage_index(i);
        const double x = t.storage->get(at);
        t.storage->set(at, x + kStep);
        const double up = loss(prob, weights);
        t.storage->set(at, x - kStep);
        const double down = loss(prob, weights);
        t.storage->set(at, x);
        grad[static_cast<size_t>(i)] = (up - down) / (2 * kStep);
    }
    return grad;
}

void check_gradients(const ProblemConfig& cfg) {
    Problem prob(cfg);
    // W = dout: the loss's gradient with respect to out.
    const std::vector<double> weights = prob.dout.logical();
    const double l0 = loss(prob, weights);  // also leaves out and lse in place for the backward
    ASSERT_TRUE(std::isfinite(l0));
    reference::backward(prob.params(OpKind::backward), reference::Accum::f64);
    const std::vector<double> dq = prob.dq.logical(), dk = prob.dk.logical(), dv = prob.dv.logical();

    EXPECT_TRUE(all_close(dq, numerical_gradient(prob, prob.q, weights), kGradCheckTolerance, "dq"));
    EXPECT_TRUE(all_close(dk, numerical_gradient(prob, prob.k, weights), kGradCheckTolerance, "dk"));
    EXPECT_TRUE(all_close(dv, numerical_gradient(prob, prob.v, weights), kGradCheckTolerance, "dv"));
}

TEST(ReferenceGradCheck, Plain) { check_gradients(small(2, 2)); }

TEST(ReferenceGradCheck, Causal) {
    ProblemConfig c = small(2, 2);
    c.causal = true;
    check_gradients(c);
}

TEST(ReferenceGradCheck, Window) {
    ProblemConfig c = small(2, 2);
    c.window_left = 3;
    c.window_right = 2;
    check_gradients(c);
}

TEST(ReferenceGradCheck, Softcap) {
    ProblemConfig c = small(2, 2);
    c.softcap = 1.5f;
    c.input_stddev = 2.0;  // well into the cap's curved part
    check_gradients(c);
}

TEST(ReferenceGradCheck, Alibi) {
    ProblemConfig c = small(2, 2);
    c.alibi = Alibi::per_batch_head;
    c.causal = true;
    check_gradients(c);
}

TEST(ReferenceGradCheck, GroupedQueryHeads) {
    ProblemConfig c = small(4, 2);
    check_gradients(c);
    c = small(3, 1);
    c.window_left = 4;
    check_gradients(c);
}

TEST(ReferenceGradCheck, Dropout) {
    ProblemConfig c = small(2, 1);
    c.dropout_p = 0.3f;
    c.seed = 2024;
    c.offset = 11;
    check_gradients(c);
}

TEST(ReferenceGradCheck, Everything) {
    ProblemConfig c = small(4, 2);
    c.causal = true;
    c.window_left = 5;
    c.softcap = 2.0f;
    c.alibi = Alibi::per_head;
    c.dropout_p = 0.2f;
    check_gradients(c);
}

TEST(ReferenceGradCheck, Varlen) {
    ProblemConfig c = small(2, 1);
    c.seqlens_q = {4, 0, 9, 6};
    c.seqlens_k = {7, 5, 3, 12};
    c.seqused_k = {7, 5, 3, 8};
    c.causal = true;
    check_gradients(c);
}

}  // namespace
}  // namespace flashattn::testing
