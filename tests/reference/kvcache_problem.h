// KV-cache test problems: a dense or paged cache with ragged lengths, new keys/values to append, rotary tables,
// and the AttnParams describing them.
#pragma once

#include <cstdint>
#include <vector>

#include "common/params.h"
#include "reference/attention_problem.h"
#include "support/host_tensor.h"

namespace flashattn::testing {

struct KvCacheConfig {
    DType dtype = DType::f16;
    int batch = 3, nheads = 4, nheads_k = 2, head_dim = 64, head_dim_v = 0;  // head_dim_v 0: head_dim
    int seqlen_q = 1;
    int seqlen_new = 0;      // rows appended per sequence (0: no new k/v)
    int seqlen_cache = 128;  // positions per sequence the cache can hold
    std::vector<int> cache_seqlens;  // per sequence; empty: the scalar cache_seqlen below for all
    int cache_seqlen = 100;
    std::vector<int> cache_leftpad;    // optional
    std::vector<int> cache_batch_idx;  // optional (dense only); entries index a cache of batch_cache sequences
    int batch_cache = 0;               // 0: batch
    int page_size = 0;                 // > 0: paged cache with a shuffled block table
    int rotary_dim = 0;
    bool rotary_interleaved = true;
    bool causal = false;
    int window_left = -1, window_right = -1;
    float softcap = 0.f;
    Alibi alibi = Alibi::none;
    uint64_t data_seed = 3;

    int dv() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
    bool paged() const { return page_size > 0; }
};

class KvCacheProblem {
  public:
    explicit KvCacheProblem(KvCacheConfig cfg);

    const KvCacheConfig& cfg() const { return cfg_; }
    // Params over this problem's tensors, the cache being k_cache / v_cache (or the given replacements).
    AttnParams params(HostTensor* k_cache_override = nullptr, HostTensor* v_cache_override = nullptr);

    // Element offset, in k_cache (or v_cache with dim = head_dim_v), of (sequence b, position pos, kv head hk).
    int64_t cache_offset(int64_t b, int64_t pos, int64_t hk, int64_t dim) const;
    int64_t cache_length(int64_t b) const;

    HostTensor q, k_cache, v_cache, knew, vnew, rotary_cos, rotary_sin, out, lse;
    HostTensor cache_seqlens, cache_leftpad, cache_batch_idx, block_table, alibi_slopes;
    int64_t blocks_per_seq = 0;

  private:
    KvCacheConfig cfg_;
};

}  // namespace flashattn::testing
