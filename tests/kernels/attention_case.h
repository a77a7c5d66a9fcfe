// One attention test case and the three ways of computing it that the GPU tests compare:
//   oracle - the public API on float32 CPU tensors holding the same (fp16/bf16-rounded) input values;
//   lowp   - the straightforward same-precision implementation (lowp_attention.h), the error baseline;
//   GPU    - the public API on CUDA tensors, outputs poisoned (NaN) beforehand and checked fully written.
// The rule: the GPU's error against the oracle is at most 2x the lowp error against it, plus 1e-5 (within_tolerance).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "kernels/gpu_test_util.h"
#include "kernels/lowp_attention.h"
#include "support/host_tensor.h"

namespace flashattn::testing {

enum class Alibi { none, per_head, per_batch_head };

constexpr int32_t kUnbounded = -1;  // a window side without a bound

struct AttnCase {
    DType dtype = DType::f16;
    int64_t batch = 2;
    int64_t seqlen_q = 128, seqlen_k = 128;  // padded layout (ignored when varlen)
    int64_t nheads = 4, nheads_k = 4;
    int64_t head_dim = 64;
    int64_t head_dim_v = 0;  // 0: head_dim
    // Varlen when seqlens_q is not empty: one length per sequence; seqused_k optional.
    std::vector<int32_t> seqlens_q, seqlens_k, seqused_k;
    float softmax_scale = kDefaultSoftmaxScale;  // NaN: 1 / sqrt(head_dim)
    bool causal = false;
    int32_t window_left = kUnbounded, window_right = kUnbounded;
    float softcap = 0.0f;
    Alibi alibi = Alibi::none;
    float dropout_p = 0.0f;
    uint64_t seed = 0x5EED, offset = 0;
    // q, k, v as slices of one packed (batch * seqlen, 3, nheads, d) tensor, out written into a wider buffer,
    // dq, dk, dv into a packed one: padded layout, seqlen_q == seqlen_k, nheads_k == nheads, head_dim_v == head_dim.
    bool packed_qkv = false;
    bool attn_probs = false;  // also compute and compare attn_probs (small sizes only)
    // Varlen with seqused_k: the k/v rows each sequence holds past its seqused_k are NaN. No result may depend on
    // them (an unfilled cache region), so every output must stay finite.
    bool nan_past_used = false;
    // Added to every element of each key row: key_ramp x the row's position in its sequence. Scores then rise (or
    // fall, by the sign of the query row's sum) along the keys, a row's maximum growing at every key tile.
    float key_ramp = 0.0f;
    // The forward without the workspace workspace_size() asks for (the packed forward then runs unsplit).
    bool no_workspace = false;
    std::string tag;          // appended to the label, to tell apart cases that differ in what the label omits

    bool varlen() const { return !seqlens_q.empty(); }
    int64_t dv() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
    SeqLayout layout() const;
    // A readable, unique-per-configuration name: dtype, sizes and features.
    std::string label() const;
    // Visible (row, key) pairs over all batches and heads: the O(N^2) work of one forward.
    int64_t visible_pairs() const;
};

// Outputs of a forward / backward, from any of the three implementations.
struct ForwardResult {
    HostTensor out, lse, probs;
};
struct BackwardResult {
    HostTensor dq, dk, dv, softmax_d;
};

// The inputs of one case (random normal values rounded to the dtype, seeded by the label) and the three ways of
// computing it.
class AttnProblem {
  public:
    explicit AttnProblem(const AttnCase& c);

    const AttnCase& spec() const { return c_; }
    const SeqLayout& layout() const { return layout_; }

    ForwardResult oracle_forward() const;
    ForwardResult lowp_forward() const;
    // Runs on `stream` (nullptr: the default stream); fails the test where an output was left unwritten.
    ForwardResult gpu_forward(void* stream = nullptr) const;

    // The oracle's backward takes the oracle's forward (fp32 out and lse); the GPU's takes the GPU's.
    BackwardResult oracle_backward(const ForwardResult& oracle_fwd) const;
    BackwardResult lowp_backward() const;
    BackwardResult gpu_backward(const ForwardResult& gpu_fwd, bool deterministic = false,
                                void* stream = nullptr) const;

    // Shapes of the outputs.
    std::vector<int64_t> out_shape() const;
    std::vector<int64_t> lse_shape() const { return layout_.lse_shape(c_.nheads); }

    // The case's options with the given slopes tensor (CPU or CUDA) and determinism.
    AttentionOptions options(const TensorView& slopes, bool deterministic = false) const;

    const HostTensor& q() const { return q_; }
    const HostTensor& k() const { return k_; }
    const HostTensor& v() const { return v_; }
    const HostTensor& dout() const { return dout_; }

  private:
    friend class DeviceAttention;
    AttnCase c_;
    SeqLayout layout_;
    HostTensor q_, k_, v_, dout_, slopes_;
    HostTensor cu_seqlens_q_, cu_seqlens_k_, seqused_k_;  // i32, varlen
};

// The GPU side of one problem: device copies of the inputs, poisoned outputs, the argument structs. Split into
// steps so that a test can run the call on its own stream or inside a CUDA graph capture.
class DeviceAttention {
  public:
    DeviceAttention(const AttnProblem& problem, void* stream);
    // Forward: allocate and poison outputs (and workspace), build the arguments.
    void prepare_forward();
    void launch_forward();
    ForwardResult collect_forward();  // waits for the stream, downloads, checks everything was written
    // Backward from a forward's out and lse (uploaded).
    void prepare_backward(const ForwardResult& fwd, bool deterministic);
    void launch_backward();
    BackwardResult collect_backward();

  private:
    const AttnProblem& p_;
    const AttnCase& c_;
    void* stream_;
    DeviceTensor qkv_, q_, k_, v_, slopes_, cu_q_, cu_k_, used_k_;
    TensorView qv_, kv_, vv_;
    DeviceTensor out_, lse_, probs_;
    DeviceTensor dout_, fwd_out_, fwd_lse_, dqkv_, dq_, dk_, dv_, softmax_d_;
    TensorView outv_, dqv_, dkv_, dvv_;
    ForwardArgs fwd_;
    VarlenForwardArgs vfwd_;
    BackwardArgs bwd_;
    VarlenBackwardArgs vbwd_;
    Workspace fwd_ws_, bwd_ws_;
};

// EXPECTs `gpu` within the rule (2x the lowp error against the oracle + 1e-5); also that the baseline agrees with
// the oracle on which elements are finite (else the test itself, or the CPU reference, is wrong).
void expect_within_rule(const std::string& what, const HostTensor& gpu, const HostTensor& lowp,
                        const HostTensor& oracle);
// The elements of attn_probs inside the sequences (varlen: each sequence's seqlen_q x seqlen_k block), flattened.
HostTensor valid_probs(const HostTensor& probs, const AttnProblem& p);

// Whole checks, used as test bodies.
void check_forward(const AttnCase& c);          // out, lse (and attn_probs when asked) by the rule
void check_backward(const AttnCase& c);         // forward as above, then dq, dk, dv and softmax_d by the rule
void check_deterministic(const AttnCase& c);    // backward twice with deterministic = true: identical bits
void check_dropout_pattern(const AttnCase& c);  // GPU kept/dropped pattern == CPU's, and the rule for outputs
void check_masked_rows(const AttnCase& c);      // rows seeing no key: out exactly 0, lse exactly +inf

// Registers one test per case as `suite`.`group`/<label>, running `body`; labels must be unique in a suite.
void register_cases(const std::string& suite, const std::string& group, const std::vector<AttnCase>& cases,
                    const std::function<void(const AttnCase&)>& body, const char* file, int line);

}  // namespace flashattn::testing
