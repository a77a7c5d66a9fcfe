#include "kernels/attention_case.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/mask.h"
#include "common/philox.h"

namespace flashattn::testing {

namespace {

constexpr double kAlibiSlopeMax = 0.3;  // slopes uniform in [0, 0.3), as FlashAttention's tests draw them
constexpr int64_t kOutPadding = 8;       // packed layout: out rows padded by 8 elements that must stay untouched
constexpr unsigned char kPoisonByte = 0xFF;
constexpr float kInf = std::numeric_limits<float>::infinity();

uint64_t fnv1a(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 1099511628211ull;
    }
    return h;
}

std::string number(double x) {
    std::ostringstream os;
    os << x;
    std::string s = os.str();
    for (char& ch : s)
        if (ch == '.') ch = 'p';
        else if (ch == '-') ch = 'm';
    return s;
}

std::string window_side(int32_t w) { return w < 0 ? "inf" : std::to_string(w); }

HostTensor i32_tensor(const std::vector<int32_t>& values) {
    HostTensor t(DType::i32, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
    return t;
}

// Where in a tensor the first NaN (an unwritten, poisoned element) is, and how many there are.
struct NanCount {
    int64_t count = 0, first = -1;
};
NanCount count_nan(const HostTensor& t) {
    NanCount n;
    for (int64_t i = 0; i < t.numel(); ++i)
        if (std::isnan(t.get(i))) {
            if (n.count++ == 0) n.first = i;
        }
    return n;
}

void expect_written(const std::string& what, const HostTensor& t) {
    const NanCount n = count_nan(t);
    EXPECT_EQ(n.count, 0) << what << ": " << n.count << " of " << t.numel()
                          << " elements are NaN (left unwritten, or computed as NaN); first at flat index " << n.first;
}

// q, k, v and the like as slices of a packed (rows, 3, nheads, d) tensor.
HostTensor pack3(const HostTensor& a, const HostTensor& b, const HostTensor& c, int64_t rows, int64_t nheads,
                 int64_t d) {
    HostTensor packed(a.dtype(), {rows, 3, nheads, d});
    const HostTensor* parts[3] = {&a, &b, &c};
    for (int64_t r = 0; r < rows; ++r)
        for (int t = 0; t < 3; ++t)
            for (int64_t h = 0; h < nheads; ++h)
                for (int64_t x = 0; x < d; ++x)
                    packed.set(((r * 3 + t) * nheads + h) * d + x, parts[t]->get((r * nheads + h) * d + x));
    return packed;
}

HostTensor unpack3(const HostTensor& packed, int which, const std::vector<int64_t>& shape) {
    const int64_t rows = packed.shape()[0], nheads = packed.shape()[2], d = packed.shape()[3];
    HostTensor t(packed.dtype(), shape);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < nheads; ++h)
            for (int64_t x = 0; x < d; ++x)
                t.set((r * nheads + h) * d + x, packed.get(((r * 3 + which) * nheads + h) * d + x));
    return t;
}

class CaseTest : public GpuTest {
  public:
    CaseTest(AttnCase c, std::function<void(const AttnCase&)> body) : case_(std::move(c)), body_(std::move(body)) {}
    void TestBody() override { body_(case_); }

  private:
    AttnCase case_;
    std::function<void(const AttnCase&)> body_;
};

}  // namespace

// ----- AttnCase ----------------------------------------------------------------------------------------------------

SeqLayout AttnCase::layout() const {
    return varlen() ? SeqLayout::packed(seqlens_q, seqlens_k, seqused_k) : SeqLayout::padded(batch, seqlen_q, seqlen_k);
}

std::string AttnCase::label() const {
    std::ostringstream s;
    s << (dtype == DType::f16 ? "f16" : dtype == DType::bf16 ? "bf16" : dtype_name(dtype));
    if (varlen()) {
        s << "_varlen" << seqlens_q.size();
        if (!seqused_k.empty()) s << "_used";
    } else {
        s << "_b" << batch << "_sq" << seqlen_q << "_sk" << seqlen_k;
    }
    s << "_h" << nheads;
    if (nheads_k != nheads) s << "kv" << nheads_k;
    s << "_d" << head_dim;
    if (dv() != head_dim) s << "v" << dv();
    if (causal) s << "_causal";
    if (window_left >= 0 || window_right >= 0)
        s << "_win" << window_side(window_left) << "_" << window_side(window_right);
    if (softcap > 0.0f) s << "_cap" << number(softcap);
    if (alibi == Alibi::per_head) s << "_alibiH";
    if (alibi == Alibi::per_batch_head) s << "_alibiBH";
    if (dropout_p > 0.0f) s << "_drop" << number(dropout_p);
    if (!std::isnan(softmax_scale)) s << "_scale" << number(softmax_scale);
    if (packed_qkv) s << "_packed";
    if (attn_probs) s << "_probs";
    if (nan_past_used) s << "_nanpast";
    if (key_ramp != 0.0f) s << "_ramp" << number(key_ramp);
    if (no_workspace) s << "_nows";
    if (!tag.empty()) s << "_" << tag;
    return s.str();
}

int64_t AttnCase::visible_pairs() const {
    const SeqLayout l = layout();
    const int32_t wr = causal ? 0 : window_right;
    int64_t pairs = 0;
    for (int64_t b = 0; b < l.batch; ++b)
        for (int64_t i = 0; i < l.q_len(b); ++i) {
            const KeyRange kr = visible_keys(i, l.q_len(b), l.k_len(b), window_left, wr);
            pairs += kr.end - kr.begin;
        }
    return pairs * nheads;
}

// ----- AttnProblem -------------------------------------------------------------------------------------------------

AttnProblem::AttnProblem(const AttnCase& c) : c_(c), layout_(c.layout()) {
    if (c.packed_qkv && (c.varlen() || c.seqlen_q != c.seqlen_k || c.nheads_k != c.nheads || c.dv() != c.head_dim))
        throw std::invalid_argument("packed_qkv needs the padded layout, seqlen_q == seqlen_k, nheads_k == nheads "
                                    "and head_dim_v == head_dim");
    std::mt19937_64 rng(fnv1a(c.label()));
    const int64_t H = c.nheads, Hk = c.nheads_k, d = c.head_dim, dv = c.dv();
    if (c.varlen()) {
        q_ = HostTensor(c.dtype, {layout_.total_q(), H, d});
        k_ = HostTensor(c.dtype, {layout_.total_k(), Hk, d});
        v_ = HostTensor(c.dtype, {layout_.total_k(), Hk, dv});
        cu_seqlens_q_ = i32_tensor(layout_.cu_seqlens_q);
        cu_seqlens_k_ = i32_tensor(layout_.cu_seqlens_k);
        if (!c.seqused_k.empty()) seqused_k_ = i32_tensor(c.seqused_k);
    } else {
        q_ = HostTensor(c.dtype, {c.batch, c.seqlen_q, H, d});
        k_ = HostTensor(c.dtype, {c.batch, c.seqlen_k, Hk, d});
        v_ = HostTensor(c.dtype, {c.batch, c.seqlen_k, Hk, dv});
    }
    dout_ = HostTensor(c.dtype, out_shape());
    q_.fill_normal(rng);
    k_.fill_normal(rng);
    v_.fill_normal(rng);
    dout_.fill_normal(rng);
    if (c.key_ramp != 0.0f)
        for (int64_t b = 0; b < layout_.batch; ++b) {
            const int64_t rows = c.varlen() ? layout_.cu_seqlens_k[b + 1] - layout_.cu_seqlens_k[b] : c.seqlen_k;
            for (int64_t j = 0; j < rows; ++j)
                for (int64_t i = (layout_.k_begin(b) + j) * Hk * d; i < (layout_.k_begin(b) + j + 1) * Hk * d; ++i)
                    k_.set(i, k_.get(i) + double(c.key_ramp) * double(j));
        }
    if (c.nan_past_used) {
        if (!c.varlen() || c.seqused_k.empty()) throw std::invalid_argument("nan_past_used needs varlen with seqused_k");
        const double nan = std::numeric_limits<double>::quiet_NaN();
        for (size_t b = 0; b < c.seqused_k.size(); ++b)
            for (int64_t row = layout_.cu_seqlens_k[b] + c.seqused_k[b]; row < layout_.cu_seqlens_k[b + 1]; ++row) {
                for (int64_t i = row * Hk * d; i < (row + 1) * Hk * d; ++i) k_.set(i, nan);
                for (int64_t i = row * Hk * dv; i < (row + 1) * Hk * dv; ++i) v_.set(i, nan);
            }
    }
    if (c.alibi != Alibi::none) {
        slopes_ = c.alibi == Alibi::per_head ? HostTensor(DType::f32, {H}) : HostTensor(DType::f32, {layout_.batch, H});
        slopes_.fill_uniform(rng, 0.0, kAlibiSlopeMax);
    }
}

std::vector<int64_t> AttnProblem::out_shape() const {
    std::vector<int64_t> s = q_.shape();
    s.back() = c_.dv();
    return s;
}

AttentionOptions AttnProblem::options(const TensorView& slopes, bool deterministic) const {
    AttentionOptions o;
    o.softmax_scale = c_.softmax_scale;
    o.causal = c_.causal;
    o.window_left = c_.window_left;
    o.window_right = c_.window_right;
    o.softcap = c_.softcap;
    if (c_.alibi != Alibi::none) o.alibi_slopes = slopes;
    o.dropout_p = c_.dropout_p;
    o.seed = c_.seed;
    o.offset = c_.offset;
    o.deterministic = deterministic;
    return o;
}

ForwardResult AttnProblem::oracle_forward() const {
    HostTensor q = q_.to(DType::f32), k = k_.to(DType::f32), v = v_.to(DType::f32);
    HostTensor slopes = slopes_, cu_q = cu_seqlens_q_, cu_k = cu_seqlens_k_, used = seqused_k_;
    ForwardResult r;
    r.out = HostTensor(DType::f32, out_shape());
    r.lse = HostTensor(DType::f32, lse_shape());
    if (c_.attn_probs) r.probs = HostTensor(DType::f32, layout_.probs_shape(c_.nheads));
    const AttentionOptions opt = options(c_.alibi != Alibi::none ? slopes.view() : TensorView{});
    if (c_.varlen()) {
        VarlenForwardArgs a;
        a.q = q.view();
        a.k = k.view();
        a.v = v.view();
        a.cu_seqlens_q = cu_q.view();
        a.cu_seqlens_k = cu_k.view();
        if (!c_.seqused_k.empty()) a.seqused_k = used.view();
        a.max_seqlen_q = layout_.seqlen_q;
        a.max_seqlen_k = layout_.seqlen_k;
        a.out = r.out.view();
        a.softmax_lse = r.lse.view();
        if (c_.attn_probs) a.attn_probs = r.probs.view();
        a.options = opt;
        varlen_forward(a);
    } else {
        ForwardArgs a;
        a.q = q.view();
        a.k = k.view();
        a.v = v.view();
        a.out = r.out.view();
        a.softmax_lse = r.lse.view();
        if (c_.attn_probs) a.attn_probs = r.probs.view();
        a.options = opt;
        forward(a);
    }
    return r;
}

ForwardResult AttnProblem::lowp_forward() const {
    HostTensor slopes = slopes_;
    LowpForwardResult l = testing::lowp_forward(
        layout_, q_, k_, v_, options(c_.alibi != Alibi::none ? slopes.view() : TensorView{}), c_.attn_probs);
    return ForwardResult{std::move(l.out), std::move(l.lse), std::move(l.probs)};
}

ForwardResult AttnProblem::gpu_forward(void* stream) const {
    DeviceAttention d(*this, stream);
    d.prepare_forward();
    d.launch_forward();
    return d.collect_forward();
}

BackwardResult AttnProblem::oracle_backward(const ForwardResult& oracle_fwd) const {
    HostTensor q = q_.to(DType::f32), k = k_.to(DType::f32), v = v_.to(DType::f32), dout = dout_.to(DType::f32);
    HostTensor out = oracle_fwd.out.to(DType::f32), lse = oracle_fwd.lse;
    HostTensor slopes = slopes_, cu_q = cu_seqlens_q_, cu_k = cu_seqlens_k_, used = seqused_k_;
    BackwardResult r;
    r.dq = HostTensor(DType::f32, q.shape());
    r.dk = HostTensor(DType::f32, k.shape());
    r.dv = HostTensor(DType::f32, v.shape());
    r.softmax_d = HostTensor(DType::f32, lse_shape());
    const AttentionOptions opt = options(c_.alibi != Alibi::none ? slopes.view() : TensorView{});
    if (c_.varlen()) {
        VarlenBackwardArgs a;
        a.dout = dout.view();
        a.q = q.view();
        a.k = k.view();
        a.v = v.view();
        a.out = out.view();
        a.softmax_lse = lse.view();
        a.cu_seqlens_q = cu_q.view();
        a.cu_seqlens_k = cu_k.view();
        if (!c_.seqused_k.empty()) a.seqused_k = used.view();
        a.max_seqlen_q = layout_.seqlen_q;
        a.max_seqlen_k = layout_.seqlen_k;
        a.dq = r.dq.view();
        a.dk = r.dk.view();
        a.dv = r.dv.view();
        a.softmax_d = r.softmax_d.view();
        a.options = opt;
        varlen_backward(a);
    } else {
        BackwardArgs a;
        a.dout = dout.view();
        a.q = q.view();
        a.k = k.view();
        a.v = v.view();
        a.out = out.view();
        a.softmax_lse = lse.view();
        a.dq = r.dq.view();
        a.dk = r.dk.view();
        a.dv = r.dv.view();
        a.softmax_d = r.softmax_d.view();
        a.options = opt;
        backward(a);
    }
    return r;
}

BackwardResult AttnProblem::lowp_backward() const {
    HostTensor slopes = slopes_;
    LowpBackwardResult l = testing::lowp_backward(layout_, q_, k_, v_, dout_,
                                                  options(c_.alibi != Alibi::none ? slopes.view() : TensorView{}));
    return BackwardResult{std::move(l.dq), std::move(l.dk), std::move(l.dv), std::move(l.softmax_d)};
}

BackwardResult AttnProblem::gpu_backward(const ForwardResult& gpu_fwd, bool deterministic, void* stream) const {
    DeviceAttention d(*this, stream);
    d.prepare_backward(gpu_fwd, deterministic);
    d.launch_backward();
    return d.collect_backward();
}

// ----- DeviceAttention ---------------------------------------------------------------------------------------------

DeviceAttention::DeviceAttention(const AttnProblem& problem, void* stream)
    : p_(problem), c_(problem.c_), stream_(stream) {
    const int64_t H = c_.nheads, d = c_.head_dim;
    if (c_.packed_qkv) {
        const int64_t S = c_.seqlen_q, rows = c_.batch * S;
        qkv_ = DeviceTensor::upload(pack3(p_.q_, p_.k_, p_.v_, rows, H, d));
        const std::vector<int64_t> shape{c_.batch, S, H, d}, stride{S * 3 * H * d, 3 * H * d, d, 1};
        qv_ = qkv_.strided_view(0, shape, stride);
        kv_ = qkv_.strided_view(H * d, shape, stride);
        vv_ = qkv_.strided_view(2 * H * d, shape, stride);
    } else {
        q_ = DeviceTensor::upload(p_.q_);
        k_ = DeviceTensor::upload(p_.k_);
        v_ = DeviceTensor::upload(p_.v_);
        qv_ = q_.view();
        kv_ = k_.view();
        vv_ = v_.view();
    }
    if (c_.alibi != Alibi::none) slopes_ = DeviceTensor::upload(p_.slopes_);
    if (c_.varlen()) {
        cu_q_ = DeviceTensor::upload(p_.cu_seqlens_q_);
        cu_k_ = DeviceTensor::upload(p_.cu_seqlens_k_);
        if (!c_.seqused_k.empty()) used_k_ = DeviceTensor::upload(p_.seqused_k_);
    }
    cuda_sync_check("uploading the inputs");
}

void DeviceAttention::prepare_forward() {
    const int64_t H = c_.nheads, dv = c_.dv();
    if (c_.packed_qkv) {
        const int64_t S = c_.seqlen_q, width = dv + kOutPadding;
        out_ = DeviceTensor(c_.dtype, {c_.batch, S, H, width});
        outv_ = out_.strided_view(0, {c_.batch, S, H, dv}, {S * H * width, H * width, width, 1});
    } else {
        out_ = DeviceTensor(c_.dtype, p_.out_shape());
        outv_ = out_.view();
    }
    lse_ = DeviceTensor(DType::f32, p_.lse_shape());
    out_.poison(stream_);
    lse_.poison(stream_);
    if (c_.attn_probs) {
        probs_ = DeviceTensor(DType::f32, p_.layout_.probs_shape(H));
        probs_.poison(stream_);
    }
    const AttentionOptions opt = p_.options(c_.alibi != Alibi::none ? slopes_.view() : TensorView{});
    if (c_.varlen()) {
        vfwd_ = VarlenForwardArgs{};
        vfwd_.q = qv_;
        vfwd_.k = kv_;
        vfwd_.v = vv_;
        vfwd_.cu_seqlens_q = cu_q_.view();
        vfwd_.cu_seqlens_k = cu_k_.view();
        if (!c_.seqused_k.empty()) vfwd_.seqused_k = used_k_.view();
        vfwd_.max_seqlen_q = p_.layout_.seqlen_q;
        vfwd_.max_seqlen_k = p_.layout_.seqlen_k;
        vfwd_.out = outv_;
        vfwd_.softmax_lse = lse_.view();
        if (c_.attn_probs) vfwd_.attn_probs = probs_.view();
        vfwd_.options = opt;
        fwd_ws_ = make_workspace(vfwd_, stream_);
        vfwd_.ctx = fwd_ws_.ctx;
    } else {
        fwd_ = ForwardArgs{};
        fwd_.q = qv_;
        fwd_.k = kv_;
        fwd_.v = vv_;
        fwd_.out = outv_;
        fwd_.softmax_lse = lse_.view();
        if (c_.attn_probs) fwd_.attn_probs = probs_.view();
        fwd_.options = opt;
        if (c_.no_workspace)
            fwd_ws_.ctx.stream = stream_;
        else
            fwd_ws_ = make_workspace(fwd_, stream_);
        fwd_.ctx = fwd_ws_.ctx;
    }
}

void DeviceAttention::launch_forward() {
    if (c_.varlen())
        varlen_forward(vfwd_);
    else
        forward(fwd_);
}

ForwardResult DeviceAttention::collect_forward() {
    cuda_stream_sync(stream_, "flashattn forward");
    ForwardResult r;
    HostTensor out_storage = out_.download(stream_);
    r.lse = lse_.download(stream_);
    if (c_.attn_probs) r.probs = probs_.download(stream_);
    cuda_stream_sync(stream_, "downloading the forward's outputs");
    cuda_sync_check("flashattn forward");
    if (c_.packed_qkv) {
        // The view's elements, and the padding after each row left as poisoned.
        const int64_t dv = c_.dv(), width = dv + kOutPadding;
        r.out = HostTensor(c_.dtype, p_.out_shape());
        const int64_t rows = out_storage.numel() / width;
        const size_t elem = dtype_size(c_.dtype);
        int64_t touched = 0;
        for (int64_t row = 0; row < rows; ++row) {
            for (int64_t x = 0; x < dv; ++x) r.out.set(row * dv + x, out_storage.get(row * width + x));
            const auto* pad = static_cast<const unsigned char*>(out_storage.data()) + (row * width + dv) * elem;
            for (size_t byte = 0; byte < kOutPadding * elem; ++byte) touched += pad[byte] != kPoisonByte;
        }
        EXPECT_EQ(touched, 0) << "out: the kernel wrote " << touched
                              << " bytes outside the strided view (into the padding between rows)";
    } else {
        r.out = std::move(out_storage);
    }
    expect_written("out", r.out);
    expect_written("softmax_lse", r.lse);
    if (c_.attn_probs) expect_written("attn_probs", valid_probs(r.probs, p_));
    return r;
}

void DeviceAttention::prepare_backward(const ForwardResult& fwd, bool deterministic) {
    const int64_t H = c_.nheads, d = c_.head_dim;
    dout_ = DeviceTensor::upload(p_.dout_);
    fwd_out_ = DeviceTensor::upload(fwd.out);
    fwd_lse_ = DeviceTensor::upload(fwd.lse);
    cuda_sync_check("uploading dout, out and softmax_lse");
    if (c_.packed_qkv) {
        const int64_t S = c_.seqlen_q;
        dqkv_ = DeviceTensor(c_.dtype, {c_.batch * S, 3, H, d});
        dqkv_.poison(stream_);
        const std::vector<int64_t> shape{c_.batch, S, H, d}, stride{S * 3 * H * d, 3 * H * d, d, 1};
        dqv_ = dqkv_.strided_view(0, shape, stride);
        dkv_ = dqkv_.strided_view(H * d, shape, stride);
        dvv_ = dqkv_.strided_view(2 * H * d, shape, stride);
    } else {
        dq_ = DeviceTensor(c_.dtype, p_.q_.shape());
        dk_ = DeviceTensor(c_.dtype, p_.k_.shape());
        dv_ = DeviceTensor(c_.dtype, p_.v_.shape());
        dq_.poison(stream_);
        dk_.poison(stream_);
        dv_.poison(stream_);
        dqv_ = dq_.view();
        dkv_ = dk_.view();
        dvv_ = dv_.view();
    }
    softmax_d_ = DeviceTensor(DType::f32, p_.lse_shape());
    softmax_d_.poison(stream_);
    const AttentionOptions opt = p_.options(c_.alibi != Alibi::none ? slopes_.view() : TensorView{}, deterministic);
    if (c_.varlen()) {
        vbwd_ = VarlenBackwardArgs{};
        vbwd_.dout = dout_.view();
        vbwd_.q = qv_;
        vbwd_.k = kv_;
        vbwd_.v = vv_;
        vbwd_.out = fwd_out_.view();
        vbwd_.softmax_lse = fwd_lse_.view();
        vbwd_.cu_seqlens_q = cu_q_.view();
        vbwd_.cu_seqlens_k = cu_k_.view();
        if (!c_.seqused_k.empty()) vbwd_.seqused_k = used_k_.view();
        vbwd_.max_seqlen_q = p_.layout_.seqlen_q;
        vbwd_.max_seqlen_k = p_.layout_.seqlen_k;
        vbwd_.dq = dqv_;
        vbwd_.dk = dkv_;
        vbwd_.dv = dvv_;
        vbwd_.softmax_d = softmax_d_.view();
        vbwd_.options = opt;
        bwd_ws_ = make_workspace(vbwd_, stream_);
        vbwd_.ctx = bwd_ws_.ctx;
    } else {
        bwd_ = BackwardArgs{};
        bwd_.dout = dout_.view();
        bwd_.q = qv_;
        bwd_.k = kv_;
        bwd_.v = vv_;
        bwd_.out = fwd_out_.view();
        bwd_.softmax_lse = fwd_lse_.view();
        bwd_.dq = dqv_;
        bwd_.dk = dkv_;
        bwd_.dv = dvv_;
        bwd_.softmax_d = softmax_d_.view();
        bwd_.options = opt;
        bwd_ws_ = make_workspace(bwd_, stream_);
        bwd_.ctx = bwd_ws_.ctx;
    }
}

void DeviceAttention::launch_backward() {
    if (c_.varlen())
        varlen_backward(vbwd_);
    else
        backward(bwd_);
}

BackwardResult DeviceAttention::collect_backward() {
    cuda_stream_sync(stream_, "flashattn backward");
    BackwardResult r;
    if (c_.packed_qkv) {
        const HostTensor packed = dqkv_.download(stream_);
        r.dq = unpack3(packed, 0, p_.q_.shape());
        r.dk = unpack3(packed, 1, p_.k_.shape());
        r.dv = unpack3(packed, 2, p_.v_.shape());
    } else {
        r.dq = dq_.download(stream_);
        r.dk = dk_.download(stream_);
        r.dv = dv_.download(stream_);
    }
    r.softmax_d = softmax_d_.download(stream_);
    cuda_stream_sync(stream_, "downloading the backward's outputs");
    cuda_sync_check("flashattn backward");
    expect_written("dq", r.dq);
    expect_written("dk", r.dk);
    expect_written("dv", r.dv);
    expect_written("softmax_d", r.softmax_d);
    return r;
}

// ----- checks ------------------------------------------------------------------------------------------------------

void expect_within_rule(const std::string& what, const HostTensor& gpu, const HostTensor& lowp,
                        const HostTensor& oracle) {
    ASSERT_EQ(gpu.numel(), oracle.numel()) << what;
    ASSERT_EQ(lowp.numel(), oracle.numel()) << what;
    const NanCount oracle_nan = count_nan(oracle);
    EXPECT_EQ(oracle_nan.count, 0) << what << ": the CPU reference (fp32 oracle) produced " << oracle_nan.count
                                   << " NaN, first at flat index " << oracle_nan.first;
    const ErrorStats g = compare(gpu, oracle);
    const ErrorStats l = compare(lowp, oracle);
    EXPECT_EQ(l.nonfinite, 0) << what << ": the " << dtype_name(lowp.dtype())
                              << " baseline and the CPU reference disagree on which elements are finite ("
                              << l.str() << "): one of the two is wrong";
    EXPECT_TRUE(within_tolerance(g, l)) << what << ": GPU error against the fp32 oracle " << g.str()
                                        << " exceeds 2x the " << dtype_name(lowp.dtype()) << " baseline's error "
                                        << l.str() << " + " << kAbsoluteSlack;
}

HostTensor valid_probs(const HostTensor& probs, const AttnProblem& p) {
    const SeqLayout& l = p.layout();
    if (!l.varlen) return probs;
    const int64_t H = p.spec().nheads;
    int64_t n = 0;
    for (int64_t b = 0; b < l.batch; ++b) n += H * l.q_len(b) * l.k_len(b);
    HostTensor r(DType::f32, {n});
    int64_t at = 0;
    for (int64_t b = 0; b < l.batch; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < l.q_len(b); ++i)
                for (int64_t j = 0; j < l.k_len(b); ++j) r.set(at++, probs.get(l.probs_index(b, h, i, j, H)));
    return r;
}

namespace {

void expect_forward_rule(const AttnCase& c, const AttnProblem& p, const ForwardResult& gpu, const ForwardResult& lowp,
                         const ForwardResult& oracle) {
    expect_within_rule("out", gpu.out, lowp.out, oracle.out);
    expect_within_rule("softmax_lse", gpu.lse, lowp.lse, oracle.lse);
    if (c.attn_probs)
        expect_within_rule("attn_probs", valid_probs(gpu.probs, p), valid_probs(lowp.probs, p),
                           valid_probs(oracle.probs, p));
}

void expect_backward_rule(const BackwardResult& gpu, const BackwardResult& lowp, const BackwardResult& oracle) {
    expect_within_rule("dq", gpu.dq, lowp.dq, oracle.dq);
    expect_within_rule("dk", gpu.dk, lowp.dk, oracle.dk);
    expect_within_rule("dv", gpu.dv, lowp.dv, oracle.dv);
    expect_within_rule("softmax_d", gpu.softmax_d, lowp.softmax_d, oracle.softmax_d);
}

int64_t count_bit_differences(const HostTensor& a, const HostTensor& b) {
    if (a.nbytes() != b.nbytes()) return std::max(a.numel(), b.numel());
    const size_t elem = dtype_size(a.dtype());
    const auto* x = static_cast<const unsigned char*>(a.data());
    const auto* y = static_cast<const unsigned char*>(b.data());
    int64_t n = 0;
    for (int64_t i = 0; i < a.numel(); ++i) n += std::memcmp(x + i * elem, y + i * elem, elem) != 0;
    return n;
}

}  // namespace

void check_forward(const AttnCase& c) {
    const AttnProblem p(c);
    const ForwardResult gpu = p.gpu_forward();
    const ForwardResult oracle = p.oracle_forward();
    const ForwardResult lowp = p.lowp_forward();
    expect_forward_rule(c, p, gpu, lowp, oracle);
}

void check_backward(const AttnCase& c) {
    const AttnProblem p(c);
    const ForwardResult gpu_fwd = p.gpu_forward();
    const BackwardResult gpu = p.gpu_backward(gpu_fwd);
    const ForwardResult oracle_fwd = p.oracle_forward();
    const ForwardResult lowp_fwd = p.lowp_forward();
    expect_forward_rule(c, p, gpu_fwd, lowp_fwd, oracle_fwd);
    const BackwardResult oracle = p.oracle_backward(oracle_fwd);
    const BackwardResult lowp = p.lowp_backward();
    expect_backward_rule(gpu, lowp, oracle);
}

void check_deterministic(const AttnCase& c) {
    const AttnProblem p(c);
    const ForwardResult gpu_fwd = p.gpu_forward();
    const BackwardResult first = p.gpu_backward(gpu_fwd, /*deterministic=*/true);
    const BackwardResult second = p.gpu_backward(gpu_fwd, /*deterministic=*/true);
    EXPECT_EQ(count_bit_differences(first.dq, second.dq), 0) << "dq differs between two deterministic runs";
    EXPECT_EQ(count_bit_differences(first.dk, second.dk), 0) << "dk differs between two deterministic runs";
    EXPECT_EQ(count_bit_differences(first.dv, second.dv), 0) << "dv differs between two deterministic runs";
    EXPECT_EQ(count_bit_differences(first.softmax_d, second.softmax_d), 0)
        << "softmax_d differs between two deterministic runs";
    const ForwardResult oracle_fwd = p.oracle_forward();
    expect_backward_rule(first, p.lowp_backward(), p.oracle_backward(oracle_fwd));
}

void check_dropout_pattern(const AttnCase& c) {
    ASSERT_TRUE(c.attn_probs && c.dropout_p > 0.0f) << "a dropout pattern case needs attn_probs and dropout_p > 0";
    const AttnProblem p(c);
    const ForwardResult gpu = p.gpu_forward();
    const ForwardResult oracle = p.oracle_forward();
    const ForwardResult lowp = p.lowp_forward();
    expect_forward_rule(c, p, gpu, lowp, oracle);

    const SeqLayout& l = p.layout();
    const int64_t H = c.nheads;
    const ResolvedOptions o = ResolvedOptions::from(p.options(TensorView{}), c.head_dim, l.batch, H);
    int64_t kept = 0, dropped = 0, gpu_mismatch = 0, oracle_mismatch = 0;
    std::string first_gpu_mismatch, first_oracle_mismatch;
    for (int64_t b = 0; b < l.batch; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < l.q_len(b); ++i) {
                const KeyRange kr = visible_keys(i, l.q_len(b), l.k_len(b), o.window_left, o.window_right);
                for (int64_t j = kr.begin; j < kr.end; ++j) {
                    const int64_t at = l.probs_index(b, h, i, j, H);
                    const double ref = oracle.probs.get(at), got = gpu.probs.get(at);
                    if (ref == 0.0) continue;  // a probability that underflowed carries no sign
                    const bool keep =
                        dropout_keep(o.seed, o.offset, static_cast<uint32_t>(b * H + h), static_cast<uint32_t>(i),
                                     static_cast<uint32_t>(j), o.keep_threshold);
                    (keep ? kept : dropped) += 1;
                    std::ostringstream where;
                    where << "(b=" << b << ", h=" << h << ", i=" << i << ", j=" << j << ")";
                    if (std::signbit(ref) == keep && oracle_mismatch++ == 0) first_oracle_mismatch = where.str();
                    if ((got == 0.0 || std::signbit(got) != std::signbit(ref)) && gpu_mismatch++ == 0)
                        first_gpu_mismatch = where.str() + " oracle " + std::to_string(ref) + ", GPU " +
                                             std::to_string(got);
                }
            }
    EXPECT_GT(dropped, 0) << "no element was dropped: the case does not exercise dropout";
    EXPECT_GT(kept, 0) << "every element was dropped";
    EXPECT_EQ(oracle_mismatch, 0) << "the CPU reference's attn_probs signs disagree with common/philox.h in "
                                  << oracle_mismatch << " elements, first at " << first_oracle_mismatch;
    EXPECT_EQ(gpu_mismatch, 0) << "the GPU's kept/dropped pattern differs from the CPU reference's in " << gpu_mismatch
                               << " of " << kept + dropped << " elements, first at " << first_gpu_mismatch;
}

void check_masked_rows(const AttnCase& c) {
    const AttnProblem p(c);
    const ForwardResult gpu = p.gpu_forward();
    const ForwardResult oracle = p.oracle_forward();
    const ForwardResult lowp = p.lowp_forward();
    expect_forward_rule(c, p, gpu, lowp, oracle);

    const SeqLayout& l = p.layout();
    const int64_t H = c.nheads, dv = c.dv();
    int64_t masked = 0, lse_wrong = 0, out_wrong = 0;
    std::string first_lse_wrong, first_out_wrong;
    for (int64_t b = 0; b < l.batch; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < l.q_len(b); ++i) {
                const int64_t at = l.lse_index(b, h, i, H);
                const double ref = oracle.lse.get(at), got = gpu.lse.get(at);
                if (ref != kInf) {
                    if (std::isinf(got) && lse_wrong++ == 0)
                        first_lse_wrong = "row (b=" + std::to_string(b) + ", h=" + std::to_string(h) +
                                          ", i=" + std::to_string(i) + ") has keys but GPU lse " + std::to_string(got);
                    continue;
                }
                ++masked;
                if (got != kInf && lse_wrong++ == 0)
                    first_lse_wrong = "row (b=" + std::to_string(b) + ", h=" + std::to_string(h) +
                                      ", i=" + std::to_string(i) + ") sees no key but GPU lse " + std::to_string(got);
                const int64_t row = (l.q_begin(b) + i) * H + h;
                for (int64_t x = 0; x < dv; ++x)
                    if (gpu.out.get(row * dv + x) != 0.0 && out_wrong++ == 0)
                        first_out_wrong = "row (b=" + std::to_string(b) + ", h=" + std::to_string(h) +
                                          ", i=" + std::to_string(i) + ") out[" + std::to_string(x) +
                                          "] = " + std::to_string(gpu.out.get(row * dv + x));
            }
    EXPECT_GT(masked, 0) << "the case has no row that sees no key";
    EXPECT_EQ(lse_wrong, 0) << lse_wrong << " rows with the wrong +inf / finite lse; first: " << first_lse_wrong;
    EXPECT_EQ(out_wrong, 0) << out_wrong << " nonzero out elements in rows that see no key; first: "
                            << first_out_wrong;
}

// ----- registration ------------------------------------------------------------------------------------------------

void register_cases(const std::string& suite, const std::string& group, const std::vector<AttnCase>& cases,
                    const std::function<void(const AttnCase&)>& body, const char* file, int line) {
    static std::map<std::string, std::set<std::string>> names;  // per suite
    for (const AttnCase& c : cases) {
        const std::string name = group + "/" + c.label();
        if (!names[suite].insert(name).second)
            throw std::logic_error("duplicate GPU test " + suite + "." + name + ": give one of the cases a tag");
        ::testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, nullptr, file, line,
                                [c, body]() -> CaseTest* { return new CaseTest(c, body); });
    }
}

}  // namespace flashattn::testing
