// Validation of merge_attention: two results of the same shape, merged into outputs that overlap neither.
#include "api/validate.h"

namespace flashattn::api {

AttnDims validate(const MergeArgs& a) {
    for (const NamedView& t : {NamedView{"out_a", &a.out_a}, NamedView{"lse_a", &a.lse_a},
                               NamedView{"out_b", &a.out_b}, NamedView{"lse_b", &a.lse_b}, NamedView{"out", &a.out}})
        expect_present(*t.view, t.name);
    AttnDims d;
    d.where = check_devices({{"out_a", &a.out_a}, {"lse_a", &a.lse_a}, {"out_b", &a.out_b}, {"lse_b", &a.lse_b},
                             {"out", &a.out}, {"softmax_lse", &a.softmax_lse}});
    d.dtype = check_data_dtype(a.out_a, "out_a", d.where);
    expect_shape(a.out_a, "out_a", {{"batch"}, {"seqlen_q"}, {"nheads"}, {"head_dim_v"}});
    d.batch = a.out_a.shape[0];
    d.seqlen_q = a.out_a.shape[1];
    d.nheads = d.nheads_k = a.out_a.shape[2];
    d.head_dim_v = a.out_a.shape[3];
    const std::initializer_list<Dim> out_dims = {
        {"batch", d.batch}, {"seqlen_q", d.seqlen_q}, {"nheads", d.nheads}, {"head_dim_v", d.head_dim_v}};
    const std::initializer_list<Dim> lse_dims = {{"batch", d.batch}, {"nheads", d.nheads}, {"seqlen_q", d.seqlen_q}};
    expect_shape(a.out_b, "out_b", out_dims);
    expect_shape(a.out, "out", out_dims);
    expect_shape(a.lse_a, "lse_a", lse_dims);
    expect_shape(a.lse_b, "lse_b", lse_dims);
    if (a.softmax_lse.present()) expect_shape(a.softmax_lse, "softmax_lse", lse_dims);
    check_data_tensor(a.out_a, "out_a", d.dtype, d.where);
    check_data_tensor(a.out_b, "out_b", d.dtype, d.where);
    check_data_tensor(a.out, "out", d.dtype, d.where);
    check_stat_tensor(a.lse_a, "lse_a");
    check_stat_tensor(a.lse_b, "lse_b");
    if (a.softmax_lse.present()) check_stat_tensor(a.softmax_lse, "softmax_lse");
    check_no_aliasing({{"out", &a.out}, {"softmax_lse", &a.softmax_lse}},
                      {{"out_a", &a.out_a}, {"lse_a", &a.lse_a}, {"out_b", &a.out_b}, {"lse_b", &a.lse_b}});
    return d;
}

}  // namespace flashattn::api
