// flashattn: exact, fused, IO-aware attention.
//
// The public C++ API. Every operation takes one argument struct of non-owning tensor views; the caller owns all
// memory (outputs included), passes the CUDA stream and, for GPU calls, a workspace of the size that
// workspace_size() reports. Tensors on the CPU are computed by the reference implementation (exact, slow);
// tensors on a CUDA device by the GPU kernels.
//
// Layouts follow FlashAttention:
//   q            (batch, seqlen_q, nheads,   head_dim)       varlen: (total_q, nheads,   head_dim)
//   k            (batch, seqlen_k, nheads_k, head_dim)       varlen: (total_k, nheads_k, head_dim)
//   v            (batch, seqlen_k, nheads_k, head_dim_v)     varlen: (total_k, nheads_k, head_dim_v)
//   out          (batch, seqlen_q, nheads,   head_dim_v)     varlen: (total_q, nheads,   head_dim_v)
//   softmax_lse  (batch, nheads, seqlen_q) fp32              varlen: (nheads, total_q) fp32
// with nheads % nheads_k == 0 (MQA/GQA) and the last dimension contiguous. Strides are counted in elements.
//
// Masks: causal is aligned to the bottom-right corner of the (seqlen_q, seqlen_k) score matrix, as in
// FlashAttention >= 2.1: query row i may see key column j iff j <= i + seqlen_k - seqlen_q. A sliding window
// (window_left, window_right) allows j in [i + seqlen_k - seqlen_q - window_left, i + seqlen_k - seqlen_q +
// window_right]; -1 leaves that side unbounded; causal is window_right = 0.
//
// A query row that sees no key at all (possible with windows, or seqlen_k = 0) gets output 0 and
// softmax_lse = +inf, so that a backward's exp(s - lse) is 0 there (FlashAttention's convention).
//
// Errors throw flashattn::Error naming the argument, what was expected and what was given. Every argument is
// checked before anything runs; on error nothing is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>

#if defined(_WIN32)
#define FLASHATTN_API __declspec(dllexport)
#else
#define FLASHATTN_API __attribute__((visibility("default")))
#endif

namespace flashattn {

// ---------------------------------------------------------------------------------------------------------------
// Tensors
// ---------------------------------------------------------------------------------------------------------------

// Element types. f32 and f64 inputs are accepted on the CPU only (the reference path); i32 is for index tensors.
enum class DType : int32_t { f16 = 0, bf16 = 1, f32 = 2, f64 = 3, i32 = 4 };

enum class DeviceType : int32_t { cpu = 0, cuda = 1 };

constexpr int kMaxDims = 4;

// A non-owning view of a strided tensor. ndim == 0 means "absent" (an optional argument not given).
struct TensorView {
    void* data = nullptr;
    DType dtype = DType::f32;
    DeviceType device = DeviceType::cpu;
    int32_t device_index = 0;
    int32_t ndim = 0;
    int64_t shape[kMaxDims] = {};
    int64_t stride[kMaxDims] = {};  // in elements

    bool present() const { return ndim > 0; }
    int64_t size(int dim) const { return shape[dim]; }
    FLASHATTN_API int64_t numel() const;
};

// A contiguous (row-major) view over `data`.
FLASHATTN_API TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                   DeviceType device = DeviceType::cpu, int32_t device_index = 0);
// A view with explicit strides (in elements).
FLASHATTN_API TensorView make_strided_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                           std::initializer_list<int64_t> stride,
                                           DeviceType device = DeviceType::cpu, int32_t device_index = 0);

FLASHATTN_API const char* dtype_name(DType dtype);
FLASHATTN_API size_t dtype_size(DType dtype);

// ---------------------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------------------

enum class Status : int32_t {
    ok = 0,
    invalid_argument = 1,  // a bad input; the message names it
    unsupported = 2,       // valid, but not available in this build or on this device
    cuda_error = 3,        // the CUDA runtime reported an error
    internal = 4,          // a bug in flashattn
};

class FLASHATTN_API Error : public std::runtime_error {
  public:
    Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
    Status status() const { return status_; }

  private:
    Status status_;
};

// ---------------------------------------------------------------------------------------------------------------
// Options shared by every operation
// ---------------------------------------------------------------------------------------------------------------

// softmax_scale's default, NaN: 1 / sqrt(head_dim of q). Any other value is the scale itself, as in FlashAttention
// (0 gives every visible key the same weight).
inline constexpr float kDefaultSoftmaxScale = std::numeric_limits<float>::quiet_NaN();

struct AttentionOptions {
    float softmax_scale = kDefaultSoftmaxScale;  // NaN: 1 / sqrt(head_dim of q); else finite and >= 0
    bool causal = false;         // bottom-right aligned
    int32_t window_left = -1;    // -1: unbounded
    int32_t window_right = -1;   // -1: unbounded (0 when causal)
    float softcap = 0.0f;        // > 0: scores become softcap * tanh(scores / softcap)
    TensorView alibi_slopes;     // optional fp32 (nheads) or (batch, nheads); bias = -slope * |i + sk - sq - j|
    float dropout_p = 0.0f;      // probability of dropping; in [0, 1)
    uint64_t seed = 0;           // dropout RNG: the mask is a pure function of (seed, offset, batch, head, row, col)
    uint64_t offset = 0;
    bool deterministic = false;  // backward: bit-identical results run to run
};

// Where and with what a call runs. CPU calls ignore it.
struct ExecutionContext {
    void* stream = nullptr;     // cudaStream_t; nullptr is the default stream
    void* workspace = nullptr;  // device memory of at least workspace_size(args) bytes
    size_t workspace_bytes = 0;
};

// ---------------------------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------------------------

struct ForwardArgs {
    TensorView q, k, v;      // see the layouts above
    TensorView out;          // written
    TensorView softmax_lse;  // optional, written: (batch, nheads, seqlen_q) fp32
    TensorView attn_probs;   // optional, written, for tests at small sizes: (batch, nheads, seqlen_q, seqlen_k) fp32;
                             // softmax probabilities, negated where dropout dropped them; 0 where masked
    AttentionOptions options;
    ExecutionContext ctx;
};

// Variable-length batches: sequences packed along the first dimension, sequence b occupying rows
// [cu_seqlens[b], cu_seqlens[b+1]). cu_seqlens must be non-decreasing and start at 0; it is checked where it lives
// on the host (CPU tensors) and trusted where it lives on the device.
struct VarlenForwardArgs {
    TensorView q, k, v;                    // (total_q, nheads, d), (total_k, nheads_k, d), (total_k, nheads_k, dv)
    TensorView cu_seqlens_q, cu_seqlens_k;  // int32 (batch + 1)
    TensorView seqused_k;                  // optional int32 (batch): use only the first seqused_k[b] keys of sequence b
    int64_t max_seqlen_q = 0, max_seqlen_k = 0;
    TensorView out;          // written: (total_q, nheads, dv)
    TensorView softmax_lse;  // optional, written: (nheads, total_q) fp32
    TensorView attn_probs;   // optional, written: (batch, nheads, max_seqlen_q, max_seqlen_k) fp32
    AttentionOptions options;
    ExecutionContext ctx;
};

struct BackwardArgs {
    TensorView dout, q, k, v, out;  // dout like out
    TensorView softmax_lse;         // as returned by forward
    TensorView dq, dk, dv;          // written, shaped like q, k, v
    TensorView softmax_d;           // optional, written: (batch, nheads, seqlen_q) fp32, rowsum(dout * out)
    AttentionOptions options;       // the forward's options (same dropout seed and offset)
    ExecutionContext ctx;
};

struct VarlenBackwardArgs {
    TensorView dout, q, k, v, out, softmax_lse;
    TensorView cu_seqlens_q, cu_seqlens_k, seqused_k;
    int64_t max_seqlen_q = 0, max_seqlen_k = 0;
    TensorView dq, dk, dv;
    TensorView softmax_d;  // optional, written: (nheads, total_q) fp32
    AttentionOptions options;
    ExecutionContext ctx;
};

// Attention against a KV cache (inference). The cache is dense, (batch_cache, seqlen_cache, nheads_k, d), or paged,
// (num_blocks, page_size, nheads_k, d) with block_table (batch, max_blocks_per_seq) int32 mapping a sequence's
// logical page to a physical block. Sequence b's cache holds keys [leftpad[b], cache_seqlens[b]). If k and v are
// given they are first rotated (if rotary_cos/sin are given), written into the cache in place at positions
// cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1, and attended to. With rotary, q is rotated too: at
// positions cache_seqlens[b] + i when causal or windowed, else all rows at cache_seqlens[b] (FlashAttention's rule).
struct KvCacheArgs {
    TensorView q;                 // (batch, seqlen_q, nheads, d)
    TensorView k_cache, v_cache;  // dense or paged, see above; written where k/v are appended
    TensorView k, v;              // optional (batch, seqlen_new, nheads_k, d / dv)
    TensorView rotary_cos, rotary_sin;  // optional (seqlen_ro, rotary_dim / 2), dtype of q
    bool rotary_interleaved = true;     // true: GPT-J style pairs (0,1),(2,3)...; false: GPT-NeoX halves
    TensorView cache_seqlens;           // optional int32 (batch): keys already in the cache
    int64_t cache_seqlen = -1;          // used when cache_seqlens is absent; -1: the whole cache
    TensorView cache_batch_idx;         // optional int32 (batch): which cache entry sequence b uses (dense only)
    TensorView cache_leftpad;           // optional int32 (batch): first valid cache position of sequence b
    TensorView block_table;             // optional int32 (batch, max_blocks_per_seq): paged cache
    int32_t num_splits = 0;             // 0: chosen by a heuristic; 1: no split
    TensorView out;                     // written: (batch, seqlen_q, nheads, dv)
    TensorView softmax_lse;             // optional, written: (batch, nheads, seqlen_q) fp32
    AttentionOptions options;           // dropout_p must be 0
    ExecutionContext ctx;
};

// Two attention results of the same queries over disjoint sets of keys (the splits of a split-KV call, the shards
// of context-parallel attention), merged into the result over the union:
//   lse = log(exp(lse_a) + exp(lse_b)),   out = exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b.
// A part whose lse is +inf saw no key (the convention above) and weighs nothing; a row neither part saw gets out 0
// and lse +inf. Outputs must not overlap the inputs.
struct MergeArgs {
    TensorView out_a, lse_a;  // (batch, seqlen_q, nheads, head_dim_v), (batch, nheads, seqlen_q) fp32
    TensorView out_b, lse_b;  // the same shapes
    TensorView out;           // written: like out_a
    TensorView softmax_lse;   // optional, written: like lse_a
    ExecutionContext ctx;
};

FLASHATTN_API void forward(const ForwardArgs& args);
FLASHATTN_API void varlen_forward(const VarlenForwardArgs& args);
FLASHATTN_API void backward(const BackwardArgs& args);
FLASHATTN_API void varlen_backward(const VarlenBackwardArgs& args);
FLASHATTN_API void kvcache_forward(const KvCacheArgs& args);
FLASHATTN_API void merge_attention(const MergeArgs& args);

// Bytes of device scratch memory the call needs (0 for CPU tensors). Validates the arguments like the call does. The
// forward's: for attn_probs without softmax_lse, and for the key splits of a forward with few query rows (run packed,
// README "At run time"); without it such a forward runs unsplit, with the same result.
FLASHATTN_API size_t workspace_size(const ForwardArgs& args);
FLASHATTN_API size_t workspace_size(const VarlenForwardArgs& args);
FLASHATTN_API size_t workspace_size(const BackwardArgs& args);
FLASHATTN_API size_t workspace_size(const VarlenBackwardArgs& args);
FLASHATTN_API size_t workspace_size(const KvCacheArgs& args);

// ---------------------------------------------------------------------------------------------------------------
// Build and environment
// ---------------------------------------------------------------------------------------------------------------

FLASHATTN_API const char* version();
// A human-readable report: build configuration, compiled architectures and head dims, CUDA driver and runtime,
// visible GPUs and whether each is supported (and why not).
FLASHATTN_API std::string doctor_report();

}  // namespace flashattn
