// End-to-end forward calls on CPU tensors through the public API, checked against properties any correct
// attention has (not against the reference's own code): a hand-computed case, outputs that are convex combinations
// of the visible values, finite log-sum-exps, probability rows summing to one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "api/api_fixtures.h"
#include "common/mask.h"

namespace flashattn::testing {
namespace {

// Index of element (b, row, h, d) of a contiguous (B, rows, H, D) tensor.
int64_t at4(const HostTensor& t, int64_t b, int64_t row, int64_t h, int64_t d) {
    const auto& s = t.shape();
    return ((b * s[1] + row) * s[2] + h) * s[3] + d;
}

// Each out element lies within [min, max] of the values of the keys its row sees; rows seeing no key are 0 with
// LSE +inf; other LSEs are finite. `slack` absorbs the rounding of low-precision outputs.
void expect_convex_rows(const DenseProblem& p, int32_t window_left, int32_t window_right, double slack) {
    const DenseShape& s = p.s;
    const int64_t group = s.nheads / s.nheads_k;
    for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < s.nheads; ++h)
            for (int64_t i = 0; i < s.seqlen_q; ++i) {
                const KeyRange r = visible_keys(i, s.seqlen_q, s.seqlen_k, window_left, window_right);
                const double lse = p.lse.get((b * s.nheads + h) * s.seqlen_q + i);
                if (r.begin >= r.end) {
                    EXPECT_EQ(lse, std::numeric_limits<double>::infinity());
                    for (int64_t d = 0; d < s.head_dim_v; ++d) EXPECT_EQ(p.out.get(at4(p.out, b, i, h, d)), 0.0);
                    continue;
                }
                EXPECT_TRUE(std::isfinite(lse)) << "b " << b << " h " << h << " row " << i;
                for (int64_t d = 0; d < s.head_dim_v; ++d) {
                    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
                    for (int64_t j = r.begin; j < r.end; ++j) {
                        const double v = p.v.get(at4(p.v, b, j, h / group, d));
                        lo = std::min(lo, v);
                        hi = std::max(hi, v);
                    }
                    const double o = p.out.get(at4(p.out, b, i, h, d));
                    EXPECT_GE(o, lo - slack) << "b " << b << " h " << h << " row " << i << " d " << d;
                    EXPECT_LE(o, hi + slack) << "b " << b << " h " << h << " row " << i << " d " << d;
                }
            }
}

TEST(ApiForward, HandComputedOneQueryTwoKeys) {
    DenseProblem p(DenseShape{1, 1, 2, 1, 1, 8, 8}, DType::f64);
    for (int64_t d = 0; d < 8; ++d) {
        p.q.set(d, d == 0 ? 1.0 : 0.0);
        p.k.set(d, 0.0);              // key 0: score 0
        p.k.set(8 + d, d == 0 ? 2.0 : 0.0);  // key 1: score 2
        p.v.set(d, 1.0 + d);
        p.v.set(8 + d, -3.0);
    }
    ForwardArgs a = p.forward_args();
    a.options.softmax_scale = 1.0f;
    forward(a);
    const double p1 = std::exp(2.0) / (1.0 + std::exp(2.0)), p0 = 1.0 - p1;
    for (int64_t d = 0; d < 8; ++d) EXPECT_NEAR(p.out.get(d), p0 * (1.0 + d) + p1 * -3.0, 1e-12);
    EXPECT_NEAR(p.lse.get(0), std::log(1.0 + std::exp(2.0)), 1e-6);  // stored as float32
}

TEST(ApiForward, DefaultScaleIsInverseSqrtHeadDim) {
    DenseProblem p(DenseShape{1, 1, 2, 1, 1, 16, 8}, DType::f64);
    for (int64_t d = 0; d < 16; ++d) {
        p.q.set(d, 1.0);
        p.k.set(d, 0.0);
        p.k.set(16 + d, 1.0);  // q.k = 16, scaled by 1/4: score 4
    }
    for (int64_t d = 0; d < 8; ++d) {
        p.v.set(d, 0.0);
        p.v.set(8 + d, 1.0);
    }
    forward(p.forward_args());
    EXPECT_NEAR(p.out.get(0), std::exp(4.0) / (1.0 + std::exp(4.0)), 1e-12);
}

// softmax_scale 0 is a scale, as in FlashAttention (not the default): every visible key weighs the same, so each
// output row is the mean of the values its row sees and its LSE is log(number of those keys).
TEST(ApiForward, ZeroScaleAveragesTheVisibleValues) {
    DenseProblem p(DenseShape{2, 9, 6, 4, 2, 16, 24}, DType::f64);
    ForwardArgs a = p.forward_args();
    a.options.softmax_scale = 0.0f;
    a.options.causal = true;  // seqlen_q > seqlen_k: rows seeing 0 .. 6 keys
    forward(a);
    const DenseShape& s = p.s;
    for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < s.nheads; ++h)
            for (int64_t i = 0; i < s.seqlen_q; ++i) {
                const KeyRange r = visible_keys(i, s.seqlen_q, s.seqlen_k, -1, 0);
                const double lse = p.lse.get((b * s.nheads + h) * s.seqlen_q + i);
                if (r.begin >= r.end) {
                    EXPECT_EQ(lse, std::numeric_limits<double>::infinity());
                    continue;
                }
                EXPECT_NEAR(lse, std::log(static_cast<double>(r.end - r.begin)), 1e-6);  // stored as float32
                for (int64_t d = 0; d < s.head_dim_v; ++d) {
                    double mean = 0.0;
                    for (int64_t j = r.begin; j < r.end; ++j) mean += p.v.get(at4(p.v, b, j, h / 2, d));
                    mean /= static_cast<double>(r.end - r.begin);
                    EXPECT_NEAR(p.out.get(at4(p.out, b, i, h, d)), mean, 1e-12) << "row " << i << " d " << d;
                }
            }
}

TEST(ApiForward, OutputsAreConvexCombinations) {
    DenseProblem p;
    forward(p.forward_args());
    expect_convex_rows(p, -1, -1, 1e-5);
}

TEST(ApiForward, CausalRowsSeeOnlyTheirPrefix) {
    DenseProblem p(DenseShape{2, 9, 6, 4, 2, 16, 24});  // seqlen_q > seqlen_k: the first rows see no key
    ForwardArgs a = p.forward_args();
    a.options.causal = true;
    forward(a);
    expect_convex_rows(p, -1, 0, 1e-5);
}

TEST(ApiForward, SlidingWindow) {
    DenseProblem p(DenseShape{1, 8, 8, 2, 1, 16, 16});
    ForwardArgs a = p.forward_args();
    a.options.window_left = 2;
    a.options.window_right = 1;
    forward(a);
    expect_convex_rows(p, 2, 1, 1e-5);
}

TEST(ApiForward, LowPrecisionDtypes) {
    for (DType dt : {DType::f16, DType::bf16}) {
        DenseProblem p(DenseShape{}, dt);
        forward(p.forward_args());
        expect_convex_rows(p, -1, -1, dt == DType::bf16 ? 2e-2 : 4e-3);
    }
}

TEST(ApiForward, AttnProbsRowsSumToOne) {
    DenseProblem p;
    ForwardArgs a = p.forward_args();
    a.attn_probs = p.probs.view();
    a.options.causal = true;
    forward(a);
    const DenseShape& s = p.s;
    for (int64_t row = 0; row < s.batch * s.nheads * s.seqlen_q; ++row) {
        double sum = 0;
        for (int64_t j = 0; j < s.seqlen_k; ++j) {
            const double pr = p.probs.get(row * s.seqlen_k + j);
            EXPECT_GE(pr, 0.0);
            sum += pr;
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);  // seqlen_q <= seqlen_k: every row sees a key
    }
}

TEST(ApiForward, StridedInputsGiveTheSameResult) {
    DenseProblem dense(DenseShape{2, 5, 7, 2, 2, 16, 16});
    forward(dense.forward_args());
    // The same k inside a buffer with room for 3 heads: only the strides differ.
    DenseProblem p(DenseShape{2, 5, 7, 2, 2, 16, 16});
    HostTensor wide(DType::f32, {2, 7, 3, 16});
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t j = 0; j < 7; ++j)
            for (int64_t h = 0; h < 2; ++h)
                for (int64_t d = 0; d < 16; ++d) wide.set(at4(wide, b, j, h, d), p.k.get(at4(p.k, b, j, h, d)));
    ForwardArgs a = p.forward_args();
    a.k = make_strided_view(wide.data(), DType::f32, {2, 7, 2, 16}, {7 * 3 * 16, 3 * 16, 16, 1});
    forward(a);
    for (int64_t i = 0; i < p.out.numel(); ++i) EXPECT_EQ(p.out.get(i), dense.out.get(i));
}

TEST(ApiVarlen, OutputsAreConvexCombinations) {
    VarlenProblem p({3, 0, 5, 2}, {4, 2, 6, 0});  // an empty query sequence and a sequence without keys
    VarlenForwardArgs a = p.forward_args();
    a.options.causal = true;
    varlen_forward(a);
    const int64_t group = p.nheads / p.nheads_k;
    int64_t q0 = 0, k0 = 0;
    for (size_t b = 0; b < p.lens_q.size(); ++b) {
        const int64_t sq = p.lens_q[b], sk = p.lens_k[b];
        for (int64_t h = 0; h < p.nheads; ++h)
            for (int64_t i = 0; i < sq; ++i) {
                const KeyRange r = visible_keys(i, sq, sk, -1, 0);
                const double lse = p.lse.get(h * p.q.shape()[0] + q0 + i);
                const int64_t out_row = ((q0 + i) * p.nheads + h) * p.head_dim_v;
                if (r.begin >= r.end) {
                    EXPECT_EQ(lse, std::numeric_limits<double>::infinity());
                    for (int64_t d = 0; d < p.head_dim_v; ++d) EXPECT_EQ(p.out.get(out_row + d), 0.0);
                    continue;
                }
                EXPECT_TRUE(std::isfinite(lse));
                for (int64_t d = 0; d < p.head_dim_v; ++d) {
                    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
                    for (int64_t j = r.begin; j < r.end; ++j) {
                        const double v = p.v.get(((k0 + j) * p.nheads_k + h / group) * p.head_dim_v + d);
                        lo = std::min(lo, v);
                        hi = std::max(hi, v);
                    }
                    EXPECT_GE(p.out.get(out_row + d), lo - 1e-5);
                    EXPECT_LE(p.out.get(out_row + d), hi + 1e-5);
                }
            }
        q0 += sq;
        k0 += sk;
    }
}

TEST(ApiVarlen, SameAsPaddedForEqualLengths) {
    VarlenProblem p({4, 4}, {6, 6});  // 4 query heads, 2 kv heads, head dims 16
    DenseProblem padded(DenseShape{2, 4, 6, 4, 2, 16, 16});
    // Same numbers in both layouts: padded (b, s, h, d) rows are the packed rows in order.
    for (int64_t i = 0; i < p.q.numel(); ++i) padded.q.set(i, p.q.get(i));
    for (int64_t i = 0; i < p.k.numel(); ++i) padded.k.set(i, p.k.get(i));
    for (int64_t i = 0; i < p.v.numel(); ++i) padded.v.set(i, p.v.get(i));
    forward(padded.forward_args());
    varlen_forward(p.forward_args());
    for (int64_t i = 0; i < p.out.numel(); ++i) EXPECT_NEAR(p.out.get(i), padded.out.get(i), 1e-6);
    for (int64_t h = 0; h < 4; ++h)
        for (int64_t r = 0; r < 8; ++r)  // varlen (nheads, total_q) vs padded (batch, nheads, seqlen_q)
            EXPECT_NEAR(p.lse.get(h * 8 + r), padded.lse.get(((r / 4) * 4 + h) * 4 + r % 4), 1e-5);
}

}  // namespace
}  // namespace flashattn::testing
