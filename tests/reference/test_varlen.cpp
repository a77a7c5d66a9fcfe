// Variable-length batches: ragged sequences packed along the rows, empty sequences, seqused_k.
#include <gtest/gtest.h>

#include "reference/reference_checks.h"

namespace flashattn::testing {
namespace {

ProblemConfig ragged(DType dtype = DType::f16) {
    ProblemConfig c;
    c.dtype = dtype;
    c.nheads = 4;
    c.nheads_k = 2;
    c.head_dim = 40;
    // An empty query sequence, an empty key sequence, one longer than a tile, length-1 rows.
    c.seqlens_q = {5, 0, 113, 64, 1, 30};
    c.seqlens_k = {17, 3, 100, 0, 70, 30};
    return c;
}

TEST(ReferenceVarlen, Forward) {
    for (bool causal : {false, true}) {
        ProblemConfig c = ragged();
        c.causal = causal;
        c.attn_probs = true;
        check_forward(c);
    }
}

TEST(ReferenceVarlen, ForwardWithModifiers) {
    ProblemConfig c = ragged(DType::bf16);
    c.window_left = 9;
    c.window_right = 4;
    c.alibi = Alibi::per_batch_head;
    c.softcap = 10.0f;
    c.dropout_p = 0.25f;
    c.attn_probs = true;
    check_forward(c);
}

TEST(ReferenceVarlen, SequsedK) {
    ProblemConfig c = ragged();
    c.seqused_k = {10, 3, 64, 0, 1, 29};
    c.causal = true;
    c.attn_probs = true;
    check_forward(c);
    c.softmax_d = true;
    check_backward(c);
}

TEST(ReferenceVarlen, Backward) {
    for (bool causal : {false, true}) {
        ProblemConfig c = ragged();
        c.causal = causal;
        c.softmax_d = true;
        check_backward(c);
    }
    ProblemConfig c = ragged(DType::bf16);
    c.window_left = 9;
    c.alibi = Alibi::per_head;
    c.dropout_p = 0.2f;
    c.softmax_d = true;
    check_backward(c);
}

TEST(ReferenceVarlen, NonContiguous) {
    ProblemConfig c = ragged();
    c.nheads_k = c.nheads;
    c.seqlens_k = c.seqlens_q;  // packed qkv shares the rows
    c.layout = Layout::packed_qkv;
    c.causal = true;
    check_forward(c);
    check_backward(c);
    c.layout = Layout::row_padding;
    check_forward(c);
    check_backward(c);
}

}  // namespace
}  // namespace flashattn::testing
