// The tiled reference backward against the naive analytic fp64 backward, feature by feature.
#include <gtest/gtest.h>

#include "reference/reference_checks.h"

namespace flashattn::testing {
namespace {

ProblemConfig base(DType dtype = DType::f16) {
    ProblemConfig c;
    c.dtype = dtype;
    c.batch = 2;
    c.nheads = c.nheads_k = 2;
    c.head_dim = 40;
    c.seqlen_q = c.seqlen_k = 97;
    c.softmax_d = true;
    return c;
}

TEST(ReferenceBackward, Dtypes) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) check_backward(base(dtype));
}

TEST(ReferenceBackward, Causal) {
    for (auto [sq, sk] : {std::pair{97, 97}, {17, 97}, {97, 17}}) {
        ProblemConfig c = base();
        c.causal = true;
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        check_backward(c);
    }
}

TEST(ReferenceBackward, SlidingWindows) {
    for (auto [left, right] : {std::pair{20, -1}, {-1, 7}, {33, 5}, {0, 0}}) {
        for (auto [sq, sk] : {std::pair{97, 97}, {40, 97}, {97, 40}}) {
            ProblemConfig c = base(DType::bf16);
            c.seqlen_q = sq;
            c.seqlen_k = sk;
            c.window_left = left;
            c.window_right = right;
            check_backward(c);
        }
    }
}

TEST(ReferenceBackward, AlibiAndSoftcap) {
    ProblemConfig c = base();
    c.alibi = Alibi::per_head;
    check_backward(c);
    c.alibi = Alibi::per_batch_head;
    c.causal = true;
    check_backward(c);
    c.alibi = Alibi::none;
    c.softcap = 3.0f;
    c.input_stddev = 2.0;
    check_backward(c);
}

TEST(ReferenceBackward, Dropout) {
    ProblemConfig c = base();
    c.dropout_p = 0.3f;
    c.seed = 77;
    c.offset = 5;
    check_backward(c);
    c.causal = true;
    c.softcap = 5.0f;
    c.alibi = Alibi::per_head;
    check_backward(c);
}

TEST(ReferenceBackward, GroupedQueryHeads) {
    for (auto [h, hk] : {std::pair{4, 4}, {4, 2}, {8, 1}, {16, 2}}) {
        ProblemConfig c = base();
        c.nheads = h;
        c.nheads_k = hk;
        c.seqlen_q = 33;
        c.seqlen_k = 57;
        c.causal = true;
        check_backward(c);
    }
}

TEST(ReferenceBackward, OddSequenceLengths) {
    for (auto [sq, sk] : {std::pair{1, 1}, {1, 17}, {17, 1}, {113, 400}, {400, 113}}) {
        ProblemConfig c = base();
        c.batch = 1;
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        c.causal = sq != sk;
        check_backward(c);
    }
}

TEST(ReferenceBackward, HeadDims) {
    for (auto [d, dv] : {std::pair{72, 72}, {256, 256}, {72, 40}, {40, 256}}) {
        ProblemConfig c = base();
        c.batch = 1;
        c.head_dim = d;
        c.head_dim_v = dv;
        c.seqlen_q = 65;
        c.seqlen_k = 90;
        check_backward(c);
    }
}

TEST(ReferenceBackward, NonContiguous) {
    for (Layout layout : {Layout::packed_qkv, Layout::row_padding}) {
        ProblemConfig c = base();
        c.layout = layout;
        c.causal = true;
        check_backward(c);
    }
}

TEST(ReferenceBackward, FullyMaskedRows) {
    ProblemConfig c = base();
    c.seqlen_q = 90;
    c.seqlen_k = 30;
    c.window_left = 0;
    c.window_right = 0;
    check_backward(c);
    c.window_left = -1;
    c.window_right = -1;
    c.seqlen_k = 0;
    check_backward(c);
}

}  // namespace
}  // namespace flashattn::testing
