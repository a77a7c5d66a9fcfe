// Test problems for the reference: owned tensors (random inputs, poisoned outputs, optionally non-contiguous) and
// the AttnParams that describe them, filled by hand as the API would.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "common/params.h"
#include "reference/reference.h"
#include "support/host_tensor.h"

namespace flashattn::testing {

// A strided view of a (possibly shared) HostTensor: e.g. q sliced out of a packed qkv.
struct StridedTensor {
    std::shared_ptr<HostTensor> storage;
    int64_t offset = 0;  // element offset of element (0, ..., 0)
    std::vector<int64_t> shape, stride;

    bool present() const { return storage != nullptr; }
    DType dtype() const { return storage->dtype(); }
    int64_t numel() const;
    void* data();
    const void* data() const;
    // Storage offset of a logical (row-major) flat index.
    int64_t storage_index(int64_t flat) const;
    // The elements in logical (row-major) order, as f64.
    std::vector<double> logical() const;
    void fill_normal(std::mt19937_64& rng, double stddev = 1.0);
    void poison();
};

StridedTensor make_contiguous(DType dtype, std::vector<int64_t> shape);

enum class Alibi { none, per_head, per_batch_head };

// How q/k/v and the outputs are laid out in memory.
enum class Layout {
    contiguous,
    packed_qkv,   // q, k, v sliced from one (rows, 3, nheads, d) tensor (needs nheads == nheads_k, d == dv);
                  // out, dq, dk, dv get padded heads (head stride > head dim)
    row_padding,  // every tensor's rows padded: row stride > nheads * head stride
};

struct ProblemConfig {
    DType dtype = DType::f16;
    int batch = 2, nheads = 4, nheads_k = 4, head_dim = 64, head_dim_v = 0;  // head_dim_v 0: head_dim
    int seqlen_q = 64, seqlen_k = 64;
    float scale = 0.f;  // 0: 1 / sqrt(head_dim)
    bool causal = false;
    int window_left = -1, window_right = -1;
    float softcap = 0.f;
    Alibi alibi = Alibi::none;
    float dropout_p = 0.f;
    uint64_t seed = 0x5eed, offset = 0;
    // Non-empty: a varlen batch of these lengths (batch and seqlen_q/k are derived: maxima).
    std::vector<int> seqlens_q, seqlens_k;
    std::vector<int> seqused_k;  // optional, varlen only
    Layout layout = Layout::contiguous;
    bool attn_probs = false;
    bool softmax_d = false;
    uint64_t data_seed = 1;
    double input_stddev = 1.0;

    int dv() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
    bool varlen() const { return !seqlens_q.empty(); }
};

class Problem {
  public:
    explicit Problem(ProblemConfig cfg);

    const ProblemConfig& cfg() const { return cfg_; }
    // Forward or backward params over this problem's tensors (the kv-cache has its own problem type).
    AttnParams params(OpKind op);
    // Poison every output (NaN), so that anything left unwritten shows.
    void poison_outputs();
    void poison_gradients();

    int64_t rows_q() const { return rows_q_; }  // padded batch * seqlen_q, or total_q
    int64_t rows_k() const { return rows_k_; }

    StridedTensor q, k, v, out, dout, dq, dk, dv;
    HostTensor lse, softmax_d, probs, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k;

  private:
    ProblemConfig cfg_;
    int64_t rows_q_ = 0, rows_k_ = 0;
};

// Fills the (batch, row, head) strides of a 4-d (batch, seq, heads, dim) or 3-d varlen (rows, heads, dim) view.
struct RowStrides {
    int64_t batch = 0, row = 0, head = 0;
};
RowStrides row_strides(const StridedTensor& t, bool varlen);

}  // namespace flashattn::testing
