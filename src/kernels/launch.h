// The GPU backend's entry points, called by src/api for CUDA tensors. Host-only declarations: src/api never sees a
// kernel template. Each function takes a validated AttnParams and launches on params.stream; errors throw
// flashattn::Error (Status::unsupported when no kernel was compiled for the device, dtype or head dim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/params.h"

namespace flashattn::kernels {

// Head dims are compiled in buckets; a call runs the smallest bucket that holds max(head_dim, head_dim_v), the
// extra columns zero-padded in shared memory.
constexpr int kHeadDimBuckets[] = {64, 96, 128, 192, 256};
int head_dim_bucket(int head_dim, int head_dim_v);  // 0 when none fits

void run_forward(const AttnParams& p);
size_t forward_workspace_bytes(const AttnParams& p);

void run_backward(const AttnParams& p);
size_t backward_workspace_bytes(const AttnParams& p);

void run_kvcache(const AttnParams& p);
size_t kvcache_workspace_bytes(const AttnParams& p);
// The kv-cache forward's split count: `blocks` thread blocks with `key_tiles` key tiles each, on `sm_count` SMs that
// hold `slots` resident blocks (SMs x blocks per SM); the fewest splits whose last wave is within `good_enough` of the
// best wave efficiency (dispatch.cpp: 0.85, or kKvcFillWaves where the combine runs anyway).
constexpr double kKvcGoodEnough = 0.85;
constexpr double kKvcFillWaves = 0.95;
int kvc_splits(int64_t blocks, int64_t key_tiles, int64_t sm_count, int64_t slots,
               double good_enough = kKvcGoodEnough);

// Whether a kv-cache call's K/V copies are marked evict-first in L2: where the call reads at most
// kKvcReadOnceL2Multiple times the L2 (kv_bytes: its K and V at the caches' capacity), so that the writes-back of the
// dirty lines it would push out are a noticeable share of it.
bool kvc_reads_once(int64_t kv_bytes, int64_t l2_bytes);

// Whether a forward runs its query heads packed per kv head, keys split, on the kv-cache kernel (dispatch.cpp says
// why): where it applies (no varlen, dropout or attn_probs), FLASHATTN_FORWARD_PACKED=0 / 1, else the sizes'
// packed_forward_pays. Sizes only, but for GQA rows the Hopper kv-cache kernel alone packs, where the device is asked
// (and taken for one without it when it cannot be). The count of packed forwards so far (tests tell by it which ran).
bool use_packed_forward(const AttnParams& p);
// hopper_kvcache: the Hopper kv-cache kernel would run it (GQA then packs more rows).
bool packed_forward_pays(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int nheads, int nheads_k,
                         bool hopper_kvcache = false);
int64_t packed_forward_launches();

void run_merge(const AttnParams& p);  // merge.cu

// Compiled kernels in words, for `flashattn doctor`.
std::string compiled_kernels_summary();

}  // namespace flashattn::kernels
