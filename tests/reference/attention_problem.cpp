#include "reference/attention_problem.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <stdexcept>

#include "common/philox.h"

namespace flashattn::testing {

namespace {

// Gaps that make the non-contiguous layouts non-contiguous (elements).
constexpr int64_t kHeadPad = 3;  // extra elements after each head of an output
constexpr int64_t kRowPad = 5;   // extra elements after each row (all heads of one position)
constexpr double kAlibiSlopeMin = 0.02, kAlibiSlopeMax = 0.3;

ElemType elem_type(DType d) {
    switch (d) {
        case DType::f16: return ElemType::f16;
        case DType::bf16: return ElemType::bf16;
        case DType::f32: return ElemType::f32;
        case DType::f64: return ElemType::f64;
        case DType::i32: break;
    }
    throw std::invalid_argument("not an attention dtype");
}

// A (lead..., heads, dim) view whose heads are `head_pad` apart beyond dim and whose rows have `row_pad` spare
// elements at their end.
StridedTensor make_padded(DType dtype, std::vector<int64_t> lead, int64_t heads, int64_t dim, int64_t head_pad,
                          int64_t row_pad) {
    const int64_t row_len = heads * (dim + head_pad) + row_pad;
    std::vector<int64_t> storage_shape = lead;
    storage_shape.push_back(row_len);
    StridedTensor t;
    t.storage = std::make_shared<HostTensor>(dtype, storage_shape);
    t.shape = lead;
    t.shape.push_back(heads);
    t.shape.push_back(dim);
    t.stride.assign(t.shape.size(), 0);
    t.stride[t.shape.size() - 1] = 1;
    t.stride[t.shape.size() - 2] = dim + head_pad;
    int64_t s = row_len;
    for (int64_t d = static_cast<int64_t>(lead.size()) - 1; d >= 0; --d) {
        t.stride[static_cast<size_t>(d)] = s;
        s *= lead[static_cast<size_t>(d)];
    }
    return t;
}

}  // namespace

int64_t StridedTensor::numel() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
}

void* StridedTensor::data() {
    return static_cast<unsigned char*>(storage->data()) + offset * static_cast<int64_t>(dtype_size(dtype()));
}
const void* StridedTensor::data() const {
    return static_cast<const unsigned char*>(storage->data()) + offset * static_cast<int64_t>(dtype_size(dtype()));
}

int64_t StridedTensor::storage_index(int64_t flat) const {
    int64_t idx = offset;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
        const int64_t extent = shape[static_cast<size_t>(d)];
        idx += (flat % extent) * stride[static_cast<size_t>(d)];
        flat /= extent;
    }
    return idx;
}

std::vector<double> StridedTensor::logical() const {
    std::vector<double> values(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) values[static_cast<size_t>(i)] = storage->get(storage_index(i));
    return values;
}

void StridedTensor::fill_normal(std::mt19937_64& rng, double stddev) {
    std::normal_distribution<double> dist(0.0, stddev);
    for (int64_t i = 0; i < numel(); ++i) storage->set(storage_index(i), dist(rng));
}

void StridedTensor::poison() { storage->poison(); }

StridedTensor make_contiguous(DType dtype, std::vector<int64_t> shape) {
    StridedTensor t;
    t.storage = std::make_shared<HostTensor>(dtype, shape);
    t.shape = shape;
    t.stride.assign(shape.size(), 1);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
        t.stride[static_cast<size_t>(d)] = t.stride[static_cast<size_t>(d + 1)] * shape[static_cast<size_t>(d + 1)];
    return t;
}

RowStrides row_strides(const StridedTensor& t, bool varlen) {
    if (varlen) return RowStrides{0, t.stride[0], t.stride[1]};
    return RowStrides{t.stride[0], t.stride[1], t.stride[2]};
}

Problem::Problem(ProblemConfig cfg) : cfg_(std::move(cfg)) {
    if (cfg_.varlen()) {
        if (cfg_.seqlens_k.size() != cfg_.seqlens_q.size()) throw std::invalid_argument("seqlens_q/k sizes");
        cfg_.batch = static_cast<int>(cfg_.seqlens_q.size());
        cfg_.seqlen_q = *std::max_element(cfg_.seqlens_q.begin(), cfg_.seqlens_q.end());
        cfg_.seqlen_k = *std::max_element(cfg_.seqlens_k.begin(), cfg_.seqlens_k.end());
        cu_seqlens_q = HostTensor(DType::i32, {cfg_.batch + 1});
        cu_seqlens_k = HostTensor(DType::i32, {cfg_.batch + 1});
        int64_t tq = 0, tk = 0;
        for (int b = 0; b <= cfg_.batch; ++b) {
            cu_seqlens_q.set(b, static_cast<double>(tq));
            cu_seqlens_k.set(b, static_cast<double>(tk));
            if (b < cfg_.batch) {
                tq += cfg_.seqlens_q[static_cast<size_t>(b)];
                tk += cfg_.seqlens_k[static_cast<size_t>(b)];
            }
        }
        rows_q_ = tq;
        rows_k_ = tk;
        if (!cfg_.seqused_k.empty()) {
            seqused_k = HostTensor(DType::i32, {cfg_.batch});
            for (int b = 0; b < cfg_.batch; ++b) seqused_k.set(b, cfg_.seqused_k[static_cast<size_t>(b)]);
        }
    } else {
        rows_q_ = int64_t(cfg_.batch) * cfg_.seqlen_q;
        rows_k_ = int64_t(cfg_.batch) * cfg_.seqlen_k;
    }
    const bool varlen = cfg_.varlen();
    const int64_t h = cfg_.nheads, hk = cfg_.nheads_k, d = cfg_.head_dim, d_v = cfg_.dv();
    const std::vector<int64_t> lead_q = varlen ? std::vector<int64_t>{rows_q_}
                                               : std::vector<int64_t>{cfg_.batch, cfg_.seqlen_q};
    const std::vector<int64_t> lead_k = varlen ? std::vector<int64_t>{rows_k_}
                                               : std::vector<int64_t>{cfg_.batch, cfg_.seqlen_k};

    switch (cfg_.layout) {
        case Layout::contiguous:
            q = make_padded(cfg_.dtype, lead_q, h, d, 0, 0);
            k = make_padded(cfg_.dtype, lead_k, hk, d, 0, 0);
            v = make_padded(cfg_.dtype, lead_k, hk, d_v, 0, 0);
            out = make_padded(cfg_.dtype, lead_q, h, d_v, 0, 0);
            dout = make_padded(cfg_.dtype, lead_q, h, d_v, 0, 0);
            dq = make_padded(cfg_.dtype, lead_q, h, d, 0, 0);
            dk = make_padded(cfg_.dtype, lead_k, hk, d, 0, 0);
            dv = make_padded(cfg_.dtype, lead_k, hk, d_v, 0, 0);
            break;
        case Layout::packed_qkv: {
            if (h != hk || d != d_v || lead_q != lead_k) throw std::invalid_argument("packed qkv needs equal shapes");
            // (lead..., 3 * heads, d): q, k and v interleaved per position, each a slice.
            StridedTensor qkv = make_padded(cfg_.dtype, lead_q, 3 * h, d, 0, 0);
            for (StridedTensor* t : {&q, &k, &v}) {
                *t = qkv;
                t->shape[t->shape.size() - 2] = h;
            }
            k.offset = h * d;
            v.offset = 2 * h * d;
            out = make_padded(cfg_.dtype, lead_q, h, d_v, kHeadPad, 0);
            dout = make_padded(cfg_.dtype, lead_q, h, d_v, kHeadPad, 0);
            dq = make_padded(cfg_.dtype, lead_q, h, d, kHeadPad, 0);
            dk = make_padded(cfg_.dtype, lead_k, hk, d, kHeadPad, 0);
            dv = make_padded(cfg_.dtype, lead_k, hk, d_v, kHeadPad, 0);
            break;
        }
        case Layout::row_padding:
            q = make_padded(cfg_.dtype, lead_q, h, d, 0, kRowPad);
            k = make_padded(cfg_.dtype, lead_k, hk, d, 0, kRowPad);
            v = make_padded(cfg_.dtype, lead_k, hk, d_v, 0, kRowPad);
            out = make_padded(cfg_.dtype, lead_q, h, d_v, 0, kRowPad);
            dout = make_padded(cfg_.dtype, lead_q, h, d_v, 0, kRowPad);
            dq = make_padded(cfg_.dtype, lead_q, h, d, 0, kRowPad);
            dk = make_padded(cfg_.dtype, lead_k, hk, d, 0, kRowPad);
            dv = make_padded(cfg_.dtype, lead_k, hk, d_v, 0, kRowPad);
            break;
    }

    std::mt19937_64 rng(cfg_.data_seed);
    q.fill_normal(rng, cfg_.input_stddev);
    k.fill_normal(rng, cfg_.input_stddev);
    v.fill_normal(rng, cfg_.input_stddev);
    dout.fill_normal(rng, 1.0);
    if (cfg_.alibi != Alibi::none) {
        alibi_slopes = cfg_.alibi == Alibi::per_head ? HostTensor(DType::f32, {h})
                                                     : HostTensor(DType::f32, {cfg_.batch, h});
        alibi_slopes.fill_uniform(rng, kAlibiSlopeMin, kAlibiSlopeMax);
    }
    lse = varlen ? HostTensor(DType::f32, {h, rows_q_}) : HostTensor(DType::f32, {cfg_.batch, h, cfg_.seqlen_q});
    softmax_d = varlen ? HostTensor(DType::f32, {h, rows_q_})
                       : HostTensor(DType::f32, {cfg_.batch, h, cfg_.seqlen_q});
    if (cfg_.attn_probs) probs = HostTensor(DType::f32, {cfg_.batch, h, cfg_.seqlen_q, cfg_.seqlen_k});
    poison_outputs();
    poison_gradients();
}

void Problem::poison_outputs() {
    out.poison();
    lse.poison();
    if (cfg_.attn_probs) probs.poison();
}

void Problem::poison_gradients() {
    dq.poison();
    dk.poison();
    dv.poison();
    softmax_d.poison();
}

AttnParams Problem::params(OpKind op) {
    const bool varlen = cfg_.varlen();
    AttnParams p;
    p.op = op;
    p.dtype = elem_type(cfg_.dtype);
    p.batch = cfg_.batch;
    p.seqlen_q = cfg_.seqlen_q;
    p.seqlen_k = cfg_.seqlen_k;
    p.nheads = cfg_.nheads;
    p.nheads_k = cfg_.nheads_k;
    p.head_dim = cfg_.head_dim;
    p.head_dim_v = cfg_.dv();

    auto set_rows = [&](const StridedTensor& t, int64_t& bs, int64_t& rs, int64_t& hs) {
        const RowStrides s = row_strides(t, varlen);
        bs = s.batch;
        rs = s.row;
        hs = s.head;
    };
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.out = out.data();
    set_rows(q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    set_rows(k, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    set_rows(v, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    set_rows(out, p.out_batch_stride, p.out_row_stride, p.out_head_stride);
    p.softmax_lse = static_cast<float*>(lse.data());
    p.lse_batch_stride = varlen ? 0 : int64_t(cfg_.nheads) * cfg_.seqlen_q;
    p.lse_head_stride = varlen ? rows_q_ : cfg_.seqlen_q;
    if (cfg_.attn_probs) p.attn_probs = static_cast<float*>(probs.data());

    if (varlen) {
        p.is_varlen = true;
        p.cu_seqlens_q = static_cast<const int32_t*>(cu_seqlens_q.data());
        p.cu_seqlens_k = static_cast<const int32_t*>(cu_seqlens_k.data());
        if (!cfg_.seqused_k.empty()) p.seqused_k = static_cast<const int32_t*>(seqused_k.data());
        p.total_q = rows_q_;
        p.total_k = rows_k_;
    }

    p.scale = cfg_.scale > 0.f ? cfg_.scale : 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
    p.scale_log2 = p.scale * std::numbers::log2e_v<float>;
    p.softcap = cfg_.softcap;
    p.causal = cfg_.causal;
    p.window_left = cfg_.window_left;
    p.window_right = cfg_.causal ? 0 : cfg_.window_right;
    if (cfg_.alibi != Alibi::none) {
        p.alibi_slopes = static_cast<const float*>(alibi_slopes.data());
        p.alibi_batch_stride = cfg_.alibi == Alibi::per_batch_head ? cfg_.nheads : 0;
    }
    p.dropout_p = cfg_.dropout_p;
    p.dropout_keep_threshold = dropout_keep_threshold(cfg_.dropout_p);
    p.dropout_scale = 1.0f / (1.0f - cfg_.dropout_p);
    p.seed = cfg_.seed;
    p.offset = cfg_.offset;

    if (op == OpKind::backward) {
        p.dout = dout.data();
        p.dq = dq.data();
        p.dk = dk.data();
        p.dv = dv.data();
        set_rows(dout, p.dout_batch_stride, p.dout_row_stride, p.dout_head_stride);
        set_rows(dq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
        set_rows(dk, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
        set_rows(dv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
        if (cfg_.softmax_d) p.softmax_d = static_cast<float*>(softmax_d.data());
        p.attn_probs = nullptr;
    }
    return p;
}

}  // namespace flashattn::testing
