// Validation of the variable-length forward and backward. cu_seqlens and seqused_k are read when they live on the
// CPU; on a GPU they are trusted (reading them would need a device-to-host copy and a synchronisation per call).
#include <string>

#include "api/validate.h"

namespace flashattn::api {

namespace {

struct VarlenIndex {
    const TensorView& cu_seqlens_q;
    const TensorView& cu_seqlens_k;
    const TensorView& seqused_k;
    int64_t max_seqlen_q, max_seqlen_k;
};

// cu_seqlens, seqused_k and the max lengths: shapes, dtypes and (on the host) values. Sets batch and the seqlens.
void check_varlen_index(AttnDims& d, const VarlenIndex& ix) {
    expect_shape(ix.cu_seqlens_q, "cu_seqlens_q", {{"batch + 1"}});
    if (ix.cu_seqlens_q.shape[0] < 1)
        fail("cu_seqlens_q: expected shape (batch + 1) with at least one entry, got " + shape_str(ix.cu_seqlens_q));
    d.batch = ix.cu_seqlens_q.shape[0] - 1;
    expect_shape(ix.cu_seqlens_k, "cu_seqlens_k", {{"batch + 1", d.batch + 1}});
    if (ix.seqused_k.present()) expect_shape(ix.seqused_k, "seqused_k", {{"batch", d.batch}});
    check_index_tensor(ix.cu_seqlens_q, "cu_seqlens_q");
    check_index_tensor(ix.cu_seqlens_k, "cu_seqlens_k");
    if (ix.seqused_k.present()) check_index_tensor(ix.seqused_k, "seqused_k");

    for (const auto& [value, name] : {std::pair{ix.max_seqlen_q, "max_seqlen_q"}, std::pair{ix.max_seqlen_k, "max_seqlen_k"}})
        if (value < 0 || value > kMaxSize)
            fail(std::string(name) + ": expected a length in [0, " + std::to_string(kMaxSize) + "], got " +
                 std::to_string(value));
    d.seqlen_q = ix.max_seqlen_q;
    d.seqlen_k = ix.max_seqlen_k;

    if (!d.where.on_cpu()) return;  // device-side index tensors are trusted
    check_host_cu_seqlens(ix.cu_seqlens_q, "cu_seqlens_q", d.total_q, "total_q (q.shape[0])", d.seqlen_q, "max_seqlen_q");
    check_host_cu_seqlens(ix.cu_seqlens_k, "cu_seqlens_k", d.total_k, "total_k (k.shape[0])", d.seqlen_k, "max_seqlen_k");
    if (ix.seqused_k.present()) {
        const std::vector<int32_t> used = host_values(ix.seqused_k), cu = host_values(ix.cu_seqlens_k);
        for (int64_t b = 0; b < d.batch; ++b) {
            const int64_t len = int64_t(cu[b + 1]) - cu[b];
            if (used[b] < 0 || used[b] > len)
                fail("seqused_k: expected seqused_k[b] in [0, seqlen_k of sequence b], got seqused_k[" +
                     std::to_string(b) + "] = " + std::to_string(used[b]) + " with seqlen_k " + std::to_string(len));
        }
    }
}

}  // namespace

AttnDims validate(const VarlenForwardArgs& a) {
    for (const NamedView& t : {NamedView{"q", &a.q}, NamedView{"k", &a.k}, NamedView{"v", &a.v},
                               NamedView{"out", &a.out}, NamedView{"cu_seqlens_q", &a.cu_seqlens_q},
                               NamedView{"cu_seqlens_k", &a.cu_seqlens_k}})
        expect_present(*t.view, t.name);
    AttnDims d;
    d.where = check_devices({{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out},
                             {"cu_seqlens_q", &a.cu_seqlens_q}, {"cu_seqlens_k", &a.cu_seqlens_k},
                             {"seqused_k", &a.seqused_k}, {"softmax_lse", &a.softmax_lse},
                             {"attn_probs", &a.attn_probs}, {"options.alibi_slopes", &a.options.alibi_slopes}});
    d.dtype = check_data_dtype(a.q, "q", d.where);

    read_varlen_qkv(d, a.q, a.k, a.v);
    expect_shape(a.out, "out", {{"total_q", d.total_q}, {"nheads", d.nheads}, {"head_dim_v", d.head_dim_v}});
    check_data_tensor(a.q, "q", d.dtype, d.where);
    check_data_tensor(a.k, "k", d.dtype, d.where);
    check_data_tensor(a.v, "v", d.dtype, d.where);
    check_data_tensor(a.out, "out", d.dtype, d.where);
    check_varlen_index(d, {a.cu_seqlens_q, a.cu_seqlens_k, a.seqused_k, a.max_seqlen_q, a.max_seqlen_k});
    if (a.softmax_lse.present()) {
        expect_shape(a.softmax_lse, "softmax_lse", {{"nheads", d.nheads}, {"total_q", d.total_q}});
        check_stat_tensor(a.softmax_lse, "softmax_lse");
    }
    if (a.attn_probs.present()) {
        expect_shape(a.attn_probs, "attn_probs",
                     {{"batch", d.batch}, {"nheads", d.nheads}, {"max_seqlen_q", d.seqlen_q}, {"max_seqlen_k", d.seqlen_k}});
        check_stat_tensor(a.attn_probs, "attn_probs");
    }

    check_options(a.options, d, /*allow_dropout=*/true);
    check_no_aliasing({{"out", &a.out}, {"softmax_lse", &a.softmax_lse}, {"attn_probs", &a.attn_probs}},
                      {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"cu_seqlens_q", &a.cu_seqlens_q},
                       {"cu_seqlens_k", &a.cu_seqlens_k}, {"seqused_k", &a.seqused_k},
                       {"options.alibi_slopes", &a.options.alibi_slopes}});
    return d;
}

AttnDims validate(const VarlenBackwardArgs& a) {
    for (const NamedView& t : {NamedView{"dout", &a.dout}, NamedView{"q", &a.q}, NamedView{"k", &a.k},
                               NamedView{"v", &a.v}, NamedView{"out", &a.out}, NamedView{"softmax_lse", &a.softmax_lse},
                               NamedView{"cu_seqlens_q", &a.cu_seqlens_q}, NamedView{"cu_seqlens_k", &a.cu_seqlens_k},
                               NamedView{"dq", &a.dq}, NamedView{"dk", &a.dk}, NamedView{"dv", &a.dv}})
        expect_present(*t.view, t.name);
    AttnDims d;
    d.where = check_devices({{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}, {"dout", &a.dout},
                             {"softmax_lse", &a.softmax_lse}, {"cu_seqlens_q", &a.cu_seqlens_q},
                             {"cu_seqlens_k", &a.cu_seqlens_k}, {"seqused_k", &a.seqused_k}, {"dq", &a.dq},
                             {"dk", &a.dk}, {"dv", &a.dv}, {"softmax_d", &a.softmax_d},
                             {"options.alibi_slopes", &a.options.alibi_slopes}});
    d.dtype = check_data_dtype(a.q, "q", d.where);

    read_varlen_qkv(d, a.q, a.k, a.v);
    const std::initializer_list<Dim> out_dims = {{"total_q", d.total_q}, {"nheads", d.nheads}, {"head_dim_v", d.head_dim_v}};
    const std::initializer_list<Dim> lse_dims = {{"nheads", d.nheads}, {"total_q", d.total_q}};
    expect_shape(a.out, "out", out_dims);
    expect_shape(a.dout, "dout", out_dims);
    expect_shape(a.softmax_lse, "softmax_lse", lse_dims);
    expect_shape(a.dq, "dq", {{"total_q", d.total_q}, {"nheads", d.nheads}, {"head_dim", d.head_dim}});
    expect_shape(a.dk, "dk", {{"total_k", d.total_k}, {"nheads_k", d.nheads_k}, {"head_dim", d.head_dim}});
    expect_shape(a.dv, "dv", {{"total_k", d.total_k}, {"nheads_k", d.nheads_k}, {"head_dim_v", d.head_dim_v}});
    if (a.softmax_d.present()) expect_shape(a.softmax_d, "softmax_d", lse_dims);
    for (const NamedView& t : {NamedView{"q", &a.q}, NamedView{"k", &a.k}, NamedView{"v", &a.v},
                               NamedView{"out", &a.out}, NamedView{"dout", &a.dout}, NamedView{"dq", &a.dq},
                               NamedView{"dk", &a.dk}, NamedView{"dv", &a.dv}})
        check_data_tensor(*t.view, t.name, d.dtype, d.where);
    check_stat_tensor(a.softmax_lse, "softmax_lse");
    if (a.softmax_d.present()) check_stat_tensor(a.softmax_d, "softmax_d");
    check_varlen_index(d, {a.cu_seqlens_q, a.cu_seqlens_k, a.seqused_k, a.max_seqlen_q, a.max_seqlen_k});

    check_options(a.options, d, /*allow_dropout=*/true);
    check_no_aliasing({{"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}, {"softmax_d", &a.softmax_d}},
                      {{"dout", &a.dout}, {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out},
                       {"softmax_lse", &a.softmax_lse}, {"cu_seqlens_q", &a.cu_seqlens_q},
                       {"cu_seqlens_k", &a.cu_seqlens_k}, {"seqused_k", &a.seqused_k},
                       {"options.alibi_slopes", &a.options.alibi_slopes}});
    return d;
}

}  // namespace flashattn::api
