// The reference forward and backward for padded and variable-length batches.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/attend.h"
#include "reference/element_access.h"
#include "reference/reference.h"
#include "reference/thread_pool.h"

namespace flashattn::reference {

namespace {

HeadContext head_context(const AttnParams& p, const SeqExtent& s, int b, int h) {
    HeadContext hc;
    hc.seqlen_q = s.seqlen_q;
    hc.seqlen_k = s.seqlen_k;
    hc.alibi_slope = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.0;
    hc.batch_head = static_cast<uint32_t>(b) * static_cast<uint32_t>(p.nheads) + static_cast<uint32_t>(h);
    return hc;
}

int64_t lse_offset(const AttnParams& p, const SeqExtent& s, int b, int h, int64_t i) {
    return b * p.lse_batch_stride + h * p.lse_head_stride + s.q_row0 + i;
}

template <class Acc>
void forward_impl(const AttnParams& p) {
    const int group = p.nheads / p.nheads_k;
    parallel_for(int64_t(p.batch) * p.nheads, [&](int64_t item) {
        const int b = static_cast<int>(item / p.nheads), h = static_cast<int>(item % p.nheads), hk = h / group;
        const SeqExtent s = seq_extent(p, b);
        const HeadContext hc = head_context(p, s, b, h);
        Rows<Acc> q, k, v, out;
        std::vector<Acc> lse;
        load_rows(q, p.dtype, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, h, s.q_row0, s.seqlen_q,
                  p.head_dim);
        load_rows(k, p.dtype, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, hk, s.k_row0, s.seqlen_k,
                  p.head_dim);
        load_rows(v, p.dtype, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, hk, s.k_row0, s.seqlen_k,
                  p.head_dim_v);
        attend_head(p, hc, q, k, v, out, lse);
        for (int64_t i = 0; i < s.seqlen_q; ++i) {
            const int64_t off = row_offset(p.out_batch_stride, p.out_row_stride, p.out_head_stride, b, s.q_row0 + i, h);
            for (int64_t d = 0; d < p.head_dim_v; ++d) write_elem(p.dtype, p.out, off + d, out.row(i)[d]);
            if (p.softmax_lse) p.softmax_lse[lse_offset(p, s, b, h, i)] = static_cast<float>(lse[static_cast<size_t>(i)]);
        }
        if (p.attn_probs) {
            // (batch, nheads, seqlen_q, seqlen_k) with the padded / maximum lengths; 0 outside the sequence.
            float* probs = p.attn_probs + (int64_t(b) * p.nheads + h) * int64_t(p.seqlen_q) * p.seqlen_k;
            std::fill(probs, probs + int64_t(p.seqlen_q) * p.seqlen_k, 0.f);
            for (int64_t i = 0; i < s.seqlen_q; ++i)
                if (std::isfinite(lse[static_cast<size_t>(i)]))
                    probs_row(p, hc, q, k, i, lse[static_cast<size_t>(i)], probs + i * p.seqlen_k);
        }
    });
}

// One work item per (batch, kv head): it owns dK and dV of that head and dQ of the query heads of its group, so
// no two threads write the same element and the sums run in a fixed order.
template <class Acc>
void backward_impl(const AttnParams& p) {
    const int group = p.nheads / p.nheads_k;
    parallel_for(int64_t(p.batch) * p.nheads_k, [&](int64_t item) {
        const int b = static_cast<int>(item / p.nheads_k), hk = static_cast<int>(item % p.nheads_k);
        const SeqExtent s = seq_extent(p, b);
        Rows<Acc> k, v, dk, dv;
        load_rows(k, p.dtype, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, hk, s.k_row0, s.seqlen_k,
                  p.head_dim);
        load_rows(v, p.dtype, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, hk, s.k_row0, s.seqlen_k,
                  p.head_dim_v);
        dk.resize(s.seqlen_k, p.head_dim);
        dv.resize(s.seqlen_k, p.head_dim_v);
        const Acc dropout_scale = static_cast<Acc>(p.dropout_scale);
        const Acc scale = static_cast<Acc>(p.scale);
        std::vector<Acc> dq(static_cast<size_t>(p.head_dim));
        for (int h = hk * group; h < (hk + 1) * group; ++h) {
            const HeadContext hc = head_context(p, s, b, h);
            Rows<Acc> q, dout, out;
            load_rows(q, p.dtype, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, h, s.q_row0, s.seqlen_q,
                      p.head_dim);
            load_rows(dout, p.dtype, p.dout, p.dout_batch_stride, p.dout_row_stride, p.dout_head_stride, b, h,
                      s.q_row0, s.seqlen_q, p.head_dim_v);
            load_rows(out, p.dtype, p.out, p.out_batch_stride, p.out_row_stride, p.out_head_stride, b, h, s.q_row0,
                      s.seqlen_q, p.head_dim_v);
            for (int64_t i = 0; i < s.seqlen_q; ++i) {
                const Acc row_d = dot(dout.row(i), out.row(i), p.head_dim_v);  // D = rowsum(dO * O)
                if (p.softmax_d) p.softmax_d[lse_offset(p, s, b, h, i)] = static_cast<float>(row_d);
                const Acc row_lse = static_cast<Acc>(p.softmax_lse[lse_offset(p, s, b, h, i)]);
                std::fill(dq.begin(), dq.end(), Acc(0));
                const KeyRange r = visible_keys(i, s.seqlen_q, s.seqlen_k, p.window_left, p.window_right);
                if (std::isfinite(row_lse)) {
                    for (int64_t j = r.begin; j < r.end; ++j) {
                        Acc dcap;
                        const Acc sc = score(p, hc, dot(q.row(i), k.row(j), p.head_dim), i, j, &dcap);
                        const Acc pr = std::exp(sc - row_lse);
                        const Acc keep = dropout_kept(p, hc, i, j) ? dropout_scale : Acc(0);
                        const Acc dp = dot(dout.row(i), v.row(j), p.head_dim_v) * keep;
                        const Acc ds = pr * (dp - row_d) * dcap * scale;  // d loss / d (q.k)
                        const Acc pv = pr * keep;
                        Acc* dkj = dk.row(j);
                        Acc* dvj = dv.row(j);
                        const Acc* kj = k.row(j);
                        const Acc* qi = q.row(i);
                        const Acc* doi = dout.row(i);
                        for (int64_t d = 0; d < p.head_dim; ++d) {
                            dq[static_cast<size_t>(d)] += ds * kj[d];
                            dkj[d] += ds * qi[d];
                        }
                        for (int64_t d = 0; d < p.head_dim_v; ++d) dvj[d] += pv * doi[d];
                    }
                }
                const int64_t off = row_offset(p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride, b, s.q_row0 + i, h);
                for (int64_t d = 0; d < p.head_dim; ++d) write_elem(p.dtype, p.dq, off + d, dq[static_cast<size_t>(d)]);
            }
        }
        // Keys past seqused_k get zero gradients: they took no part in the forward.
        dk.data.resize(static_cast<size_t>(s.k_rows * p.head_dim), Acc(0));
        dv.data.resize(static_cast<size_t>(s.k_rows * p.head_dim_v), Acc(0));
        for (int64_t j = 0; j < s.k_rows; ++j) {
            const int64_t ko = row_offset(p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride, b, s.k_row0 + j, hk);
            const int64_t vo = row_offset(p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride, b, s.k_row0 + j, hk);
            for (int64_t d = 0; d < p.head_dim; ++d) write_elem(p.dtype, p.dk, ko + d, dk.row(j)[d]);
            for (int64_t d = 0; d < p.head_dim_v; ++d) write_elem(p.dtype, p.dv, vo + d, dv.row(j)[d]);
        }
    });
}

}  // namespace

void forward(const AttnParams& p, Accum acc) {
    if (acc == Accum::f64) forward_impl<double>(p);
    else forward_impl<float>(p);
}

void backward(const AttnParams& p, Accum acc) {
    if (acc == Accum::f64) backward_impl<double>(p);
    else backward_impl<float>(p);
}

}  // namespace flashattn::reference
