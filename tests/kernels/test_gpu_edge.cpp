// Degenerate sizes (batch 0, seqlen_q 0, seqlen_k 0, a varlen batch without queries) and execution on a stream
// other than the default one, including inside a CUDA graph capture.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/attention_case.h"
#include "kernels/gpu_test_util.h"
#include "kernels/test_cases.h"

namespace flashattn::testing {
namespace {

constexpr int64_t kSeqLen = 64;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Elements of `t` that are not exactly `value`.
int64_t count_not_equal(const HostTensor& t, double value) {
    int64_t n = 0;
    for (int64_t i = 0; i < t.numel(); ++i) n += t.get(i) != value;
    return n;
}

class GpuEdgeCases : public GpuTest {};

TEST_F(GpuEdgeCases, BatchZero) {
    const AttnProblem p(AttnCase{.dtype = kF16, .batch = 0, .seqlen_q = kSeqLen, .seqlen_k = kSeqLen, .causal = true});
    const ForwardResult fwd = p.gpu_forward();
    EXPECT_EQ(fwd.out.numel(), 0);
    const BackwardResult bwd = p.gpu_backward(fwd);
    EXPECT_EQ(bwd.dq.numel(), 0);
}

TEST_F(GpuEdgeCases, SeqlenQZero) {
    const AttnProblem p(AttnCase{.dtype = kBF16, .seqlen_q = 0, .seqlen_k = kSeqLen, .head_dim = 128});
    const ForwardResult fwd = p.gpu_forward();
    EXPECT_EQ(fwd.out.numel(), 0);
    // No query: the keys and values get no gradient.
    const BackwardResult bwd = p.gpu_backward(fwd);
    EXPECT_EQ(count_not_equal(bwd.dk, 0.0), 0) << "dk must be 0 when there is no query";
    EXPECT_EQ(count_not_equal(bwd.dv, 0.0), 0) << "dv must be 0 when there is no query";
}

TEST_F(GpuEdgeCases, SeqlenKZero) {
    const AttnProblem p(AttnCase{.dtype = kF16, .seqlen_q = kSeqLen, .seqlen_k = 0, .nheads = 4, .nheads_k = 2});
    const ForwardResult fwd = p.gpu_forward();
    EXPECT_EQ(count_not_equal(fwd.out, 0.0), 0) << "out must be 0 where there is no key";
    EXPECT_EQ(count_not_equal(fwd.lse, kInf), 0) << "softmax_lse must be +inf where there is no key";
    const BackwardResult bwd = p.gpu_backward(fwd);
    EXPECT_EQ(count_not_equal(bwd.dq, 0.0), 0) << "dq must be 0 where there is no key";
    EXPECT_EQ(count_not_equal(bwd.softmax_d, 0.0), 0) << "softmax_d = rowsum(dout * out) must be 0 where out is 0";
}

TEST_F(GpuEdgeCases, VarlenWithoutQueries) {
    const AttnProblem p(AttnCase{.dtype = kBF16, .seqlens_q = {0, 0, 0}, .seqlens_k = {3, 0, 17}});
    const ForwardResult fwd = p.gpu_forward();
    EXPECT_EQ(fwd.out.numel(), 0);
    const BackwardResult bwd = p.gpu_backward(fwd);
    EXPECT_EQ(count_not_equal(bwd.dk, 0.0), 0) << "dk must be 0 when there is no query";
    EXPECT_EQ(count_not_equal(bwd.dv, 0.0), 0) << "dv must be 0 when there is no query";
}

// ----- streams -----------------------------------------------------------------------------------------------------

class GpuStream : public GpuTest {
  protected:
    // Forward and backward of `c` on `stream`, both checked by the rule.
    static void check_on_stream(const AttnCase& c, void* stream) {
        const AttnProblem p(c);
        const ForwardResult gpu_fwd = p.gpu_forward(stream);
        const BackwardResult gpu_bwd = p.gpu_backward(gpu_fwd, /*deterministic=*/false, stream);
        const ForwardResult oracle_fwd = p.oracle_forward();
        const ForwardResult lowp_fwd = p.lowp_forward();
        expect_within_rule("out", gpu_fwd.out, lowp_fwd.out, oracle_fwd.out);
        expect_within_rule("softmax_lse", gpu_fwd.lse, lowp_fwd.lse, oracle_fwd.lse);
        const BackwardResult oracle_bwd = p.oracle_backward(oracle_fwd);
        const BackwardResult lowp_bwd = p.lowp_backward();
        expect_within_rule("dq", gpu_bwd.dq, lowp_bwd.dq, oracle_bwd.dq);
        expect_within_rule("dk", gpu_bwd.dk, lowp_bwd.dk, oracle_bwd.dk);
        expect_within_rule("dv", gpu_bwd.dv, lowp_bwd.dv, oracle_bwd.dv);
    }
};

// A stream from cudaStreamCreate: outputs are poisoned, computed and read back in that stream's order.
TEST_F(GpuStream, CreatedStream) {
    const CudaStream stream;
    check_on_stream({.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .causal = true,
                     .dropout_p = 0.1f},
                    stream.get());
}

// A non-blocking stream does not wait for the legacy default stream: work the library sent there instead of to
// ctx.stream would race with the poisoning and the read-back, both ordered on this stream only.
TEST_F(GpuStream, NonBlockingStreamVarlen) {
    const CudaStream stream(/*non_blocking=*/true);
    check_on_stream({.dtype = kBF16, .nheads = 4, .nheads_k = 2, .head_dim = 128, .seqlens_q = kRaggedQ,
                     .seqlens_k = kRaggedK, .causal = true},
                    stream.get());
}

// Forward and backward captured into a CUDA graph on the stream: any work the library sends to another stream, or
// a synchronising call it makes, fails the capture.
TEST_F(GpuStream, CudaGraphCapture) {
    const CudaStream stream(/*non_blocking=*/true);
    const AttnProblem p(AttnCase{.dtype = kF16, .seqlen_q = 113, .seqlen_k = 512, .nheads = 4, .nheads_k = 1,
                                 .head_dim = 128, .window_left = 64, .alibi = Alibi::per_head});
    DeviceAttention device(p, stream.get());
    device.prepare_forward();
    capture_and_replay(stream.get(), [&] { device.launch_forward(); });
    const ForwardResult gpu_fwd = device.collect_forward();
    device.prepare_backward(gpu_fwd, /*deterministic=*/false);
    capture_and_replay(stream.get(), [&] { device.launch_backward(); });
    const BackwardResult gpu_bwd = device.collect_backward();

    const ForwardResult oracle_fwd = p.oracle_forward();
    const ForwardResult lowp_fwd = p.lowp_forward();
    expect_within_rule("out", gpu_fwd.out, lowp_fwd.out, oracle_fwd.out);
    expect_within_rule("softmax_lse", gpu_fwd.lse, lowp_fwd.lse, oracle_fwd.lse);
    const BackwardResult oracle_bwd = p.oracle_backward(oracle_fwd);
    const BackwardResult lowp_bwd = p.lowp_backward();
    expect_within_rule("dq", gpu_bwd.dq, lowp_bwd.dq, oracle_bwd.dq);
    expect_within_rule("dk", gpu_bwd.dk, lowp_bwd.dk, oracle_bwd.dk);
    expect_within_rule("dv", gpu_bwd.dv, lowp_bwd.dv, oracle_bwd.dv);
}

}  // namespace
}  // namespace flashattn::testing
