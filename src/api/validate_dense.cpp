// Validation of the padded-batch forward and backward.
#include "api/validate.h"

namespace flashattn::api {

AttnDims validate(const ForwardArgs& a) {
    expect_present(a.q, "q");
    expect_present(a.k, "k");
    expect_present(a.v, "v");
    expect_present(a.out, "out");
    AttnDims d;
    d.where = check_devices({{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}, {"softmax_lse", &a.softmax_lse},
                             {"attn_probs", &a.attn_probs}, {"options.alibi_slopes", &a.options.alibi_slopes}});
    d.dtype = check_data_dtype(a.q, "q", d.where);

    read_padded_qkv(d, a.q, a.k, a.v);
    expect_shape(a.out, "out", {{"batch", d.batch}, {"seqlen_q", d.seqlen_q}, {"nheads", d.nheads}, {"head_dim_v", d.head_dim_v}});
    if (a.softmax_lse.present())
        expect_shape(a.softmax_lse, "softmax_lse", {{"batch", d.batch}, {"nheads", d.nheads}, {"seqlen_q", d.seqlen_q}});
    if (a.attn_probs.present())
        expect_shape(a.attn_probs, "attn_probs",
                     {{"batch", d.batch}, {"nheads", d.nheads}, {"seqlen_q", d.seqlen_q}, {"seqlen_k", d.seqlen_k}});

    check_data_tensor(a.q, "q", d.dtype, d.where);
    check_data_tensor(a.k, "k", d.dtype, d.where);
    check_data_tensor(a.v, "v", d.dtype, d.where);
    check_data_tensor(a.out, "out", d.dtype, d.where);
    if (a.softmax_lse.present()) check_stat_tensor(a.softmax_lse, "softmax_lse");
    if (a.attn_probs.present()) check_stat_tensor(a.attn_probs, "attn_probs");

    check_options(a.options, d, /*allow_dropout=*/true);
    check_no_aliasing({{"out", &a.out}, {"softmax_lse", &a.softmax_lse}, {"attn_probs", &a.attn_probs}},
                      {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"options.alibi_slopes", &a.options.alibi_slopes}});
    return d;
}

AttnDims validate(const BackwardArgs& a) {
    for (const NamedView& t : {NamedView{"dout", &a.dout}, NamedView{"q", &a.q}, NamedView{"k", &a.k},
                               NamedView{"v", &a.v}, NamedView{"out", &a.out}, NamedView{"softmax_lse", &a.softmax_lse},
                               NamedView{"dq", &a.dq}, NamedView{"dk", &a.dk}, NamedView{"dv", &a.dv}})
        expect_present(*t.view, t.name);
    AttnDims d;
    d.where = check_devices({{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}, {"dout", &a.dout},
                             {"softmax_lse", &a.softmax_lse}, {"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv},
                             {"softmax_d", &a.softmax_d}, {"options.alibi_slopes", &a.options.alibi_slopes}});
    d.dtype = check_data_dtype(a.q, "q", d.where);

    read_padded_qkv(d, a.q, a.k, a.v);
    const std::initializer_list<Dim> out_dims = {
        {"batch", d.batch}, {"seqlen_q", d.seqlen_q}, {"nheads", d.nheads}, {"head_dim_v", d.head_dim_v}};
    const std::initializer_list<Dim> lse_dims = {{"batch", d.batch}, {"nheads", d.nheads}, {"seqlen_q", d.seqlen_q}};
    expect_shape(a.out, "out", out_dims);
    expect_shape(a.dout, "dout", out_dims);
    expect_shape(a.softmax_lse, "softmax_lse", lse_dims);
    expect_shape(a.dq, "dq", {{"batch", d.batch}, {"seqlen_q", d.seqlen_q}, {"nheads", d.nheads}, {"head_dim", d.head_dim}});
    expect_shape(a.dk, "dk",
                 {{"batch", d.batch}, {"seqlen_k", d.seqlen_k}, {"nheads_k", d.nheads_k}, {"head_dim", d.head_dim}});
    expect_shape(a.dv, "dv",
                 {{"batch", d.batch}, {"seqlen_k", d.seqlen_k}, {"nheads_k", d.nheads_k}, {"head_dim_v", d.head_dim_v}});
    if (a.softmax_d.present()) expect_shape(a.softmax_d, "softmax_d", lse_dims);

    for (const NamedView& t : {NamedView{"q", &a.q}, NamedView{"k", &a.k}, NamedView{"v", &a.v},
                               NamedView{"out", &a.out}, NamedView{"dout", &a.dout}, NamedView{"dq", &a.dq},
                               NamedView{"dk", &a.dk}, NamedView{"dv", &a.dv}})
        check_data_tensor(*t.view, t.name, d.dtype, d.where);
    check_stat_tensor(a.softmax_lse, "softmax_lse");
    if (a.softmax_d.present()) check_stat_tensor(a.softmax_d, "softmax_d");

    check_options(a.options, d, /*allow_dropout=*/true);
    check_no_aliasing({{"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}, {"softmax_d", &a.softmax_d}},
                      {{"dout", &a.dout}, {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out},
                       {"softmax_lse", &a.softmax_lse}, {"options.alibi_slopes", &a.options.alibi_slopes}});
    return d;
}

}  // namespace flashattn::api
