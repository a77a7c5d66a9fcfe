#include "reference/naive_attention.h"

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/numeric.h"
#include "common/philox.h"

namespace flashattn::testing::naive {

namespace {

using Matrix = std::vector<std::vector<double>>;
constexpr double kInf = std::numeric_limits<double>::infinity();

double load(ElemType t, const void* base, int64_t off) {
    const auto* bytes = static_cast<const unsigned char*>(base);
    if (t == ElemType::f16 || t == ElemType::bf16) {
        uint16_t bits;
        std::memcpy(&bits, bytes + off * 2, 2);
        return t == ElemType::f16 ? half_to_float(bits) : bf16_to_float(bits);
    }
    if (t == ElemType::f32) {
        float f;
        std::memcpy(&f, bytes + off * 4, 4);
        return f;
    }
    double d;
    std::memcpy(&d, bytes + off * 8, 8);
    return d;
}

void store(ElemType t, void* base, int64_t off, double value) {
    auto* bytes = static_cast<unsigned char*>(base);
    if (t == ElemType::f16 || t == ElemType::bf16) {
        const uint16_t bits = t == ElemType::f16 ? float_to_half(static_cast<float>(value))
                                                 : float_to_bf16(static_cast<float>(value));
        std::memcpy(bytes + off * 2, &bits, 2);
    } else if (t == ElemType::f32) {
        const float f = static_cast<float>(value);
        std::memcpy(bytes + off * 4, &f, 4);
    } else {
        std::memcpy(bytes + off * 8, &value, 8);
    }
}

double stored(ElemType t, double value) {
    double out;
    store(t, &out, 0, value);
    return load(t, &out, 0);
}

// Where sequence b's rows are, and how long it is.
struct Seq {
    int64_t q_read0 = 0, k_read0 = 0;  // first row to read (absolute row in varlen, 0 in padded)
    int64_t q_out0 = 0, k_out0 = 0;    // first row in the logical (rows, heads, dim) results
    int64_t sq = 0, sk = 0, k_rows = 0;
};

Seq seq_of(const AttnParams& p, int64_t b) {
    Seq s;
    if (p.is_varlen) {
        s.q_read0 = s.q_out0 = p.cu_seqlens_q[b];
        s.k_read0 = s.k_out0 = p.cu_seqlens_k[b];
        s.sq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
        s.k_rows = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
        s.sk = p.seqused_k ? p.seqused_k[b] : s.k_rows;
    } else {
        s.q_out0 = b * p.seqlen_q;
        s.k_out0 = b * p.seqlen_k;
        s.sq = p.seqlen_q;
        s.sk = s.k_rows = p.seqlen_k;
    }
    return s;
}

Matrix read_rows(ElemType t, const void* base, int64_t bs, int64_t rs, int64_t hs, int64_t b, int64_t row0,
                 int64_t n, int64_t h, int64_t dim) {
    Matrix m(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(dim)));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t d = 0; d < dim; ++d)
            m[i][d] = load(t, base, b * bs + (row0 + i) * rs + h * hs + d);
    return m;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// Everything about the scores of one (sequence, head).
struct Attention {
    Matrix logits, cap_slope, probs;  // probs: softmax over visible keys, 0 elsewhere
    std::vector<std::vector<bool>> visible;
    std::vector<double> lse;
};

Attention attention(const AttnParams& p, const Matrix& q, const Matrix& k, int64_t b, int64_t h) {
    const int64_t sq = static_cast<int64_t>(q.size()), sk = static_cast<int64_t>(k.size());
    const float slope = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.0f;
    Attention a;
    a.logits.assign(sq, std::vector<double>(sk, 0.0));
    a.cap_slope.assign(sq, std::vector<double>(sk, 1.0));
    a.probs.assign(sq, std::vector<double>(sk, 0.0));
    a.visible.assign(sq, std::vector<bool>(sk, false));
    a.lse.assign(sq, kInf);
    for (int64_t i = 0; i < sq; ++i) {
        const int64_t diagonal = i + sk - sq;  // the key column row i is aligned with (bottom-right)
        double max_logit = -kInf;
        for (int64_t j = 0; j < sk; ++j) {
            double s = static_cast<double>(p.scale) * dot(q[i], k[j]);
            if (p.softcap > 0) {
                const double t = std::tanh(s / p.softcap);
                s = p.softcap * t;
                a.cap_slope[i][j] = 1 - t * t;
            }
            // The ALiBi bias is defined in fp32 (FlashAttention and the kernels compute it so); in fp64 it would
            // differ by up to 6e-8 of its size, which dwarfs everything else when a soft-cap bounds the scores.
            s -= static_cast<double>(slope * static_cast<float>(std::llabs(diagonal - j)));
            a.logits[i][j] = s;
            const bool left_ok = p.window_left < 0 || j >= diagonal - p.window_left;
            const bool right_ok = p.window_right < 0 || j <= diagonal + p.window_right;
            a.visible[i][j] = left_ok && right_ok;
            if (a.visible[i][j]) max_logit = std::max(max_logit, s);
        }
        if (max_logit == -kInf) continue;  // sees nothing
        double sum = 0;
        for (int64_t j = 0; j < sk; ++j)
            if (a.visible[i][j]) sum += std::exp(a.logits[i][j] - max_logit);
        for (int64_t j = 0; j < sk; ++j)
            if (a.visible[i][j]) a.probs[i][j] = std::exp(a.logits[i][j] - max_logit) / sum;
        a.lse[i] = max_logit + std::log(sum);
    }
    return a;
}

// The dropout factor of entry (i, j): 1 / (1 - p) if kept, 0 if dropped.
double dropout_factor(const AttnParams& p, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (p.dropout_p <= 0) return 1.0;
    const uint32_t bh = static_cast<uint32_t>(b * p.nheads + h);
    return dropout_keep(p.seed, p.offset, bh, static_cast<uint32_t>(i), static_cast<uint32_t>(j),
                        p.dropout_keep_threshold)
               ? static_cast<double>(p.dropout_scale)
               : 0.0;
}

int64_t rows_q(const AttnParams& p) { return p.is_varlen ? p.total_q : int64_t(p.batch) * p.seqlen_q; }
int64_t rows_k(const AttnParams& p) { return p.is_varlen ? p.total_k : int64_t(p.batch) * p.seqlen_k; }

int64_t lse_index(const AttnParams& p, const Seq& s, int64_t b, int64_t h, int64_t i) {
    return p.is_varlen ? h * p.total_q + s.q_out0 + i : (b * p.nheads + h) * p.seqlen_q + i;
}

// out = (P o dropout) V for one head, into the logical out; lse too.
void write_forward(const AttnParams& p, const Attention& a, const Matrix& v, const Seq& s, int64_t b, int64_t h,
                   Result& r) {
    const int64_t dv = p.head_dim_v;
    for (int64_t i = 0; i < s.sq; ++i) {
        std::vector<double> o(static_cast<size_t>(dv), 0.0);
        for (int64_t j = 0; j < static_cast<int64_t>(v.size()); ++j) {
            const double w = a.probs[i][j] * dropout_factor(p, b, h, i, j);
            for (int64_t d = 0; d < dv; ++d) o[d] += w * v[j][d];
        }
        for (int64_t d = 0; d < dv; ++d) r.out[((s.q_out0 + i) * p.nheads + h) * dv + d] = o[d];
        r.lse[lse_index(p, s, b, h, i)] = a.lse[i];
    }
}

// Rotary embedding of the first rotary_dim values of x at position pos, each result rounded to the dtype.
void rotate(const AttnParams& p, std::vector<double>& x, int64_t pos) {
    if (p.rotary_dim <= 0) return;
    const int64_t half = p.rotary_dim / 2;
    for (int64_t c = 0; c < half; ++c) {
        const double cs = load(p.dtype, p.rotary_cos, pos * half + c);
        const double sn = load(p.dtype, p.rotary_sin, pos * half + c);
        const int64_t a = p.rotary_interleaved ? 2 * c : c;
        const int64_t b = p.rotary_interleaved ? 2 * c + 1 : c + half;
        const double x0 = x[a], x1 = x[b];
        x[a] = stored(p.dtype, x0 * cs - x1 * sn);
        x[b] = stored(p.dtype, x0 * sn + x1 * cs);
    }
}

// Element offset of (sequence b, cache position pos, kv head hk) in the k (or v) cache.
int64_t cache_offset(const AttnParams& p, int64_t b, int64_t pos, int64_t hk, int64_t batch_stride,
                     int64_t row_stride, int64_t head_stride) {
    if (p.block_table) {
        const int64_t block = p.block_table[b * p.block_table_batch_stride + pos / p.page_size];
        return block * batch_stride + (pos % p.page_size) * row_stride + hk * head_stride;
    }
    const int64_t entry = p.cache_batch_idx ? p.cache_batch_idx[b] : b;
    return entry * batch_stride + pos * row_stride + hk * head_stride;
}

}  // namespace

Result forward(const AttnParams& p) {
    Result r;
    r.out.assign(static_cast<size_t>(rows_q(p) * p.nheads * p.head_dim_v), 0.0);
    r.lse.assign(static_cast<size_t>(p.is_varlen ? p.nheads * p.total_q : int64_t(p.batch) * p.nheads * p.seqlen_q),
                 kInf);
    if (p.attn_probs) r.probs.assign(static_cast<size_t>(int64_t(p.batch) * p.nheads * p.seqlen_q * p.seqlen_k), 0.0);
    const int64_t group = p.nheads / p.nheads_k;
    for (int64_t b = 0; b < p.batch; ++b) {
        const Seq s = seq_of(p, b);
        for (int64_t h = 0; h < p.nheads; ++h) {
            const Matrix q = read_rows(p.dtype, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, s.q_read0,
                                       s.sq, h, p.head_dim);
            const Matrix k = read_rows(p.dtype, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, s.k_read0,
                                       s.sk, h / group, p.head_dim);
            const Matrix v = read_rows(p.dtype, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, s.k_read0,
                                       s.sk, h / group, p.head_dim_v);
            const Attention a = attention(p, q, k, b, h);
            write_forward(p, a, v, s, b, h, r);
            if (p.attn_probs)
                for (int64_t i = 0; i < s.sq; ++i)
                    for (int64_t j = 0; j < s.sk; ++j) {
                        const double pr = a.probs[i][j];
                        r.probs[((b * p.nheads + h) * p.seqlen_q + i) * p.seqlen_k + j] =
                            dropout_factor(p, b, h, i, j) > 0 ? pr : -pr;
                    }
        }
    }
    return r;
}

Result backward(const AttnParams& p) {
    Result r;
    const int64_t d = p.head_dim, dv = p.head_dim_v, group = p.nheads / p.nheads_k;
    r.dq.assign(static_cast<size_t>(rows_q(p) * p.nheads * d), 0.0);
    r.dk.assign(static_cast<size_t>(rows_k(p) * p.nheads_k * d), 0.0);
    r.dv.assign(static_cast<size_t>(rows_k(p) * p.nheads_k * dv), 0.0);
    r.delta.assign(static_cast<size_t>(p.is_varlen ? p.nheads * p.total_q : int64_t(p.batch) * p.nheads * p.seqlen_q),
                   0.0);
    for (int64_t b = 0; b < p.batch; ++b) {
        const Seq s = seq_of(p, b);
        for (int64_t h = 0; h < p.nheads; ++h) {
            const int64_t hk = h / group;
            const Matrix q = read_rows(p.dtype, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, s.q_read0,
                                       s.sq, h, d);
            const Matrix k = read_rows(p.dtype, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, s.k_read0,
                                       s.sk, hk, d);
            const Matrix v = read_rows(p.dtype, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, s.k_read0,
                                       s.sk, hk, dv);
            const Matrix o = read_rows(p.dtype, p.out, p.out_batch_stride, p.out_row_stride, p.out_head_stride, b,
                                       s.q_read0, s.sq, h, dv);
            const Matrix dout = read_rows(p.dtype, p.dout, p.dout_batch_stride, p.dout_row_stride,
                                          p.dout_head_stride, b, s.q_read0, s.sq, h, dv);
            const Attention a = attention(p, q, k, b, h);
            for (int64_t i = 0; i < s.sq; ++i) {
                const double delta = dot(dout[i], o[i]);
                r.delta[lse_index(p, s, b, h, i)] = delta;
                for (int64_t j = 0; j < s.sk; ++j) {
                    if (!a.visible[i][j] || a.probs[i][j] == 0.0) continue;
                    const double z = dropout_factor(p, b, h, i, j);
                    const double pr = a.probs[i][j];
                    const double dp = dot(dout[i], v[j]) * z;
                    const double ds = pr * (dp - delta) * a.cap_slope[i][j] * p.scale;
                    for (int64_t c = 0; c < dv; ++c) r.dv[((s.k_out0 + j) * p.nheads_k + hk) * dv + c] += pr * z * dout[i][c];
                    for (int64_t c = 0; c < d; ++c) {
                        r.dq[((s.q_out0 + i) * p.nheads + h) * d + c] += ds * k[j][c];
                        r.dk[((s.k_out0 + j) * p.nheads_k + hk) * d + c] += ds * q[i][c];
                    }
                }
            }
        }
    }
    return r;
}

Result kvcache_forward(const AttnParams& p) {
    Result r;
    const int64_t d = p.head_dim, dv = p.head_dim_v, group = p.nheads / p.nheads_k;
    r.out.assign(static_cast<size_t>(int64_t(p.batch) * p.seqlen_q * p.nheads * dv), 0.0);
    r.lse.assign(static_cast<size_t>(int64_t(p.batch) * p.nheads * p.seqlen_q), kInf);
    const bool windowed = p.causal || p.window_left >= 0 || p.window_right >= 0;
    for (int64_t b = 0; b < p.batch; ++b) {
        const int64_t len = p.cache_seqlens ? p.cache_seqlens[b] : p.cache_seqlen;
        const int64_t leftpad = p.cache_leftpad ? p.cache_leftpad[b] : 0;
        const int64_t added = p.knew ? p.seqlen_new : 0;
        // Append: new row t becomes cache position len + t, keys rotated at that position.
        for (int64_t hk = 0; hk < p.nheads_k; ++hk)
            for (int64_t t = 0; t < added; ++t) {
                std::vector<double> key(static_cast<size_t>(d));
                for (int64_t c = 0; c < d; ++c)
                    key[c] = load(p.dtype, p.knew,
                                  b * p.knew_batch_stride + t * p.knew_row_stride + hk * p.knew_head_stride + c);
                rotate(p, key, len + t);
                const int64_t ko = cache_offset(p, b, len + t, hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
                const int64_t vo = cache_offset(p, b, len + t, hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
                for (int64_t c = 0; c < d; ++c) store(p.dtype, p.k_cache_mut, ko + c, key[c]);
                for (int64_t c = 0; c < dv; ++c)
                    store(p.dtype, p.v_cache_mut, vo + c,
                          load(p.dtype, p.vnew,
                               b * p.vnew_batch_stride + t * p.vnew_row_stride + hk * p.vnew_head_stride + c));
            }
        // Attend: keys are cache positions [leftpad, len + added).
        const int64_t sk = len + added - leftpad;
        for (int64_t h = 0; h < p.nheads; ++h) {
            const int64_t hk = h / group;
            Matrix q = read_rows(p.dtype, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, 0, p.seqlen_q, h, d);
            for (int64_t i = 0; i < p.seqlen_q; ++i) rotate(p, q[i], len + (windowed ? i : 0));
            Matrix k(static_cast<size_t>(sk), std::vector<double>(static_cast<size_t>(d)));
            Matrix v(static_cast<size_t>(sk), std::vector<double>(static_cast<size_t>(dv)));
            for (int64_t j = 0; j < sk; ++j) {
                const int64_t pos = leftpad + j;
                const int64_t ko = cache_offset(p, b, pos, hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
                const int64_t vo = cache_offset(p, b, pos, hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
                for (int64_t c = 0; c < d; ++c) k[j][c] = load(p.dtype, p.k_cache_mut, ko + c);
                for (int64_t c = 0; c < dv; ++c) v[j][c] = load(p.dtype, p.v_cache_mut, vo + c);
            }
            const Attention a = attention(p, q, k, b, h);
            Seq s;
            s.q_out0 = b * p.seqlen_q;
            s.sq = p.seqlen_q;
            s.sk = sk;
            write_forward(p, a, v, s, b, h, r);
        }
    }
    return r;
}

}  // namespace flashattn::testing::naive
