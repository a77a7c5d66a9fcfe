// The one contract between the host API and every backend (CPU reference, GPU kernels).
//
// src/api builds an AttnParams from validated tensor views; backends read nothing else. Plain data only, so the
// struct can be passed by value to a CUDA kernel. Strides are in elements; every offset is computed in 64 bits.
#pragma once

#include <cstdint>

namespace flashattn {

enum class ElemType : int32_t { f16 = 0, bf16 = 1, f32 = 2, f64 = 3 };

// Which operation the params describe (some fields are read only by some of them).
enum class OpKind : int32_t { forward = 0, backward = 1, kvcache = 2, merge = 3 };

struct AttnParams {
    OpKind op = OpKind::forward;
    ElemType dtype = ElemType::f16;  // of q, k, v, out (and dout, dq, dk, dv, k/v cache, new k/v, rotary cos/sin)

    // ----- sizes -----
    int32_t batch = 0;         // number of sequences
    int32_t seqlen_q = 0;      // padded layout: the q length; varlen: max_seqlen_q
    int32_t seqlen_k = 0;      // padded layout: the k length; varlen: max_seqlen_k; kv-cache: seqlen_cache
                               // (dense) or max_blocks_per_seq * page_size (paged)
    int32_t nheads = 0;        // query heads
    int32_t nheads_k = 0;      // key/value heads; nheads % nheads_k == 0
    int32_t head_dim = 0;      // of q and k
    int32_t head_dim_v = 0;    // of v and out

    // ----- forward tensors -----
    const void* q = nullptr;
    const void* k = nullptr;  // kv-cache: k_cache
    const void* v = nullptr;  // kv-cache: v_cache
    void* out = nullptr;
    float* softmax_lse = nullptr;  // optional
    float* attn_probs = nullptr;   // optional

    // Strides of the (batch, row, head) dimensions. In the varlen layout batch strides are 0 and rows are
    // absolute (offset by cu_seqlens). kv-cache paged: the "batch" of k/v is the physical block, the "row" the
    // position within the page.
    int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
    int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
    int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
    int64_t out_batch_stride = 0, out_row_stride = 0, out_head_stride = 0;
    // softmax_lse: padded (batch, nheads, seqlen_q) -> batch stride nheads*seqlen_q, head stride seqlen_q;
    // varlen (nheads, total_q) -> batch stride 0, head stride total_q, row offset cu_seqlens_q[b].
    int64_t lse_batch_stride = 0, lse_head_stride = 0;
    // attn_probs: (batch, nheads, seqlen_q, seqlen_k) contiguous, sized with seqlen_q/seqlen_k above.

    // ----- variable length -----
    bool is_varlen = false;
    const int32_t* cu_seqlens_q = nullptr;  // (batch + 1)
    const int32_t* cu_seqlens_k = nullptr;  // (batch + 1)
    const int32_t* seqused_k = nullptr;     // optional (batch)
    int64_t total_q = 0;                    // varlen: rows of q
    int64_t total_k = 0;                    // varlen: rows of k

    // ----- masks and score modifiers -----
    float scale = 0.0f;         // softmax scale (already defaulted to 1/sqrt(head_dim))
    float scale_log2 = 0.0f;    // scale * log2(e)
    float softcap = 0.0f;       // 0: off
    bool causal = false;        // kept for reporting; the mask is fully described by the window below
    // Window after normalisation: causal sets window_right = 0; -1 (unbounded) is kept as -1.
    int32_t window_left = -1, window_right = -1;
    const float* alibi_slopes = nullptr;  // optional
    int64_t alibi_batch_stride = 0;       // 0 when slopes are (nheads)

    // ----- dropout (Philox, see philox.h) -----
    float dropout_p = 0.0f;
    uint32_t dropout_keep_threshold = 65536;  // keep iff 16-bit random value < threshold; 65536 keeps all
    float dropout_scale = 1.0f;               // 1 / (1 - dropout_p)
    uint64_t seed = 0, offset = 0;

    // ----- backward -----
    const void* dout = nullptr;
    void* dq = nullptr;
    void* dk = nullptr;
    void* dv = nullptr;
    float* softmax_d = nullptr;  // optional: rowsum(dout * out), laid out like softmax_lse
    int64_t dout_batch_stride = 0, dout_row_stride = 0, dout_head_stride = 0;
    int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
    int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
    int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;
    bool deterministic = false;

    // ----- kv-cache -----
    const int32_t* cache_seqlens = nullptr;  // optional (batch); when null every sequence uses cache_seqlen
    int64_t cache_seqlen = 0;                // the scalar length (already defaulted)
    const int32_t* cache_batch_idx = nullptr;
    const int32_t* cache_leftpad = nullptr;
    const int32_t* block_table = nullptr;    // optional: paged cache
    int64_t block_table_batch_stride = 0;
    int32_t page_size = 0;                   // paged only
    int32_t max_blocks_per_seq = 0;          // paged only
    int64_t batch_cache = 0;                 // entries of a dense cache (cache_batch_idx picks among them); paged:
                                             // physical blocks
    void* k_cache_mut = nullptr;             // k/v cache again, writable, for appending
    void* v_cache_mut = nullptr;
    const void* knew = nullptr;              // optional new keys (batch, seqlen_new, nheads_k, d)
    const void* vnew = nullptr;
    int32_t seqlen_new = 0;
    int64_t knew_batch_stride = 0, knew_row_stride = 0, knew_head_stride = 0;
    int64_t vnew_batch_stride = 0, vnew_row_stride = 0, vnew_head_stride = 0;
    const void* rotary_cos = nullptr;        // optional (seqlen_ro, rotary_dim / 2), row stride rotary_dim / 2
    const void* rotary_sin = nullptr;
    int32_t rotary_dim = 0;                  // 0: no rotary
    int32_t seqlen_ro = 0;
    bool rotary_interleaved = true;
    int32_t num_splits = 1;

    // ----- merge: out and softmax_lse above combine two parts shaped like them (the LSEs contiguous, with the
    // lse strides above) -----
    const void* part_out[2] = {nullptr, nullptr};
    const float* part_lse[2] = {nullptr, nullptr};
    int64_t part_out_batch_stride[2] = {}, part_out_row_stride[2] = {}, part_out_head_stride[2] = {};

    // ----- execution -----
    void* workspace = nullptr;
    uint64_t workspace_bytes = 0;
    void* stream = nullptr;
};

}  // namespace flashattn
