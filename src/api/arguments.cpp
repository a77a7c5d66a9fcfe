// Argument validation and params building for every operation. Every check runs before anything is computed.
#include "api/arguments.h"

#include <cmath>
#include <limits>
#include <string>

#include "api/checks.h"
#include "common/philox.h"

namespace flashattn::api {

namespace {

constexpr int64_t kMaxGridDim = 65535;  // CUDA grid y/z limit: batch and heads on the GPU
constexpr int32_t kPageMultiple = 16;

// What every tensor of a call must agree with: q's dtype and device.
struct Where {
    DType dtype;
    DeviceType device;
    int32_t index;
    bool cpu() const { return device == DeviceType::cpu; }
};

Where where_of_q(const TensorView& q) {
    expect_present(q, "q");
    const bool cpu = q.device == DeviceType::cpu;
    const bool half = q.dtype == DType::f16 || q.dtype == DType::bf16;
    const bool wide = q.dtype == DType::f32 || q.dtype == DType::f64;
    if (!half && !(cpu && wide))
        fail(std::string("q: expected dtype float16 or bfloat16 (float32/float64 only for CPU tensors), got ") +
             dtype_name(q.dtype) + (wide ? " on the GPU" : ""));
    return Where{q.dtype, q.device, q.device_index};
}

// A data tensor (q, k, v, out, dout, dq, ...): q's dtype and device, the last dim contiguous.
void check_data(const TensorView& t, const char* name, const Where& w, std::initializer_list<Dim> dims) {
    expect_shape(t, name, dims);
    expect_dtype(t, name, w.dtype);
    expect_device(t, name, w.device, w.index);
    expect_layout(t, name);
}

// A float32 side tensor (LSE, softmax_d, attn_probs, ALiBi slopes): contiguous, q's device.
void check_f32(const TensorView& t, const char* name, const Where& w, std::initializer_list<Dim> dims) {
    expect_shape(t, name, dims);
    expect_dtype(t, name, DType::f32);
    expect_device(t, name, w.device, w.index);
    expect_contiguous(t, name);
}

// An int32 index tensor (cu_seqlens, seqused_k, cache_seqlens, block_table, ...).
void check_i32(const TensorView& t, const char* name, const Where& w, std::initializer_list<Dim> dims) {
    expect_shape(t, name, dims);
    expect_dtype(t, name, DType::i32);
    expect_device(t, name, w.device, w.index);
    expect_contiguous(t, name);
}

const int32_t* i32_data(const TensorView& t) { return t.present() ? static_cast<const int32_t*>(t.data) : nullptr; }

ElemType elem_type(DType d) {
    switch (d) {
        case DType::f16: return ElemType::f16;
        case DType::bf16: return ElemType::bf16;
        case DType::f32: return ElemType::f32;
        case DType::f64: return ElemType::f64;
        case DType::i32: break;
    }
    fail("internal: no element type for int32");
}

// (batch, row, head) strides of a padded (4D) or packed varlen (3D) tensor.
void strides_of(const TensorView& t, int64_t& batch, int64_t& row, int64_t& head) {
    if (t.ndim == 4) {
        batch = t.stride[0];
        row = t.stride[1];
        head = t.stride[2];
    } else {
        batch = 0;
        row = t.stride[0];
        head = t.stride[1];
    }
}

Call start_call(const Where& w, int64_t batch, int64_t nheads, int64_t nheads_k, int64_t head_dim,
                int64_t head_dim_v) {
    expect_head_dim(head_dim, "head_dim (last dimension of q and k)");
    expect_head_dim(head_dim_v, "head_dim_v (last dimension of v)");
    if (nheads_k <= 0 || nheads % nheads_k != 0)
        fail("k: nheads_k must divide nheads (MQA/GQA): nheads=" + std::to_string(nheads) +
             ", nheads_k=" + std::to_string(nheads_k));
    expect_int32(batch, "batch");
    expect_int32(nheads, "nheads");
    if (!w.cpu() && (batch > kMaxGridDim || nheads > kMaxGridDim))
        fail("batch and nheads: at most 65535 each on the GPU, got batch=" + std::to_string(batch) +
             ", nheads=" + std::to_string(nheads));
    Call c;
    c.on_cpu = w.cpu();
    c.device_index = w.index;
    AttnParams& p = c.params;
    p.dtype = elem_type(w.dtype);
    p.batch = static_cast<int32_t>(batch);
    p.nheads = static_cast<int32_t>(nheads);
    p.nheads_k = static_cast<int32_t>(nheads_k);
    p.head_dim = static_cast<int32_t>(head_dim);
    p.head_dim_v = static_cast<int32_t>(head_dim_v);
    return c;
}

// Options shared by every operation; seqlen_k is the (maximum) key length the window is normalised against.
void apply_options(AttnParams& p, const AttentionOptions& o, const Where& w, int64_t seqlen_k) {
    if (!std::isfinite(o.softmax_scale) || o.softmax_scale < 0.f)
        fail("options.softmax_scale: expected a finite value >= 0 (0 means 1/sqrt(head_dim)), got " +
             std::to_string(o.softmax_scale));
    if (o.window_left < -1 || o.window_right < -1)
        fail("options.window_left/window_right: expected >= 0, or -1 for unbounded, got (" +
             std::to_string(o.window_left) + ", " + std::to_string(o.window_right) + ")");
    if (!std::isfinite(o.softcap) || o.softcap < 0.f)
        fail("options.softcap: expected a finite value >= 0 (0 turns it off), got " + std::to_string(o.softcap));
    if (!(o.dropout_p >= 0.f && o.dropout_p < 1.f))
        fail("options.dropout_p: expected a probability in [0, 1), got " + std::to_string(o.dropout_p));
    p.scale = o.softmax_scale > 0.f ? o.softmax_scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
    p.scale_log2 = p.scale * static_cast<float>(M_LOG2E);
    p.softcap = o.softcap;
    // FlashAttention's normalisation: a side at least seqlen_k wide is unbounded; causal is window_right = 0.
    p.window_left = o.window_left >= seqlen_k ? -1 : o.window_left;
    p.window_right = o.window_right >= seqlen_k ? -1 : o.window_right;
    p.causal = o.causal;
    if (o.causal) p.window_right = 0;
    if (o.alibi_slopes.present()) {
        const TensorView& a = o.alibi_slopes;
        if (a.ndim == 1) check_f32(a, "options.alibi_slopes", w, {{"nheads", p.nheads}});
        else check_f32(a, "options.alibi_slopes", w, {{"batch", p.batch}, {"nheads", p.nheads}});
        p.alibi_slopes = static_cast<const float*>(a.data);
        p.alibi_batch_stride = a.ndim == 2 ? p.nheads : 0;
    }
    p.dropout_p = o.dropout_p;
    p.dropout_keep_threshold = dropout_keep_threshold(o.dropout_p);
    p.dropout_scale = 1.0f / (1.0f - o.dropout_p);
    p.seed = o.seed;
    p.offset = o.offset;
    p.deterministic = o.deterministic;
}

void apply_context(AttnParams& p, const ExecutionContext& ctx) {
    p.stream = ctx.stream;
    p.workspace = ctx.workspace;
    p.workspace_bytes = ctx.workspace_bytes;
}

// cu_seqlens of `batch` sequences over `total` rows; the values are checked where they live on the host.
void check_cu_seqlens(const TensorView& cu, const char* name, const Where& w, int64_t batch, int64_t total,
                      int64_t max_seqlen, const char* max_name) {
    check_i32(cu, name, w, {{"batch + 1", batch + 1}});
    if (!w.cpu()) return;  // device data is trusted (documented in flashattn.h)
    const int32_t* v = static_cast<const int32_t*>(cu.data);
    if (v[0] != 0) fail(std::string(name) + ": must start at 0, got " + std::to_string(v[0]));
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = int64_t(v[b + 1]) - v[b];
        if (len < 0)
            fail(std::string(name) + ": must be non-decreasing, got " + std::to_string(v[b]) + " then " +
                 std::to_string(v[b + 1]) + " at index " + std::to_string(b));
        if (len > max_seqlen)
            fail(std::string(name) + ": sequence " + std::to_string(b) + " has length " + std::to_string(len) +
                 ", more than " + max_name + "=" + std::to_string(max_seqlen));
    }
    if (v[batch] != total)
        fail(std::string(name) + ": the last value must equal the packed rows (" + std::to_string(total) + "), got " +
             std::to_string(v[batch]));
}

void check_seqused(const TensorView& s, const TensorView& cu_k, const Where& w, int64_t batch) {
    if (!s.present()) return;
    check_i32(s, "seqused_k", w, {{"batch", batch}});
    if (!w.cpu()) return;
    const int32_t* used = static_cast<const int32_t*>(s.data);
    const int32_t* cu = static_cast<const int32_t*>(cu_k.data);
    for (int64_t b = 0; b < batch; ++b)
        if (used[b] < 0 || used[b] > cu[b + 1] - cu[b])
            fail("seqused_k: entry " + std::to_string(b) + " must be in [0, " + std::to_string(cu[b + 1] - cu[b]) +
                 "] (its sequence length), got " + std::to_string(used[b]));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------------

Call build_call(const ForwardArgs& a) {
    const Where w = where_of_q(a.q);
    check_data(a.q, "q", w, {{"batch", kAnySize}, {"seqlen_q", kAnySize}, {"nheads", kAnySize}, {"head_dim", kAnySize}});
    const int64_t batch = a.q.shape[0], sq = a.q.shape[1], h = a.q.shape[2], d = a.q.shape[3];
    check_data(a.k, "k", w, {{"batch", batch}, {"seqlen_k", kAnySize}, {"nheads_k", kAnySize}, {"head_dim", d}});
    const int64_t sk = a.k.shape[1], hk = a.k.shape[2];
    check_data(a.v, "v", w, {{"batch", batch}, {"seqlen_k", sk}, {"nheads_k", hk}, {"head_dim_v", kAnySize}});
    const int64_t dv = a.v.shape[3];
    Call c = start_call(w, batch, h, hk, d, dv);
    expect_int32(sq, "seqlen_q");
    expect_int32(sk, "seqlen_k");
    check_data(a.out, "out", w, {{"batch", batch}, {"seqlen_q", sq}, {"nheads", h}, {"head_dim_v", dv}});
    if (a.softmax_lse.present())
        check_f32(a.softmax_lse, "softmax_lse", w, {{"batch", batch}, {"nheads", h}, {"seqlen_q", sq}});
    if (a.attn_probs.present())
        check_f32(a.attn_probs, "attn_probs", w, {{"batch", batch}, {"nheads", h}, {"seqlen_q", sq}, {"seqlen_k", sk}});
    for (const auto& [out, out_name] : {std::pair{&a.out, "out"}, {&a.softmax_lse, "softmax_lse"},
                                        {&a.attn_probs, "attn_probs"}})
        for (const auto& [in, in_name] : {std::pair{&a.q, "q"}, {&a.k, "k"}, {&a.v, "v"}})
            expect_no_alias(*out, out_name, *in, in_name);

    AttnParams& p = c.params;
    p.seqlen_q = static_cast<int32_t>(sq);
    p.seqlen_k = static_cast<int32_t>(sk);
    apply_options(p, a.options, w, sk);
    apply_context(p, a.ctx);
    p.q = a.q.data;
    p.k = a.k.data;
    p.v = a.v.data;
    p.out = a.out.data;
    p.softmax_lse = static_cast<float*>(a.softmax_lse.data);
    p.attn_probs = static_cast<float*>(a.attn_probs.data);
    strides_of(a.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    strides_of(a.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    strides_of(a.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    strides_of(a.out, p.out_batch_stride, p.out_row_stride, p.out_head_stride);
    p.lse_batch_stride = h * sq;
    p.lse_head_stride = sq;
    c.empty = batch == 0 || sq == 0;
    return c;
}

Call build_call(const VarlenForwardArgs& a) {
    const Where w = where_of_q(a.q);
    check_data(a.q, "q", w, {{"total_q", kAnySize}, {"nheads", kAnySize}, {"head_dim", kAnySize}});
    const int64_t total_q = a.q.shape[0], h = a.q.shape[1], d = a.q.shape[2];
    check_data(a.k, "k", w, {{"total_k", kAnySize}, {"nheads_k", kAnySize}, {"head_dim", d}});
    const int64_t total_k = a.k.shape[0], hk = a.k.shape[1];
    check_data(a.v, "v", w, {{"total_k", total_k}, {"nheads_k", hk}, {"head_dim_v", kAnySize}});
    const int64_t dv = a.v.shape[2];
    expect_present(a.cu_seqlens_q, "cu_seqlens_q");
    if (a.cu_seqlens_q.ndim != 1) check_i32(a.cu_seqlens_q, "cu_seqlens_q", w, {{"batch + 1", kAnySize}});
    const int64_t batch = a.cu_seqlens_q.shape[0] - 1;
    if (batch < 0) fail("cu_seqlens_q: expected shape (batch + 1), got (0)");
    Call c = start_call(w, batch, h, hk, d, dv);
    if (a.max_seqlen_q < 0 || a.max_seqlen_k < 0)
        fail("max_seqlen_q/max_seqlen_k: expected >= 0, got (" + std::to_string(a.max_seqlen_q) + ", " +
             std::to_string(a.max_seqlen_k) + ")");
    expect_int32(a.max_seqlen_q, "max_seqlen_q");
    expect_int32(a.max_seqlen_k, "max_seqlen_k");
    check_cu_seqlens(a.cu_seqlens_q, "cu_seqlens_q", w, batch, total_q, a.max_seqlen_q, "max_seqlen_q");
    check_cu_seqlens(a.cu_seqlens_k, "cu_seqlens_k", w, batch, total_k, a.max_seqlen_k, "max_seqlen_k");
    check_seqused(a.seqused_k, a.cu_seqlens_k, w, batch);
    check_data(a.out, "out", w, {{"total_q", total_q}, {"nheads", h}, {"head_dim_v", dv}});
    if (a.softmax_lse.present()) check_f32(a.softmax_lse, "softmax_lse", w, {{"nheads", h}, {"total_q", total_q}});
    if (a.attn_probs.present())
        check_f32(a.attn_probs, "attn_probs", w,
                  {{"batch", batch}, {"nheads", h}, {"max_seqlen_q", a.max_seqlen_q}, {"max_seqlen_k", a.max_seqlen_k}});
    for (const auto& [out, out_name] : {std::pair{&a.out, "out"}, {&a.softmax_lse, "softmax_lse"},
                                        {&a.attn_probs, "attn_probs"}})
        for (const auto& [in, in_name] : {std::pair{&a.q, "q"}, {&a.k, "k"}, {&a.v, "v"}})
            expect_no_alias(*out, out_name, *in, in_name);

    AttnParams& p = c.params;
    p.is_varlen = true;
    p.seqlen_q = static_cast<int32_t>(a.max_seqlen_q);
    p.seqlen_k = static_cast<int32_t>(a.max_seqlen_k);
    p.total_q = total_q;
    p.total_k = total_k;
    p.cu_seqlens_q = i32_data(a.cu_seqlens_q);
    p.cu_seqlens_k = i32_data(a.cu_seqlens_k);
    p.seqused_k = i32_data(a.seqused_k);
    apply_options(p, a.options, w, a.max_seqlen_k);
    apply_context(p, a.ctx);
    p.q = a.q.data;
    p.k = a.k.data;
    p.v = a.v.data;
    p.out = a.out.data;
    p.softmax_lse = static_cast<float*>(a.softmax_lse.data);
    p.attn_probs = static_cast<float*>(a.attn_probs.data);
    strides_of(a.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    strides_of(a.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    strides_of(a.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    strides_of(a.out, p.out_batch_stride, p.out_row_stride, p.out_head_stride);
    p.lse_batch_stride = 0;
    p.lse_head_stride = total_q;
    c.empty = batch == 0 || total_q == 0;
    return c;
}

namespace {

// The backward's own tensors, on top of a forward-shaped call built from (q, k, v, out).
void add_backward(Call& c, const TensorView& dout, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                  const TensorView& dv, const TensorView& softmax_d, const TensorView& q, const TensorView& k,
                  const TensorView& v, const TensorView& out, const Where& w, bool varlen) {
    AttnParams& p = c.params;
    const int64_t h = p.nheads, d = p.head_dim, dvd = p.head_dim_v;
    if (varlen) {
        check_data(dout, "dout", w, {{"total_q", p.total_q}, {"nheads", h}, {"head_dim_v", dvd}});
        check_f32(lse, "softmax_lse", w, {{"nheads", h}, {"total_q", p.total_q}});
        check_data(dq, "dq", w, {{"total_q", p.total_q}, {"nheads", h}, {"head_dim", d}});
        check_data(dk, "dk", w, {{"total_k", p.total_k}, {"nheads_k", p.nheads_k}, {"head_dim", d}});
        check_data(dv, "dv", w, {{"total_k", p.total_k}, {"nheads_k", p.nheads_k}, {"head_dim_v", dvd}});
        if (softmax_d.present()) check_f32(softmax_d, "softmax_d", w, {{"nheads", h}, {"total_q", p.total_q}});
    } else {
        const int64_t b = p.batch, sq = p.seqlen_q, sk = p.seqlen_k;
        check_data(dout, "dout", w, {{"batch", b}, {"seqlen_q", sq}, {"nheads", h}, {"head_dim_v", dvd}});
        check_f32(lse, "softmax_lse", w, {{"batch", b}, {"nheads", h}, {"seqlen_q", sq}});
        check_data(dq, "dq", w, {{"batch", b}, {"seqlen_q", sq}, {"nheads", h}, {"head_dim", d}});
        check_data(dk, "dk", w, {{"batch", b}, {"seqlen_k", sk}, {"nheads_k", p.nheads_k}, {"head_dim", d}});
        check_data(dv, "dv", w, {{"batch", b}, {"seqlen_k", sk}, {"nheads_k", p.nheads_k}, {"head_dim_v", dvd}});
        if (softmax_d.present()) check_f32(softmax_d, "softmax_d", w, {{"batch", b}, {"nheads", h}, {"seqlen_q", sq}});
    }
    for (const auto& [o, on] : {std::pair{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}, {&softmax_d, "softmax_d"}})
        for (const auto& [i, in] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&dout, "dout"},
                                    {&lse, "softmax_lse"}})
            expect_no_alias(*o, on, *i, in);
    p.op = OpKind::backward;
    p.dout = dout.data;
    p.softmax_lse = static_cast<float*>(lse.data);
    p.dq = dq.data;
    p.dk = dk.data;
    p.dv = dv.data;
    p.softmax_d = static_cast<float*>(softmax_d.data);
    strides_of(dout, p.dout_batch_stride, p.dout_row_stride, p.dout_head_stride);
    strides_of(dq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
    strides_of(dk, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
    strides_of(dv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
}

}  // namespace

Call build_call(const BackwardArgs& a) {
    ForwardArgs f;
    f.q = a.q;
    f.k = a.k;
    f.v = a.v;
    f.out = a.out;
    f.options = a.options;
    f.ctx = a.ctx;
    Call c = build_call(f);
    add_backward(c, a.dout, a.softmax_lse, a.dq, a.dk, a.dv, a.softmax_d, a.q, a.k, a.v, a.out, where_of_q(a.q), false);
    return c;
}

Call build_call(const VarlenBackwardArgs& a) {
    VarlenForwardArgs f;
    f.q = a.q;
    f.k = a.k;
    f.v = a.v;
    f.out = a.out;
    f.cu_seqlens_q = a.cu_seqlens_q;
    f.cu_seqlens_k = a.cu_seqlens_k;
    f.seqused_k = a.seqused_k;
    f.max_seqlen_q = a.max_seqlen_q;
    f.max_seqlen_k = a.max_seqlen_k;
    f.options = a.options;
    f.ctx = a.ctx;
    Call c = build_call(f);
    add_backward(c, a.dout, a.softmax_lse, a.dq, a.dk, a.dv, a.softmax_d, a.q, a.k, a.v, a.out, where_of_q(a.q), true);
    return c;
}

// ---------------------------------------------------------------------------------------------------------------------

Call build_call(const KvCacheArgs& a) {
    const Where w = where_of_q(a.q);
    check_data(a.q, "q", w, {{"batch", kAnySize}, {"seqlen_q", kAnySize}, {"nheads", kAnySize}, {"head_dim", kAnySize}});
    const int64_t batch = a.q.shape[0], sq = a.q.shape[1], h = a.q.shape[2], d = a.q.shape[3];
    const bool paged = a.block_table.present();
    const char* cache_dims = paged ? "num_blocks" : "batch_cache";
    const char* row_dims = paged ? "page_size" : "seqlen_cache";
    check_data(a.k_cache, "k_cache", w, {{cache_dims, kAnySize}, {row_dims, kAnySize}, {"nheads_k", kAnySize}, {"head_dim", d}});
    const int64_t n_entries = a.k_cache.shape[0], rows = a.k_cache.shape[1], hk = a.k_cache.shape[2];
    check_data(a.v_cache, "v_cache", w, {{cache_dims, n_entries}, {row_dims, rows}, {"nheads_k", hk}, {"head_dim_v", kAnySize}});
    const int64_t dv = a.v_cache.shape[3];
    Call c = start_call(w, batch, h, hk, d, dv);
    AttnParams& p = c.params;
    p.op = OpKind::kvcache;
    expect_int32(sq, "seqlen_q");
    if (a.options.dropout_p != 0.f)
        fail("options.dropout_p: must be 0 for kv-cache attention (inference), got " + std::to_string(a.options.dropout_p));

    int64_t capacity = rows;
    if (paged) {
        check_i32(a.block_table, "block_table", w, {{"batch", batch}, {"max_blocks_per_seq", kAnySize}});
        if (rows < kPageMultiple || rows % kPageMultiple != 0)
            fail("k_cache: the page size (dimension 1 of a paged cache) must be a multiple of 16, got " +
                 std::to_string(rows));
        if (a.cache_batch_idx.present())
            fail("cache_batch_idx: only for a dense cache; a paged cache maps sequences through block_table");
        capacity = a.block_table.shape[1] * rows;
        p.block_table = i32_data(a.block_table);
        p.block_table_batch_stride = a.block_table.shape[1];
        p.page_size = static_cast<int32_t>(rows);
        p.max_blocks_per_seq = static_cast<int32_t>(a.block_table.shape[1]);
    } else if (a.cache_batch_idx.present()) {
        check_i32(a.cache_batch_idx, "cache_batch_idx", w, {{"batch", batch}});
        if (w.cpu()) {
            const int32_t* idx = static_cast<const int32_t*>(a.cache_batch_idx.data);
            for (int64_t b = 0; b < batch; ++b)
                if (idx[b] < 0 || idx[b] >= n_entries)
                    fail("cache_batch_idx: entry " + std::to_string(b) + " must be in [0, " + std::to_string(n_entries) +
                         ") (batch_cache), got " + std::to_string(idx[b]));
        }
        p.cache_batch_idx = i32_data(a.cache_batch_idx);
    } else if (n_entries < batch) {
        fail("k_cache: a dense cache without cache_batch_idx needs batch_cache >= batch (" + std::to_string(batch) +
             "), got " + std::to_string(n_entries));
    }
    expect_int32(capacity, "cache capacity");

    int64_t seqlen_new = 0;
    if (a.k.present() != a.v.present()) fail("k, v: give both new keys and new values, or neither");
    if (a.k.present()) {
        check_data(a.k, "k", w, {{"batch", batch}, {"seqlen_new", kAnySize}, {"nheads_k", hk}, {"head_dim", d}});
        seqlen_new = a.k.shape[1];
        check_data(a.v, "v", w, {{"batch", batch}, {"seqlen_new", seqlen_new}, {"nheads_k", hk}, {"head_dim_v", dv}});
        if (!a.cache_seqlens.present() && a.cache_seqlen < 0)
            fail("cache_seqlens: appending k/v needs the cache lengths (cache_seqlens or cache_seqlen)");
        p.knew = a.k.data;
        p.vnew = a.v.data;
        p.seqlen_new = static_cast<int32_t>(seqlen_new);
        strides_of(a.k, p.knew_batch_stride, p.knew_row_stride, p.knew_head_stride);
        strides_of(a.v, p.vnew_batch_stride, p.vnew_row_stride, p.vnew_head_stride);
    }

    // Cache lengths: a tensor, a scalar, or the whole cache.
    if (a.cache_seqlens.present()) {
        check_i32(a.cache_seqlens, "cache_seqlens", w, {{"batch", batch}});
        p.cache_seqlens = i32_data(a.cache_seqlens);
    } else {
        if (a.cache_seqlen < -1) fail("cache_seqlen: expected >= 0, or -1 for the whole cache, got " + std::to_string(a.cache_seqlen));
        p.cache_seqlen = a.cache_seqlen < 0 ? capacity : a.cache_seqlen;
    }
    if (a.cache_leftpad.present()) {
        check_i32(a.cache_leftpad, "cache_leftpad", w, {{"batch", batch}});
        p.cache_leftpad = i32_data(a.cache_leftpad);
    }
    // Positions every sequence reaches, checked where the lengths are readable on the host.
    const bool lengths_on_host = w.cpu() || !a.cache_seqlens.present();
    int64_t max_end = -1;  // one past the last cache position any sequence uses
    if (lengths_on_host) {
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t len = p.cache_seqlens ? p.cache_seqlens[b] : p.cache_seqlen;
            const int64_t pad = p.cache_leftpad ? p.cache_leftpad[b] : 0;
            if (len < 0 || len + seqlen_new > capacity)
                fail("cache_seqlens: sequence " + std::to_string(b) + " has " + std::to_string(len) + " cached keys + " +
                     std::to_string(seqlen_new) + " new, more than the cache holds (" + std::to_string(capacity) + ")");
            if (pad < 0 || pad > len)
                fail("cache_leftpad: entry " + std::to_string(b) + " must be in [0, cache_seqlens[b]=" +
                     std::to_string(len) + "], got " + std::to_string(pad));
            if (paged && w.cpu()) {
                const int32_t* table = p.block_table + b * p.block_table_batch_stride;
                for (int64_t blk = 0; blk * rows < len + seqlen_new; ++blk)
                    if (table[blk] < 0 || table[blk] >= n_entries)
                        fail("block_table: entry (" + std::to_string(b) + ", " + std::to_string(blk) + ") must be in [0, " +
                             std::to_string(n_entries) + ") (num_blocks), got " + std::to_string(table[blk]));
            }
            max_end = std::max(max_end, len + seqlen_new);
        }
    }

    if (a.rotary_cos.present() != a.rotary_sin.present()) fail("rotary_cos, rotary_sin: give both or neither");
    if (a.rotary_cos.present()) {
        check_data(a.rotary_cos, "rotary_cos", w, {{"seqlen_ro", kAnySize}, {"rotary_dim / 2", kAnySize}});
        const int64_t s_ro = a.rotary_cos.shape[0], half = a.rotary_cos.shape[1];
        check_data(a.rotary_sin, "rotary_sin", w, {{"seqlen_ro", s_ro}, {"rotary_dim / 2", half}});
        expect_contiguous(a.rotary_cos, "rotary_cos");
        expect_contiguous(a.rotary_sin, "rotary_sin");
        if (half <= 0 || 2 * half > d)
            fail("rotary_cos: rotary_dim = 2 * shape[1] must be in [2, head_dim=" + std::to_string(d) + "], got " +
                 std::to_string(2 * half));
        const bool per_row = a.options.causal || a.options.window_left >= 0 || a.options.window_right >= 0;
        const int64_t q_end = max_end < 0 ? -1 : max_end - seqlen_new + (per_row ? sq : 1);
        const int64_t needed = std::max(max_end, q_end);
        if (needed > s_ro)
            fail("rotary_cos: needs a row for every position up to " + std::to_string(needed - 1) + ", got seqlen_ro=" +
                 std::to_string(s_ro));
        p.rotary_cos = a.rotary_cos.data;
        p.rotary_sin = a.rotary_sin.data;
        p.rotary_dim = static_cast<int32_t>(2 * half);
        p.seqlen_ro = static_cast<int32_t>(s_ro);
        p.rotary_interleaved = a.rotary_interleaved;
    }
    if (a.num_splits < 0) fail("num_splits: expected >= 0 (0 chooses), got " + std::to_string(a.num_splits));
    p.num_splits = a.num_splits;

    check_data(a.out, "out", w, {{"batch", batch}, {"seqlen_q", sq}, {"nheads", h}, {"head_dim_v", dv}});
    if (a.softmax_lse.present())
        check_f32(a.softmax_lse, "softmax_lse", w, {{"batch", batch}, {"nheads", h}, {"seqlen_q", sq}});
    for (const auto& [o, on] : {std::pair{&a.out, "out"}, {&a.softmax_lse, "softmax_lse"}})
        for (const auto& [i, in] : {std::pair{&a.q, "q"}, {&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"},
                                    {&a.k, "k"}, {&a.v, "v"}})
            expect_no_alias(*o, on, *i, in);

    p.seqlen_q = static_cast<int32_t>(sq);
    p.seqlen_k = static_cast<int32_t>(capacity);
    apply_options(p, a.options, w, capacity);
    apply_context(p, a.ctx);
    p.q = a.q.data;
    p.k = a.k_cache.data;
    p.v = a.v_cache.data;
    p.k_cache_mut = a.k_cache.data;
    p.v_cache_mut = a.v_cache.data;
    p.out = a.out.data;
    p.softmax_lse = static_cast<float*>(a.softmax_lse.data);
    strides_of(a.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    strides_of(a.k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    strides_of(a.v_cache, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    strides_of(a.out, p.out_batch_stride, p.out_row_stride, p.out_head_stride);
    p.lse_batch_stride = h * sq;
    p.lse_head_stride = sq;
    c.empty = batch == 0 || sq == 0;
    return c;
}

}  // namespace flashattn::api
