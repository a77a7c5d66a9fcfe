// merge_attention on CPU tensors: attention over all keys equals the merge of attention over two disjoint key
// halves; a part that saw no key weighs nothing; bad arguments are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "api/api_fixtures.h"

namespace flashattn::testing {
namespace {

// Keys [begin, end) of a dense problem's k and v, as views (no copy).
TensorView key_slice(HostTensor& t, int64_t begin, int64_t end) {
    TensorView v = t.view();
    v.data = static_cast<unsigned char*>(v.data) + begin * v.stride[1] * static_cast<int64_t>(dtype_size(v.dtype));
    v.shape[1] = end - begin;
    return v;
}

struct Halves {
    DenseProblem full, a, b;  // a and b: their own outputs; their k / v views point into full's
    int64_t split;
    explicit Halves(DenseShape shape, int64_t split_at)
        : full(shape, DType::f64), a(shape, DType::f64), b(shape, DType::f64), split(split_at) {
        forward(full.forward_args());
        ForwardArgs fa = a.forward_args(), fb = b.forward_args();
        fa.q = fb.q = full.q.view();
        fa.k = key_slice(full.k, 0, split);
        fa.v = key_slice(full.v, 0, split);
        fb.k = key_slice(full.k, split, shape.seqlen_k);
        fb.v = key_slice(full.v, split, shape.seqlen_k);
        // Bottom-right alignment differs between the halves and the whole: only plain (unmasked) attention splits.
        forward(fa);
        forward(fb);
    }
    MergeArgs merge_args(HostTensor& out, HostTensor& lse) {
        MergeArgs m;
        m.out_a = a.out.view();
        m.lse_a = a.lse.view();
        m.out_b = b.out.view();
        m.lse_b = b.lse.view();
        m.out = out.view();
        m.softmax_lse = lse.view();
        return m;
    }
};

TEST(ApiMerge, MergeOfKeyHalvesIsTheWhole) {
    const DenseShape shape{2, 5, 23, 4, 4, 16, 24};
    Halves h(shape, 9);
    HostTensor out(DType::f64, {2, 5, 4, 24}), lse(DType::f32, {2, 4, 5});
    out.poison();
    lse.poison();
    merge_attention(h.merge_args(out, lse));
    // The parts' LSEs are float32: each weight exp(lse_part - lse) carries their rounding, relative 2^-24 of |lse|.
    const double lse_rounding = std::ldexp(1.0, -24);
    double max_lse = 0, max_out = 0;
    for (int64_t i = 0; i < h.full.lse.numel(); ++i) max_lse = std::max(max_lse, std::fabs(h.full.lse.get(i)));
    for (int64_t i = 0; i < h.full.out.numel(); ++i) max_out = std::max(max_out, std::fabs(h.full.out.get(i)));
    const double out_tol = 4 * lse_rounding * (1 + max_lse) * max_out;
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out.get(i), h.full.out.get(i), out_tol) << i;
    for (int64_t i = 0; i < lse.numel(); ++i) EXPECT_NEAR(lse.get(i), h.full.lse.get(i), 4 * lse_rounding * (1 + max_lse)) << i;
}

TEST(ApiMerge, PartThatSawNoKeyWeighsNothing) {
    Halves h(DenseShape{1, 3, 10, 2, 2, 16, 16}, 4);
    for (int64_t i = 0; i < h.b.lse.numel(); ++i) h.b.lse.set(i, std::numeric_limits<double>::infinity());
    for (int64_t i = 0; i < h.b.out.numel(); ++i) h.b.out.set(i, 0.0);
    HostTensor out(DType::f64, {1, 3, 2, 16}), lse(DType::f32, {1, 2, 3});
    merge_attention(h.merge_args(out, lse));
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.get(i), h.a.out.get(i));
    for (int64_t i = 0; i < lse.numel(); ++i) EXPECT_NEAR(lse.get(i), h.a.lse.get(i), 1e-6);
    // Neither part saw a key: out 0, lse +inf.
    for (int64_t i = 0; i < h.a.lse.numel(); ++i) h.a.lse.set(i, std::numeric_limits<double>::infinity());
    merge_attention(h.merge_args(out, lse));
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.get(i), 0.0);
    for (int64_t i = 0; i < lse.numel(); ++i) EXPECT_EQ(lse.get(i), std::numeric_limits<double>::infinity());
}

TEST(ApiMerge, BadArgumentsAreNamed) {
    Halves h(DenseShape{1, 3, 10, 2, 2, 16, 16}, 4);
    HostTensor out(DType::f64, {1, 3, 2, 16}), lse(DType::f32, {1, 2, 3});
    MergeArgs m = h.merge_args(out, lse);
    m.out_b = h.full.k.view();  // (1, 10, 2, 16): seqlen 10, not 3
    EXPECT_INVALID(merge_attention(m), "out_b: expected shape (batch=1, seqlen_q=3, nheads=2, head_dim_v=16)");
    m = h.merge_args(out, lse);
    m.lse_b = out.view();
    EXPECT_INVALID(merge_attention(m), "lse_b:");
    m = h.merge_args(out, lse);
    m.out = h.a.out.view();  // merging in place is refused: outputs must not overlap inputs
    EXPECT_INVALID(merge_attention(m), "out");
    m = h.merge_args(out, lse);
    m.out_a = TensorView{};
    EXPECT_INVALID(merge_attention(m), "out_a: required");
}

}  // namespace
}  // namespace flashattn::testing
