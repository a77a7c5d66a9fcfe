// Building AttnParams from validated arguments.
#include "api/params_builder.h"

#include <cmath>
#include <limits>

#include "api/window.h"
#include "common/numeric.h"
#include "common/philox.h"

namespace flashattn::api {

namespace {

// The (batch, row, head) strides of a data tensor. Varlen tensors have no batch dimension (rows are absolute);
// a dimension of extent 1 is never stepped along, so its stride (which frameworks leave arbitrary) becomes 0.
struct RowStrides {
    int64_t batch = 0, row = 0, head = 0;
};

int64_t used_stride(const TensorView& t, int d) { return t.shape[d] > 1 ? t.stride[d] : 0; }

RowStrides row_strides(const TensorView& t, bool varlen) {
    if (!t.present()) return {};
    if (varlen) return {0, used_stride(t, 0), used_stride(t, 1)};
    return {used_stride(t, 0), used_stride(t, 1), used_stride(t, 2)};
}

ElemType elem_type(DType d) { return static_cast<ElemType>(static_cast<int32_t>(d)); }

float* f32_ptr(const TensorView& t) { return t.present() ? static_cast<float*>(t.data) : nullptr; }
const int32_t* i32_ptr(const TensorView& t) { return t.present() ? static_cast<const int32_t*>(t.data) : nullptr; }
void* data_ptr(const TensorView& t) { return t.present() ? t.data : nullptr; }

AttnParams base_params(OpKind op, const AttnDims& d, const AttentionOptions& o, const ExecutionContext& ctx) {
    AttnParams p;
    p.op = op;
    p.dtype = elem_type(d.dtype);
    p.batch = static_cast<int32_t>(d.batch);
    p.seqlen_q = static_cast<int32_t>(d.seqlen_q);
    p.seqlen_k = static_cast<int32_t>(d.seqlen_k);
    p.nheads = static_cast<int32_t>(d.nheads);
    p.nheads_k = static_cast<int32_t>(d.nheads_k);
    p.head_dim = static_cast<int32_t>(d.head_dim);
    p.head_dim_v = static_cast<int32_t>(d.head_dim_v);
    p.is_varlen = d.is_varlen;
    p.total_q = d.total_q;
    p.total_k = d.total_k;

    p.scale = std::isnan(o.softmax_scale) ? 1.0f / std::sqrt(static_cast<float>(d.head_dim)) : o.softmax_scale;
    // A zero scale (every visible key weighs the same) still takes a positive exp2 multiplier: the online softmax's
    // running maximum starts at -inf, and -inf x 0 would be NaN. The smallest normal float changes no probability
    // (a score times it rounds away against 1 in exp2) and leaves the LSE at log(visible keys).
    p.scale_log2 = p.scale > 0.0f ? p.scale * kLog2e : std::numeric_limits<float>::min();
    p.softcap = o.softcap;
    p.causal = o.causal;
    const Window w = normalized_window(o, d.seqlen_k);
    p.window_left = w.left;
    p.window_right = w.right;
    if (o.alibi_slopes.present()) {
        p.alibi_slopes = static_cast<const float*>(o.alibi_slopes.data);
        p.alibi_batch_stride = o.alibi_slopes.ndim == 2 ? used_stride(o.alibi_slopes, 0) : 0;
    }

    p.dropout_p = o.dropout_p;
    p.dropout_keep_threshold = dropout_keep_threshold(o.dropout_p);
    p.dropout_scale = 1.0f / (1.0f - o.dropout_p);
    p.seed = o.seed;
    p.offset = o.offset;
    p.deterministic = o.deterministic;

    p.workspace = ctx.workspace;
    p.workspace_bytes = ctx.workspace_bytes;
    p.stream = ctx.stream;
    return p;
}

// softmax_lse / softmax_d: padded (batch, nheads, seqlen_q), varlen (nheads, total_q); contiguous (validated).
void set_lse_strides(AttnParams& p, const AttnDims& d) {
    p.lse_batch_stride = d.is_varlen ? 0 : d.nheads * d.seqlen_q;
    p.lse_head_stride = d.is_varlen ? d.total_q : d.seqlen_q;
}

template <class Args>
void set_forward_tensors(AttnParams& p, const Args& a, const AttnDims& d) {
    p.q = a.q.data;
    p.k = a.k.data;
    p.v = a.v.data;
    p.out = a.out.data;
    p.softmax_lse = f32_ptr(a.softmax_lse);
    p.attn_probs = f32_ptr(a.attn_probs);
    const RowStrides q = row_strides(a.q, d.is_varlen), k = row_strides(a.k, d.is_varlen),
                     v = row_strides(a.v, d.is_varlen), out = row_strides(a.out, d.is_varlen);
    p.q_batch_stride = q.batch, p.q_row_stride = q.row, p.q_head_stride = q.head;
    p.k_batch_stride = k.batch, p.k_row_stride = k.row, p.k_head_stride = k.head;
    p.v_batch_stride = v.batch, p.v_row_stride = v.row, p.v_head_stride = v.head;
    p.out_batch_stride = out.batch, p.out_row_stride = out.row, p.out_head_stride = out.head;
    set_lse_strides(p, d);
}

template <class Args>
void set_backward_tensors(AttnParams& p, const Args& a, const AttnDims& d) {
    p.q = a.q.data;
    p.k = a.k.data;
    p.v = a.v.data;
    p.out = a.out.data;  // read by the backward
    p.softmax_lse = f32_ptr(a.softmax_lse);
    p.dout = a.dout.data;
    p.dq = a.dq.data;
    p.dk = a.dk.data;
    p.dv = a.dv.data;
    p.softmax_d = f32_ptr(a.softmax_d);
    const bool vl = d.is_varlen;
    const RowStrides q = row_strides(a.q, vl), k = row_strides(a.k, vl), v = row_strides(a.v, vl),
                     out = row_strides(a.out, vl), dout = row_strides(a.dout, vl), dq = row_strides(a.dq, vl),
                     dk = row_strides(a.dk, vl), dv = row_strides(a.dv, vl);
    p.q_batch_stride = q.batch, p.q_row_stride = q.row, p.q_head_stride = q.head;
    p.k_batch_stride = k.batch, p.k_row_stride = k.row, p.k_head_stride = k.head;
    p.v_batch_stride = v.batch, p.v_row_stride = v.row, p.v_head_stride = v.head;
    p.out_batch_stride = out.batch, p.out_row_stride = out.row, p.out_head_stride = out.head;
    p.dout_batch_stride = dout.batch, p.dout_row_stride = dout.row, p.dout_head_stride = dout.head;
    p.dq_batch_stride = dq.batch, p.dq_row_stride = dq.row, p.dq_head_stride = dq.head;
    p.dk_batch_stride = dk.batch, p.dk_row_stride = dk.row, p.dk_head_stride = dk.head;
    p.dv_batch_stride = dv.batch, p.dv_row_stride = dv.row, p.dv_head_stride = dv.head;
    set_lse_strides(p, d);
}

template <class Args>
void set_varlen_index(AttnParams& p, const Args& a) {
    p.cu_seqlens_q = i32_ptr(a.cu_seqlens_q);
    p.cu_seqlens_k = i32_ptr(a.cu_seqlens_k);
    p.seqused_k = i32_ptr(a.seqused_k);
}

}  // namespace

AttnParams build_params(const ForwardArgs& a, const AttnDims& d) {
    AttnParams p = base_params(OpKind::forward, d, a.options, a.ctx);
    set_forward_tensors(p, a, d);
    return p;
}

AttnParams build_params(const VarlenForwardArgs& a, const AttnDims& d) {
    AttnParams p = base_params(OpKind::forward, d, a.options, a.ctx);
    set_forward_tensors(p, a, d);
    set_varlen_index(p, a);
    return p;
}

AttnParams build_params(const BackwardArgs& a, const AttnDims& d) {
    AttnParams p = base_params(OpKind::backward, d, a.options, a.ctx);
    set_backward_tensors(p, a, d);
    return p;
}

AttnParams build_params(const VarlenBackwardArgs& a, const AttnDims& d) {
    AttnParams p = base_params(OpKind::backward, d, a.options, a.ctx);
    set_backward_tensors(p, a, d);
    set_varlen_index(p, a);
    return p;
}

AttnParams build_params(const KvCacheArgs& a, const AttnDims& d) {
    AttnParams p = base_params(OpKind::kvcache, d, a.options, a.ctx);
    p.q = a.q.data;
    p.k = a.k_cache.data;
    p.v = a.v_cache.data;
    p.k_cache_mut = a.k_cache.data;
    p.v_cache_mut = a.v_cache.data;
    p.out = a.out.data;
    p.softmax_lse = f32_ptr(a.softmax_lse);
    // Paged caches: the "batch" dimension is the physical block, the "row" the position within the page.
    const RowStrides q = row_strides(a.q, false), k = row_strides(a.k_cache, false), v = row_strides(a.v_cache, false),
                     out = row_strides(a.out, false), knew = row_strides(a.k, false), vnew = row_strides(a.v, false);
    p.q_batch_stride = q.batch, p.q_row_stride = q.row, p.q_head_stride = q.head;
    p.k_batch_stride = k.batch, p.k_row_stride = k.row, p.k_head_stride = k.head;
    p.v_batch_stride = v.batch, p.v_row_stride = v.row, p.v_head_stride = v.head;
    p.out_batch_stride = out.batch, p.out_row_stride = out.row, p.out_head_stride = out.head;
    set_lse_strides(p, d);

    p.cache_seqlens = i32_ptr(a.cache_seqlens);
    p.cache_seqlen = d.cache_seqlen;
    p.cache_batch_idx = i32_ptr(a.cache_batch_idx);
    p.cache_leftpad = i32_ptr(a.cache_leftpad);
    p.batch_cache = d.batch_cache;
    if (d.paged) {
        p.block_table = i32_ptr(a.block_table);
        p.block_table_batch_stride = used_stride(a.block_table, 0);
        p.page_size = static_cast<int32_t>(d.page_size);
        p.max_blocks_per_seq = static_cast<int32_t>(d.max_blocks_per_seq);
    }
    p.knew = data_ptr(a.k);
    p.vnew = data_ptr(a.v);
    p.seqlen_new = static_cast<int32_t>(d.seqlen_new);
    p.knew_batch_stride = knew.batch, p.knew_row_stride = knew.row, p.knew_head_stride = knew.head;
    p.vnew_batch_stride = vnew.batch, p.vnew_row_stride = vnew.row, p.vnew_head_stride = vnew.head;
    p.rotary_cos = data_ptr(a.rotary_cos);
    p.rotary_sin = data_ptr(a.rotary_sin);
    p.rotary_dim = static_cast<int32_t>(d.rotary_dim);
    p.seqlen_ro = static_cast<int32_t>(d.seqlen_ro);
    p.rotary_interleaved = a.rotary_interleaved;
    p.num_splits = a.num_splits;
    return p;
}

AttnParams build_params(const MergeArgs& a, const AttnDims& d) {
    AttnParams p = base_params(OpKind::merge, d, AttentionOptions{}, a.ctx);
    p.out = a.out.data;
    p.softmax_lse = f32_ptr(a.softmax_lse);
    const RowStrides out = row_strides(a.out, false);
    p.out_batch_stride = out.batch, p.out_row_stride = out.row, p.out_head_stride = out.head;
    set_lse_strides(p, d);
    const TensorView* parts[2] = {&a.out_a, &a.out_b};
    const TensorView* lses[2] = {&a.lse_a, &a.lse_b};
    for (int i = 0; i < 2; ++i) {
        const RowStrides s = row_strides(*parts[i], false);
        p.part_out[i] = parts[i]->data;
        p.part_lse[i] = static_cast<const float*>(lses[i]->data);
        p.part_out_batch_stride[i] = s.batch, p.part_out_row_stride[i] = s.row, p.part_out_head_stride[i] = s.head;
    }
    return p;
}

}  // namespace flashattn::api
