// The tiled reference forward against the naive fp64 attention, feature by feature, with fp32 and fp64
// accumulation. Every run starts from fresh random inputs and NaN-poisoned outputs.
#include <gtest/gtest.h>

#include "reference/reference_checks.h"

namespace flashattn::testing {
namespace {

ProblemConfig base(DType dtype = DType::f16) {
    ProblemConfig c;
    c.dtype = dtype;
    c.batch = 2;
    c.nheads = c.nheads_k = 2;
    c.head_dim = 72;
    c.seqlen_q = c.seqlen_k = 113;
    return c;
}

TEST(ReferenceForward, Dtypes) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) check_forward(base(dtype));
}

TEST(ReferenceForward, Causal) {
    for (auto [sq, sk] : {std::pair{113, 113}, {17, 113}, {113, 17}}) {
        ProblemConfig c = base();
        c.causal = true;
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        c.attn_probs = true;
        check_forward(c);
    }
}

TEST(ReferenceForward, SlidingWindows) {
    const std::pair<int, int> windows[] = {{20, -1}, {-1, 7}, {33, 5}, {0, 0}, {0, -1}, {-1, 0}, {150, 150}};
    for (auto [left, right] : windows) {
        for (auto [sq, sk] : {std::pair{113, 113}, {40, 113}, {113, 40}}) {
            ProblemConfig c = base(DType::bf16);
            c.seqlen_q = sq;
            c.seqlen_k = sk;
            c.window_left = left;
            c.window_right = right;
            c.attn_probs = true;
            check_forward(c);
        }
    }
}

TEST(ReferenceForward, CausalWithLeftWindow) {
    ProblemConfig c = base();
    c.causal = true;
    c.window_left = 31;
    check_forward(c);
}

TEST(ReferenceForward, Alibi) {
    for (Alibi alibi : {Alibi::per_head, Alibi::per_batch_head})
        for (bool causal : {false, true}) {
            ProblemConfig c = base();
            c.alibi = alibi;
            c.causal = causal;
            c.seqlen_k = 150;
            c.attn_probs = true;
            check_forward(c);
        }
}

TEST(ReferenceForward, Softcap) {
    for (float softcap : {0.5f, 5.0f, 30.0f}) {
        ProblemConfig c = base();
        c.softcap = softcap;
        c.input_stddev = 2.0;  // scores large enough for the cap to bend them
        check_forward(c);
    }
}

TEST(ReferenceForward, AllModifiersTogether) {
    ProblemConfig c = base(DType::bf16);
    c.causal = true;
    c.window_left = 50;
    c.softcap = 8.0f;
    c.alibi = Alibi::per_batch_head;
    c.dropout_p = 0.2f;
    c.nheads = 4;
    c.nheads_k = 2;
    c.attn_probs = true;
    check_forward(c);
}

TEST(ReferenceForward, Dropout) {
    for (float p : {0.1f, 0.5f, 0.9f}) {
        ProblemConfig c = base();
        c.dropout_p = p;
        c.attn_probs = true;
        c.seed = 0x123456789abcdefull;
        c.offset = 0x100000007ull;  // uses both halves of the offset
        check_forward(c);
    }
}

TEST(ReferenceForward, GroupedQueryHeads) {
    // Ratios 1, 2, 8 and multi-query (one kv head).
    for (auto [h, hk] : {std::pair{4, 4}, {4, 2}, {8, 1}, {16, 2}}) {
        ProblemConfig c = base();
        c.nheads = h;
        c.nheads_k = hk;
        c.seqlen_q = 33;
        c.seqlen_k = 57;
        c.causal = true;
        check_forward(c);
    }
}

TEST(ReferenceForward, OddSequenceLengths) {
    const std::pair<int, int> lengths[] = {{1, 1}, {1, 17}, {17, 1}, {17, 113}, {113, 1000}, {1000, 113}};
    for (auto [sq, sk] : lengths)
        for (bool causal : {false, true}) {
            ProblemConfig c = base();
            c.batch = 1;
            c.nheads = c.nheads_k = 2;
            c.head_dim = 40;
            c.seqlen_q = sq;
            c.seqlen_k = sk;
            c.causal = causal;
            check_forward(c);
        }
}

TEST(ReferenceForward, LongSequence) {
    ProblemConfig c = base();
    c.batch = 1;
    c.nheads = c.nheads_k = 2;
    c.head_dim = 40;
    c.seqlen_q = c.seqlen_k = 1000;
    c.causal = true;
    c.window_left = 300;
    check_forward(c, reference::Accum::f32);
}

TEST(ReferenceForward, HeadDims) {
    for (auto [d, dv] : {std::pair{40, 40}, {72, 72}, {256, 256}, {72, 40}, {40, 256}, {256, 72}}) {
        ProblemConfig c = base();
        c.head_dim = d;
        c.head_dim_v = dv;
        c.seqlen_q = 65;
        c.seqlen_k = 90;
        check_forward(c);
    }
}

TEST(ReferenceForward, NonContiguous) {
    for (Layout layout : {Layout::packed_qkv, Layout::row_padding}) {
        ProblemConfig c = base();
        c.layout = layout;
        c.causal = true;
        check_forward(c);
    }
}

TEST(ReferenceForward, FullyMaskedRows) {
    // A zero-width window with seqlen_q > seqlen_k: the first rows sit left of key 0 and see nothing (LSE +inf,
    // out 0); the window (-1, 0) with sq > sk (causal) does the same; an empty key sequence masks every row.
    ProblemConfig c = base();
    c.seqlen_q = 100;
    c.seqlen_k = 30;
    c.window_left = 0;
    c.window_right = 0;
    c.attn_probs = true;
    check_forward(c);
    c.window_left = -1;
    c.causal = true;
    check_forward(c);
    c.causal = false;
    c.window_right = -1;
    c.seqlen_k = 0;
    c.attn_probs = false;
    check_forward(c);
}

TEST(ReferenceForward, NonDefaultScale) {
    ProblemConfig c = base();
    c.scale = 0.37f;
    check_forward(c);
}

}  // namespace
}  // namespace flashattn::testing
