// The shapes of q, k and v, which every other tensor of a call is checked against.
#include "api/validate.h"

namespace flashattn::api {

void read_padded_qkv(AttnDims& d, const TensorView& q, const TensorView& k, const TensorView& v) {
    expect_shape(q, "q", {{"batch"}, {"seqlen_q"}, {"nheads"}, {"head_dim"}});
    d.batch = q.shape[0];
    d.seqlen_q = q.shape[1];
    d.nheads = q.shape[2];
    d.head_dim = q.shape[3];
    check_head_dim(d.head_dim, "q", "head_dim");
    expect_shape(k, "k", {{"batch", d.batch}, {"seqlen_k"}, {"nheads_k"}, {"head_dim", d.head_dim}});
    d.seqlen_k = k.shape[1];
    d.nheads_k = k.shape[2];
    check_head_groups(d.nheads, d.nheads_k, "k");
    expect_shape(v, "v", {{"batch", d.batch}, {"seqlen_k", d.seqlen_k}, {"nheads_k", d.nheads_k}, {"head_dim_v"}});
    d.head_dim_v = v.shape[3];
    check_head_dim(d.head_dim_v, "v", "head_dim_v");
}

void read_varlen_qkv(AttnDims& d, const TensorView& q, const TensorView& k, const TensorView& v) {
    d.is_varlen = true;
    expect_shape(q, "q", {{"total_q"}, {"nheads"}, {"head_dim"}});
    d.total_q = q.shape[0];
    d.nheads = q.shape[1];
    d.head_dim = q.shape[2];
    check_head_dim(d.head_dim, "q", "head_dim");
    expect_shape(k, "k", {{"total_k"}, {"nheads_k"}, {"head_dim", d.head_dim}});
    d.total_k = k.shape[0];
    d.nheads_k = k.shape[1];
    check_head_groups(d.nheads, d.nheads_k, "k");
    expect_shape(v, "v", {{"total_k", d.total_k}, {"nheads_k", d.nheads_k}, {"head_dim_v"}});
    d.head_dim_v = v.shape[2];
    check_head_dim(d.head_dim_v, "v", "head_dim_v");
}

}  // namespace flashattn::api
