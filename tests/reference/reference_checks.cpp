#include "reference/reference_checks.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "reference/closeness.h"
#include "reference/naive_attention.h"

namespace flashattn::testing {

namespace {

std::string describe(const ProblemConfig& c, reference::Accum acc) {
    std::ostringstream os;
    os << dtype_name(c.dtype) << " accum=" << (acc == reference::Accum::f32 ? "f32" : "f64");
    if (c.varlen()) {
        os << " varlen q=[";
        for (int s : c.seqlens_q) os << s << ' ';
        os << "] k=[";
        for (int s : c.seqlens_k) os << s << ' ';
        os << ']';
        if (!c.seqused_k.empty()) os << " seqused_k";
    } else {
        os << " b=" << c.batch << " sq=" << c.seqlen_q << " sk=" << c.seqlen_k;
    }
    os << " h=" << c.nheads << '/' << c.nheads_k << " d=" << c.head_dim << '/' << c.dv() << " causal=" << c.causal
       << " window=(" << c.window_left << ',' << c.window_right << ") softcap=" << c.softcap
       << " alibi=" << static_cast<int>(c.alibi) << " dropout=" << c.dropout_p
       << " layout=" << static_cast<int>(c.layout);
    return os.str();
}

}  // namespace

std::vector<double> values(const HostTensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.get(i);
    return v;
}

::testing::AssertionResult gaps_untouched(const StridedTensor& t, const std::string& what) {
    std::vector<bool> in_view(static_cast<size_t>(t.storage->numel()), false);
    for (int64_t i = 0; i < t.numel(); ++i) in_view[static_cast<size_t>(t.storage_index(i))] = true;
    for (int64_t i = 0; i < t.storage->numel(); ++i)
        if (!in_view[static_cast<size_t>(i)] && !std::isnan(t.storage->get(i)))
            return ::testing::AssertionFailure() << what << ": storage element " << i
                                                 << " outside the view was written";
    return ::testing::AssertionSuccess();
}

void check_forward(const ProblemConfig& cfg, reference::Accum acc) {
    SCOPED_TRACE(describe(cfg, acc));
    Problem prob(cfg);
    const AttnParams p = prob.params(OpKind::forward);
    reference::forward(p, acc);
    const naive::Result want = naive::forward(p);

    const std::vector<double> out = prob.out.logical(), lse = values(prob.lse);
    EXPECT_TRUE(fully_written(out, "out"));
    EXPECT_TRUE(fully_written(lse, "lse"));
    EXPECT_TRUE(gaps_untouched(prob.out, "out"));
    EXPECT_TRUE(all_close(out, want.out, output_tolerance(cfg.dtype, acc), "out"));
    EXPECT_TRUE(all_close(lse, want.lse, fp32_tolerance(acc), "lse"));
    if (cfg.attn_probs) {
        const std::vector<double> probs = values(prob.probs);
        EXPECT_TRUE(fully_written(probs, "attn_probs"));
        EXPECT_TRUE(all_close(probs, want.probs, fp32_tolerance(acc), "attn_probs"));
    }
}

void check_forward(const ProblemConfig& cfg) {
    for (reference::Accum acc : kBothAccums) check_forward(cfg, acc);
}

void check_backward(const ProblemConfig& cfg, reference::Accum acc) {
    SCOPED_TRACE(describe(cfg, acc));
    Problem prob(cfg);
    reference::forward(prob.params(OpKind::forward), reference::Accum::f64);
    const AttnParams p = prob.params(OpKind::backward);
    reference::backward(p, acc);
    const naive::Result want = naive::backward(p);

    const Tolerance tol = gradient_tolerance(cfg.dtype, acc);
    const std::vector<double> dq = prob.dq.logical(), dk = prob.dk.logical(), dv = prob.dv.logical();
    EXPECT_TRUE(fully_written(dq, "dq"));
    EXPECT_TRUE(fully_written(dk, "dk"));
    EXPECT_TRUE(fully_written(dv, "dv"));
    EXPECT_TRUE(gaps_untouched(prob.dq, "dq"));
    EXPECT_TRUE(gaps_untouched(prob.dk, "dk"));
    EXPECT_TRUE(gaps_untouched(prob.dv, "dv"));
    EXPECT_TRUE(all_close(dq, want.dq, tol, "dq"));
    EXPECT_TRUE(all_close(dk, want.dk, tol, "dk"));
    EXPECT_TRUE(all_close(dv, want.dv, tol, "dv"));
    if (cfg.softmax_d) {
        const std::vector<double> delta = values(prob.softmax_d);
        EXPECT_TRUE(fully_written(delta, "softmax_d"));
        EXPECT_TRUE(all_close(delta, want.delta, fp32_tolerance(acc), "softmax_d"));
    }
}

void check_backward(const ProblemConfig& cfg) {
    for (reference::Accum acc : kBothAccums) check_backward(cfg, acc);
}

}  // namespace flashattn::testing
