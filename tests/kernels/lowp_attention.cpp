#include "kernels/lowp_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/mask.h"
#include "common/numeric.h"
#include "common/philox.h"

namespace flashattn::testing {

// ----- SeqLayout ---------------------------------------------------------------------------------------------------

SeqLayout SeqLayout::padded(int64_t batch, int64_t seqlen_q, int64_t seqlen_k) {
    SeqLayout l;
    l.batch = batch;
    l.seqlen_q = seqlen_q;
    l.seqlen_k = seqlen_k;
    return l;
}

SeqLayout SeqLayout::packed(const std::vector<int32_t>& seqlens_q, const std::vector<int32_t>& seqlens_k,
                            const std::vector<int32_t>& seqused_k) {
    if (seqlens_q.size() != seqlens_k.size() || (!seqused_k.empty() && seqused_k.size() != seqlens_q.size()))
        throw std::invalid_argument("SeqLayout::packed: one length per sequence");
    SeqLayout l;
    l.varlen = true;
    l.batch = static_cast<int64_t>(seqlens_q.size());
    l.cu_seqlens_q.assign(1, 0);
    l.cu_seqlens_k.assign(1, 0);
    for (size_t b = 0; b < seqlens_q.size(); ++b) {
        l.cu_seqlens_q.push_back(l.cu_seqlens_q.back() + seqlens_q[b]);
        l.cu_seqlens_k.push_back(l.cu_seqlens_k.back() + seqlens_k[b]);
        l.seqlen_q = std::max<int64_t>(l.seqlen_q, seqlens_q[b]);
        l.seqlen_k = std::max<int64_t>(l.seqlen_k, seqlens_k[b]);
        if (!seqused_k.empty() && (seqused_k[b] < 0 || seqused_k[b] > seqlens_k[b]))
            throw std::invalid_argument("SeqLayout::packed: seqused_k must lie in [0, seqlen_k]");
    }
    l.seqused_k = seqused_k;
    return l;
}

int64_t SeqLayout::q_begin(int64_t b) const { return varlen ? cu_seqlens_q[b] : b * seqlen_q; }
int64_t SeqLayout::q_len(int64_t b) const { return varlen ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : seqlen_q; }
int64_t SeqLayout::k_begin(int64_t b) const { return varlen ? cu_seqlens_k[b] : b * seqlen_k; }
int64_t SeqLayout::k_len(int64_t b) const {
    if (!varlen) return seqlen_k;
    return seqused_k.empty() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : seqused_k[b];
}
int64_t SeqLayout::total_q() const { return varlen ? cu_seqlens_q.back() : batch * seqlen_q; }
int64_t SeqLayout::total_k() const { return varlen ? cu_seqlens_k.back() : batch * seqlen_k; }

int64_t SeqLayout::lse_index(int64_t b, int64_t h, int64_t i, int64_t nheads) const {
    return varlen ? h * total_q() + cu_seqlens_q[b] + i : (b * nheads + h) * seqlen_q + i;
}
std::vector<int64_t> SeqLayout::lse_shape(int64_t nheads) const {
    return varlen ? std::vector<int64_t>{nheads, total_q()} : std::vector<int64_t>{batch, nheads, seqlen_q};
}
int64_t SeqLayout::probs_index(int64_t b, int64_t h, int64_t i, int64_t j, int64_t nheads) const {
    return ((b * nheads + h) * seqlen_q + i) * seqlen_k + j;
}
std::vector<int64_t> SeqLayout::probs_shape(int64_t nheads) const { return {batch, nheads, seqlen_q, seqlen_k}; }

// ----- ResolvedOptions ---------------------------------------------------------------------------------------------

ResolvedOptions ResolvedOptions::from(const AttentionOptions& o, int64_t head_dim, int64_t batch, int64_t nheads) {
    ResolvedOptions r;
    r.scale = !std::isnan(o.softmax_scale) ? o.softmax_scale
                                           : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    r.window_left = o.window_left;
    r.window_right = o.causal ? 0 : o.window_right;
    r.softcap = o.softcap;
    if (o.alibi_slopes.present()) {
        const TensorView& s = o.alibi_slopes;
        if (s.device != DeviceType::cpu || s.dtype != DType::f32)
            throw std::invalid_argument("lowp attention: alibi_slopes must be a CPU fp32 tensor");
        const auto* data = static_cast<const float*>(s.data);
        if (s.ndim == 1) {
            for (int64_t h = 0; h < nheads; ++h) r.alibi_slopes.push_back(data[h * s.stride[0]]);
        } else {
            r.alibi_per_batch = true;
            for (int64_t b = 0; b < batch; ++b)
                for (int64_t h = 0; h < nheads; ++h) r.alibi_slopes.push_back(data[b * s.stride[0] + h * s.stride[1]]);
        }
    }
    r.dropout_p = o.dropout_p;
    if (o.dropout_p > 0.0f) {
        r.keep_threshold = dropout_keep_threshold(o.dropout_p);
        r.dropout_scale = 1.0f / (1.0f - o.dropout_p);
    }
    r.seed = o.seed;
    r.offset = o.offset;
    return r;
}

float ResolvedOptions::slope(int64_t b, int64_t h, int64_t nheads) const {
    if (alibi_slopes.empty()) return 0.0f;
    return alibi_per_batch ? alibi_slopes[b * nheads + h] : alibi_slopes[h];
}

namespace {

// ----- rounding to the dtype ---------------------------------------------------------------------------------------

struct RoundF16 {
    static float r(float x) { return half_to_float(float_to_half(x)); }
};
struct RoundBF16 {
    static float r(float x) { return bf16_to_float(float_to_bf16(x)); }
};
struct RoundF32 {
    static float r(float x) { return x; }
};

// ----- small kernels of fp32 arithmetic ----------------------------------------------------------------------------

// Dot product accumulated in fp32 (eight partial sums, as a vectorised GEMM would).
float dot(const float* a, const float* b, int64_t n) {
    constexpr int kLanes = 8;
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
    float tail = 0.0f;
    for (; i < n; ++i) tail += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

void axpy(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

std::vector<float> to_floats(const HostTensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(t.get(i));
    return v;
}

HostTensor from_floats(const std::vector<float>& v, DType dtype, std::vector<int64_t> shape) {
    HostTensor t(dtype, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, v[static_cast<size_t>(i)]);
    return t;
}

int cpu_threads() {
    if (const char* env = std::getenv("FLASHATTN_CPU_THREADS")) {
        const int n = std::atoi(env);
        if (n > 0) return n;
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
}

// Runs body(item) for item in [0, n) on all hardware threads; items are independent.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
    const int64_t nthreads = std::min<int64_t>(n, cpu_threads());
    if (nthreads <= 1) {
        for (int64_t i = 0; i < n; ++i) body(i);
        return;
    }
    std::atomic<int64_t> next{0};
    std::vector<std::thread> threads;
    for (int64_t t = 0; t < nthreads; ++t)
        threads.emplace_back([&] {
            for (int64_t i = next++; i < n; i = next++) body(i);
        });
    for (auto& t : threads) t.join();
}

// One unit of work: rows (or keys) [begin, end) of head h of sequence b.
struct WorkItem {
    int64_t b, h, begin, end;
};
constexpr int64_t kBlock = 16;

std::vector<WorkItem> split(const SeqLayout& layout, int64_t nheads, bool over_keys) {
    std::vector<WorkItem> items;
    for (int64_t b = 0; b < layout.batch; ++b) {
        const int64_t len = over_keys ? layout.k_len(b) : layout.q_len(b);
        for (int64_t h = 0; h < nheads; ++h)
            for (int64_t i = 0; i < len; i += kBlock) items.push_back({b, h, i, std::min(len, i + kBlock)});
    }
    return items;
}

// Shapes and flattened inputs shared by forward and backward.
struct Problem {
    const SeqLayout& layout;
    ResolvedOptions opt;
    int64_t nheads, nheads_k, d, dv, group;
    std::vector<float> q, k, v;

    Problem(const SeqLayout& l, const HostTensor& qt, const HostTensor& kt, const HostTensor& vt,
            const AttentionOptions& o)
        : layout(l) {
        const auto& qs = qt.shape();
        const auto& ks = kt.shape();
        const auto& vs = vt.shape();
        const size_t rank = l.varlen ? 3 : 4;
        if (qs.size() != rank || ks.size() != rank || vs.size() != rank)
            throw std::invalid_argument("lowp attention: q, k, v must have rank " + std::to_string(rank));
        nheads = qs[rank - 2];
        nheads_k = ks[rank - 2];
        d = qs[rank - 1];
        dv = vs[rank - 1];
        if (nheads_k <= 0 || nheads % nheads_k != 0) throw std::invalid_argument("lowp attention: nheads % nheads_k");
        group = nheads / nheads_k;
        if (qt.numel() != l.total_q() * nheads * d || kt.numel() != l.total_k() * nheads_k * d ||
            vt.numel() != l.total_k() * nheads_k * dv)
            throw std::invalid_argument("lowp attention: tensor sizes do not match the layout");
        opt = ResolvedOptions::from(o, d, l.batch, nheads);
        q = to_floats(qt);
        k = to_floats(kt);
        v = to_floats(vt);
    }

    const float* q_row(int64_t b, int64_t h, int64_t i) const {
        return q.data() + ((layout.q_begin(b) + i) * nheads + h) * d;
    }
    const float* k_row(int64_t b, int64_t h, int64_t j) const {
        return k.data() + ((layout.k_begin(b) + j) * nheads_k + h / group) * d;
    }
    const float* v_row(int64_t b, int64_t h, int64_t j) const {
        return v.data() + ((layout.k_begin(b) + j) * nheads_k + h / group) * dv;
    }
    KeyRange keys(int64_t b, int64_t i) const {
        return visible_keys(i, layout.q_len(b), layout.k_len(b), opt.window_left, opt.window_right);
    }
    bool keep(int64_t b, int64_t h, int64_t i, int64_t j) const {
        if (!opt.has_dropout()) return true;
        return dropout_keep(opt.seed, opt.offset, static_cast<uint32_t>(b * nheads + h), static_cast<uint32_t>(i),
                            static_cast<uint32_t>(j), opt.keep_threshold);
    }
};

// The score of (row i, key j): s1 after the scale (needed by the softcap's backward) and s after softcap and ALiBi.
struct Score {
    float s1, s;
};

template <class R>
Score score(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
    const ResolvedOptions& o = p.opt;
    Score r;
    r.s1 = R::r(R::r(dot(p.q_row(b, h, i), p.k_row(b, h, j), p.d)) * o.scale);
    r.s = r.s1;
    if (o.softcap > 0.0f) r.s = R::r(o.softcap * std::tanh(r.s1 / o.softcap));
    if (!o.alibi_slopes.empty())
        r.s = R::r(r.s + alibi_bias(o.slope(b, h, p.nheads), i, j, p.layout.q_len(b), p.layout.k_len(b)));
    return r;
}

// Softmax statistics of one row: m = max s, l = sum exp(s - m) over the visible keys.
struct RowStats {
    float m = 0.0f, l = 0.0f;
};

template <class R>
float prob(float s, const RowStats& st) {
    return R::r(std::exp(s - st.m) / st.l);
}

constexpr float kInf = std::numeric_limits<float>::infinity();

// The forward of a block of rows of one (batch, head): scores, probabilities, dropout and rounded outputs. Keys
// are visited once per block (each key's vectors reused by all rows), so that the O(N^2) work is not bound by
// memory traffic; each element is computed exactly as stated at the top of lowp_attention.h.
template <class R>
struct RowBlock {
    int64_t b = 0, h = 0, first = 0, rows = 0;
    int64_t key_begin = 0, width = 0;  // keys [key_begin, key_begin + width) cover every row's visible range
    std::vector<KeyRange> keys;        // per row
    std::vector<Score> s;              // rows x width
    std::vector<float> pr, pd;         // p_ij (rounded) and pd_ij, rows x width
    std::vector<uint8_t> kept;         // rows x width
    std::vector<RowStats> stats;       // per row
    std::vector<float> o;              // rows x dv, rounded

    bool visible(int64_t r, int64_t j) const { return j >= keys[r].begin && j < keys[r].end; }
    size_t at(int64_t r, int64_t j) const { return static_cast<size_t>(r * width + (j - key_begin)); }

    void compute(const Problem& p, const WorkItem& w) {
        b = w.b;
        h = w.h;
        first = w.begin;
        rows = w.end - w.begin;
        keys.resize(static_cast<size_t>(rows));
        int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
        for (int64_t r = 0; r < rows; ++r) {
            keys[r] = p.keys(b, first + r);
            if (keys[r].begin < keys[r].end) {
                lo = std::min(lo, keys[r].begin);
                hi = std::max(hi, keys[r].end);
            }
        }
        key_begin = lo <= hi ? lo : 0;
        width = lo <= hi ? hi - lo : 0;
        const size_t n = static_cast<size_t>(rows * width);
        s.assign(n, Score{});
        pr.assign(n, 0.0f);
        pd.assign(n, 0.0f);
        kept.assign(n, 0);
        stats.assign(static_cast<size_t>(rows), RowStats{-kInf, 0.0f});
        for (int64_t j = key_begin; j < key_begin + width; ++j)
            for (int64_t r = 0; r < rows; ++r)
                if (visible(r, j)) {
                    s[at(r, j)] = score<R>(p, b, h, first + r, j);
                    stats[r].m = std::max(stats[r].m, s[at(r, j)].s);
                }
        for (int64_t r = 0; r < rows; ++r) {
            RowStats& st = stats[r];
            for (int64_t j = keys[r].begin; j < keys[r].end; ++j) st.l += std::exp(s[at(r, j)].s - st.m);
            for (int64_t j = keys[r].begin; j < keys[r].end; ++j) {
                const size_t t = at(r, j);
                pr[t] = prob<R>(s[t].s, st);
                kept[t] = p.keep(b, h, first + r, j);
                pd[t] = kept[t] ? R::r(pr[t] * p.opt.dropout_scale) : 0.0f;
            }
        }
        std::vector<float> acc(static_cast<size_t>(rows * p.dv), 0.0f);
        for (int64_t j = key_begin; j < key_begin + width; ++j) {
            const float* vj = p.v_row(b, h, j);
            for (int64_t r = 0; r < rows; ++r)
                if (visible(r, j)) axpy(pd[at(r, j)], vj, acc.data() + r * p.dv, p.dv);
        }
        o.resize(acc.size());
        for (size_t t = 0; t < acc.size(); ++t) o[t] = R::r(acc[t]);
    }
};

template <class R>
LowpForwardResult forward_impl(const SeqLayout& layout, const HostTensor& qt, const HostTensor& kt,
                               const HostTensor& vt, const AttentionOptions& options, bool want_probs) {
    const Problem p(layout, qt, kt, vt, options);
    std::vector<float> out(static_cast<size_t>(layout.total_q() * p.nheads * p.dv), 0.0f);
    std::vector<float> lse(static_cast<size_t>(layout.total_q() * p.nheads), 0.0f);
    std::vector<float> probs;
    if (want_probs) {
        int64_t n = 1;
        for (int64_t s : layout.probs_shape(p.nheads)) n *= s;
        probs.assign(static_cast<size_t>(n), 0.0f);
    }
    const std::vector<WorkItem> items = split(layout, p.nheads, /*over_keys=*/false);
    parallel_for(static_cast<int64_t>(items.size()), [&](int64_t item) {
        const WorkItem& w = items[static_cast<size_t>(item)];
        RowBlock<R> blk;
        blk.compute(p, w);
        for (int64_t r = 0; r < blk.rows; ++r) {
            const int64_t i = w.begin + r;
            float& row_lse = lse[static_cast<size_t>(layout.lse_index(w.b, w.h, i, p.nheads))];
            const KeyRange& kr = blk.keys[r];
            if (kr.begin >= kr.end) {  // sees no key: out 0 (already), lse +inf
                row_lse = kInf;
                continue;
            }
            row_lse = blk.stats[r].m + std::log(blk.stats[r].l);
            float* o = out.data() + ((layout.q_begin(w.b) + i) * p.nheads + w.h) * p.dv;
            std::copy_n(blk.o.data() + r * p.dv, p.dv, o);
            if (want_probs) {
                float* row = probs.data() + layout.probs_index(w.b, w.h, i, 0, p.nheads);
                for (int64_t j = kr.begin; j < kr.end; ++j) {
                    const size_t t = blk.at(r, j);
                    row[j] = blk.kept[t] ? blk.pr[t] : -blk.pr[t];
                }
            }
        }
    });
    LowpForwardResult r;
    std::vector<int64_t> out_shape = qt.shape();
    out_shape.back() = p.dv;
    r.out = from_floats(out, qt.dtype(), out_shape);
    r.lse = from_floats(lse, DType::f32, layout.lse_shape(p.nheads));
    if (want_probs) r.probs = from_floats(probs, DType::f32, layout.probs_shape(p.nheads));
    return r;
}

// Gradient of the (rounded) score s_ij with respect to the unscaled dot product, given dp_ij.
template <class R>
float score_grad(const Problem& p, const Score& s, float prob, float dp, float D) {
    float ds = R::r(prob * (dp - D));
    if (p.opt.softcap > 0.0f) {
        const float t = std::tanh(s.s1 / p.opt.softcap);
        ds = R::r(ds * (1.0f - t * t));
    }
    return R::r(ds * p.opt.scale);
}

template <class R>
LowpBackwardResult backward_impl(const SeqLayout& layout, const HostTensor& qt, const HostTensor& kt,
                                 const HostTensor& vt, const HostTensor& doutt, const AttentionOptions& options) {
    const Problem p(layout, qt, kt, vt, options);
    if (doutt.numel() != layout.total_q() * p.nheads * p.dv)
        throw std::invalid_argument("lowp attention: dout must be shaped like out");
    const std::vector<float> dout = to_floats(doutt);
    auto dout_row = [&](int64_t b, int64_t h, int64_t i) {
        return dout.data() + ((layout.q_begin(b) + i) * p.nheads + h) * p.dv;
    };
    const size_t nrows = static_cast<size_t>(layout.total_q() * p.nheads);
    std::vector<RowStats> stats(nrows);
    std::vector<float> softmax_d(nrows, 0.0f);
    std::vector<float> dq(static_cast<size_t>(layout.total_q() * p.nheads * p.d), 0.0f);
    std::vector<float> dk(static_cast<size_t>(layout.total_k() * p.nheads_k * p.d), 0.0f);
    std::vector<float> dv(static_cast<size_t>(layout.total_k() * p.nheads_k * p.dv), 0.0f);
    const float rp = p.opt.dropout_scale;

    // Phase 1, by blocks of query rows: the rows' forward (o, stats), D = dout . o, and dq.
    const std::vector<WorkItem> rows = split(layout, p.nheads, /*over_keys=*/false);
    parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t item) {
        const WorkItem& w = rows[static_cast<size_t>(item)];
        RowBlock<R> blk;
        blk.compute(p, w);
        std::vector<float> D(static_cast<size_t>(blk.rows), 0.0f);
        for (int64_t r = 0; r < blk.rows; ++r) {
            if (blk.keys[r].begin >= blk.keys[r].end) continue;  // dq 0, D 0
            const size_t row = static_cast<size_t>(layout.lse_index(w.b, w.h, w.begin + r, p.nheads));
            stats[row] = blk.stats[r];
            D[r] = dot(dout_row(w.b, w.h, w.begin + r), blk.o.data() + r * p.dv, p.dv);
            softmax_d[row] = D[r];
        }
        std::vector<float> dq_acc(static_cast<size_t>(blk.rows * p.d), 0.0f);
        for (int64_t j = blk.key_begin; j < blk.key_begin + blk.width; ++j) {
            const float* kj = p.k_row(w.b, w.h, j);
            const float* vj = p.v_row(w.b, w.h, j);
            for (int64_t r = 0; r < blk.rows; ++r) {
                if (!blk.visible(r, j)) continue;
                const size_t t = blk.at(r, j);
                const float dpd = R::r(dot(dout_row(w.b, w.h, w.begin + r), vj, p.dv));
                const float dp = blk.kept[t] ? R::r(dpd * rp) : 0.0f;
                axpy(score_grad<R>(p, blk.s[t], blk.pr[t], dp, D[r]), kj, dq_acc.data() + r * p.d, p.d);
            }
        }
        for (int64_t r = 0; r < blk.rows; ++r) {
            float* dq_row = dq.data() + ((layout.q_begin(w.b) + w.begin + r) * p.nheads + w.h) * p.d;
            for (int64_t c = 0; c < p.d; ++c) dq_row[c] = R::r(dq_acc[static_cast<size_t>(r * p.d + c)]);
        }
    });

    // Phase 2, by blocks of keys of a key head: per query head of the group dk_j = R(sum_i ds_ij q_i) and
    // dv_j = R(sum_i pd_ij dout_i), recomputing p_ij from the row stats; then the group's (rounded) sum.
    const std::vector<WorkItem> keys = split(layout, p.nheads_k, /*over_keys=*/true);
    parallel_for(static_cast<int64_t>(keys.size()), [&](int64_t item) {
        const WorkItem& w = keys[static_cast<size_t>(item)];
        const int64_t sq = layout.q_len(w.b), nkeys = w.end - w.begin;
        std::vector<float> dk_acc(static_cast<size_t>(nkeys * p.d)), dv_acc(static_cast<size_t>(nkeys * p.dv));
        std::vector<float> dk_sum(dk_acc.size(), 0.0f), dv_sum(dv_acc.size(), 0.0f);
        for (int64_t h = w.h * p.group; h < (w.h + 1) * p.group; ++h) {
            std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
            std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
            for (int64_t i = 0; i < sq; ++i) {
                const KeyRange kr = p.keys(w.b, i);
                const int64_t jb = std::max(kr.begin, w.begin), je = std::min(kr.end, w.end);
                if (jb >= je) continue;
                const size_t row = static_cast<size_t>(layout.lse_index(w.b, h, i, p.nheads));
                const RowStats& st = stats[row];
                const float D = softmax_d[row];
                const float* g = dout_row(w.b, h, i);
                const float* qi = p.q_row(w.b, h, i);
                for (int64_t j = jb; j < je; ++j) {
                    const Score s = score<R>(p, w.b, h, i, j);
                    const float pr = prob<R>(s.s, st);
                    const bool kept = p.keep(w.b, h, i, j);
                    if (kept) axpy(R::r(pr * rp), g, dv_acc.data() + (j - w.begin) * p.dv, p.dv);
                    const float dpd = R::r(dot(g, p.v_row(w.b, h, j), p.dv));
                    const float dp = kept ? R::r(dpd * rp) : 0.0f;
                    axpy(score_grad<R>(p, s, pr, dp, D), qi, dk_acc.data() + (j - w.begin) * p.d, p.d);
                }
            }
            for (size_t t = 0; t < dk_acc.size(); ++t) dk_sum[t] += R::r(dk_acc[t]);
            for (size_t t = 0; t < dv_acc.size(); ++t) dv_sum[t] += R::r(dv_acc[t]);
        }
        for (int64_t j = w.begin; j < w.end; ++j) {
            float* dk_row = dk.data() + ((layout.k_begin(w.b) + j) * p.nheads_k + w.h) * p.d;
            float* dv_row = dv.data() + ((layout.k_begin(w.b) + j) * p.nheads_k + w.h) * p.dv;
            for (int64_t c = 0; c < p.d; ++c) dk_row[c] = R::r(dk_sum[static_cast<size_t>((j - w.begin) * p.d + c)]);
            for (int64_t c = 0; c < p.dv; ++c)
                dv_row[c] = R::r(dv_sum[static_cast<size_t>((j - w.begin) * p.dv + c)]);
        }
    });

    LowpBackwardResult r;
    r.dq = from_floats(dq, qt.dtype(), qt.shape());
    r.dk = from_floats(dk, kt.dtype(), kt.shape());
    r.dv = from_floats(dv, vt.dtype(), vt.shape());
    r.softmax_d = from_floats(softmax_d, DType::f32, layout.lse_shape(p.nheads));
    return r;
}

}  // namespace

LowpForwardResult lowp_forward(const SeqLayout& layout, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                               const AttentionOptions& options, bool want_probs) {
    switch (q.dtype()) {
        case DType::f16: return forward_impl<RoundF16>(layout, q, k, v, options, want_probs);
        case DType::bf16: return forward_impl<RoundBF16>(layout, q, k, v, options, want_probs);
        case DType::f32: return forward_impl<RoundF32>(layout, q, k, v, options, want_probs);
        default: throw std::invalid_argument("lowp_forward: dtype must be f16, bf16 or f32");
    }
}

LowpBackwardResult lowp_backward(const SeqLayout& layout, const HostTensor& q, const HostTensor& k,
                                 const HostTensor& v, const HostTensor& dout, const AttentionOptions& options) {
    switch (q.dtype()) {
        case DType::f16: return backward_impl<RoundF16>(layout, q, k, v, dout, options);
        case DType::bf16: return backward_impl<RoundBF16>(layout, q, k, v, dout, options);
        case DType::f32: return backward_impl<RoundF32>(layout, q, k, v, dout, options);
        default: throw std::invalid_argument("lowp_backward: dtype must be f16, bf16 or f32");
    }
}

}  // namespace flashattn::testing
