// GPU dispatch: (architecture, dtype, head dim) -> a compiled kernel, with a clear error for what is not compiled.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "common/build_config.h"
#include "kernels/common/attn_probs.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_props.h"
#include "kernels/launch.h"
#include "kernels/sm80/instances.h"
#include "kernels/sm90/fwd_sm90.h"
#include "kernels/sm90/kvcache_sm90.h"

namespace flashattn::kernels {

namespace {

constexpr int kMinComputeMajor = 8;  // mma.sync m16n8k16 with bf16, cp.async: sm_80 and newer

using FwdFn = void (*)(const AttnParams&);
using BwdFn = void (*)(const AttnParams&, const BwdPlan&);
using KvcFn = void (*)(const AttnParams&, const KvcPlan&);
using OccupancyFn = int (*)(const AttnParams&);

// The launchers of one dtype and head dim bucket.
struct Sm80Launchers {
    FwdFn fwd = nullptr;
    BwdFn bwd = nullptr;
    KvcFn kvc = nullptr;
    OccupancyFn kvc_blocks_per_sm = nullptr;
};

template <ElemType kElem, int kHeadDim>
Sm80Launchers sm80_launchers_of() {
    return {&launch_fwd_sm80<kElem, kHeadDim>, &launch_bwd_sm80<kElem, kHeadDim>, &launch_kvc_sm80<kElem, kHeadDim>,
            &kvc_blocks_per_sm_sm80<kElem, kHeadDim>};
}

template <ElemType kElem>
Sm80Launchers sm80_launchers_of_dtype(int bucket) {
    switch (bucket) {
        case 64: return sm80_launchers_of<kElem, 64>();
        case 96: return sm80_launchers_of<kElem, 96>();
        case 128: return sm80_launchers_of<kElem, 128>();
        case 192: return sm80_launchers_of<kElem, 192>();
        case 256: return sm80_launchers_of<kElem, 256>();
        default: return {};
    }
}

const char* elem_name(ElemType e) {
    switch (e) {
        case ElemType::f16: return "float16";
        case ElemType::bf16: return "bfloat16";
        case ElemType::f32: return "float32";
        case ElemType::f64: return "float64";
    }
    return "?";
}

// The current device, its compute capability checked against what the kernels need; returned for the dispatch.
DeviceProps require_supported_device() {
    const DeviceProps d = current_device_props();
    if (d.cc_major < kMinComputeMajor) {
        std::ostringstream os;
        os << "GPU " << d.device << " is sm_" << d.cc_major << d.cc_minor
           << ": flashattn's kernels need compute capability 8.0 or newer (Ampere, Ada, Hopper)";
        throw Error(Status::unsupported, os.str());
    }
    return d;
}

// The launchers for p; all null where none is compiled.
Sm80Launchers sm80_launchers_or_none(const AttnParams& p) {
    const int bucket = head_dim_bucket(p.head_dim, p.head_dim_v);
    if (p.dtype == ElemType::f16) return sm80_launchers_of_dtype<ElemType::f16>(bucket);
    if (p.dtype == ElemType::bf16) return sm80_launchers_of_dtype<ElemType::bf16>(bucket);
    return {};
}

// The launchers for p, or an Error naming what is not compiled.
Sm80Launchers sm80_launchers(const AttnParams& p, const char* direction) {
    const Sm80Launchers l = sm80_launchers_or_none(p);
    if (!l.fwd) {
        std::ostringstream os;
        os << "no GPU " << direction << " kernel for dtype " << elem_name(p.dtype) << ", head_dim " << p.head_dim
           << ", head_dim_v " << p.head_dim_v << " (compiled: float16/bfloat16, head dims up to 256)";
        throw Error(Status::unsupported, os.str());
    }
    return l;
}

int current_sm_count() { return current_device_props().sm_count; }

constexpr size_t kWorkspaceAlign = 256;  // between the buffers carved out of a workspace
constexpr uintptr_t kWorkspaceAlign16 = 16;  // of the workspace itself: its buffers are accessed 16 bytes wide
size_t align_up(size_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

// The buffers carved out of the workspace (dQ accumulator, rotated queries) are accessed 16 bytes at a time.
void require_aligned_workspace(const AttnParams& p) {
    const uintptr_t misalignment = reinterpret_cast<uintptr_t>(p.workspace) % kWorkspaceAlign16;
    if (misalignment != 0)
        throw Error(Status::invalid_argument, "workspace: expected a 16-byte aligned pointer, got one " +
                                                  std::to_string(misalignment) + " bytes past a 16-byte boundary");
}

}  // namespace

int head_dim_bucket(int head_dim, int head_dim_v) {
    const int d = head_dim > head_dim_v ? head_dim : head_dim_v;
    for (int bucket : kHeadDimBuckets)
        if (d <= bucket) return bucket;
    return 0;
}


namespace {

// FLASHATTN_FORWARD_PATH picks the forward kernel on an H100-class device: "sm80" the Ampere-class one, "sm90" the
// Hopper one wherever it applies (sm90/fwd_sm90.h); unset or "auto", kSm90ForwardByDefault decides.
constexpr bool kSm90ForwardByDefault = true;  // passed every forward GPU test on an H100 (bench/NOTES_sm90.md)
constexpr const char* kForwardPathVariable = "FLASHATTN_FORWARD_PATH";

bool sm90a_compiled() { return std::strstr(FLASHATTN_CUDA_ARCHS, "90a") != nullptr; }

// The forward with the query heads of a kv head packed into one tile (defined with the kv-cache forward below;
// use_packed_forward is in launch.h).
void run_packed_forward(const AttnParams& p);
size_t packed_forward_workspace_bytes(const AttnParams& p);

bool use_sm90_forward(const AttnParams& p, const DeviceProps& device) {
    const char* choice = std::getenv(kForwardPathVariable);
    const bool forced = choice && std::strcmp(choice, "sm90") == 0;
    if (choice && std::strcmp(choice, "sm80") == 0) return false;
    if (!forced && !kSm90ForwardByDefault) return false;
    return sm90a_compiled() && device.cc_major == 9 && device.cc_minor == 0 && sm90_forward_handles(p);
}

}  // namespace

size_t forward_workspace_bytes(const AttnParams& p) {
    if (p.batch == 0 || p.seqlen_q == 0) return 0;
    if (use_packed_forward(p)) return packed_forward_workspace_bytes(p);  // its splits' partial results
    // The Hopper forward's last-wave split (its parts' partial results): it depends on the current GPU's SM count.
    // Where no GPU answers (a query for CUDA tensors on a machine without one) there is nothing to split on.
    if (sm90_forward_handles(p)) {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess) {
            cudaGetLastError();
        } else if (use_sm90_forward(p, current_device_props())) {
            return sm90_forward_workspace_bytes(p);
        }
    }
    // attn_probs are normalised with the LSE: when the caller did not ask for the LSE, it lives in the workspace.
    if (p.attn_probs && !p.softmax_lse)
        return sizeof(float) * size_t(p.nheads) * (p.is_varlen ? size_t(p.total_q) : size_t(p.batch) * p.seqlen_q);
    return 0;
}

void run_forward(const AttnParams& p) {
    if (p.batch == 0 || p.seqlen_q == 0) return;
    const DeviceProps device = require_supported_device();
    if (use_packed_forward(p)) {
        run_packed_forward(p);
        return;
    }
    if (use_sm90_forward(p, device)) {
        launch_fwd_sm90(p);
        return;
    }
    const FwdFn fn = sm80_launchers(p, "forward").fwd;
    AttnParams run = p;
    if (p.attn_probs && !p.softmax_lse) {
        if (p.workspace_bytes < forward_workspace_bytes(p) || !p.workspace)
            throw Error(Status::invalid_argument, "workspace: attn_probs without softmax_lse needs " +
                                                      std::to_string(forward_workspace_bytes(p)) + " bytes, got " +
                                                      std::to_string(p.workspace_bytes) +
                                                      (p.workspace ? "" : " at a null pointer"));
        require_aligned_workspace(p);
        run.softmax_lse = static_cast<float*>(p.workspace);
        run.lse_batch_stride = p.is_varlen ? 0 : int64_t(p.nheads) * p.seqlen_q;
        run.lse_head_stride = p.is_varlen ? p.total_q : p.seqlen_q;
    }
    fn(run);
    if (run.attn_probs) launch_attn_probs(run, run.softmax_lse);
}

BwdPlan make_bwd_plan(const AttnParams& p, int sm_count) {
    BwdPlan plan;
    const int bucket = head_dim_bucket(p.head_dim, p.head_dim_v);
    const int64_t rows = q_rows(p);
    if (p.deterministic) {
        // Enough splits to fill the GPU twice over with (split, batch, kv head) blocks, never more than key tiles.
        const int64_t blocks_per_split = std::max<int64_t>(1, int64_t(p.batch) * p.nheads_k);
        const int64_t key_tiles = (p.seqlen_k + kBwdMinBlockN - 1) / kBwdMinBlockN;
        const int64_t want = (2 * int64_t(sm_count) + blocks_per_split - 1) / blocks_per_split;
        plan.n_splits = static_cast<int>(std::max<int64_t>(1, std::min(want, key_tiles)));
    }
    plan.split_stride = accum_rows(p) * p.nheads * bucket;
    const size_t accum_bytes = align_up(sizeof(float) * size_t(plan.n_splits) * size_t(plan.split_stride));
    const size_t d_bytes = p.softmax_d ? 0 : align_up(sizeof(float) * size_t(rows) * p.nheads);
    plan.workspace_bytes = accum_bytes + d_bytes;
    if (p.workspace) {
        plan.dq_accum = static_cast<float*>(p.workspace);
        plan.softmax_d = p.softmax_d ? p.softmax_d
                                     : reinterpret_cast<float*>(static_cast<unsigned char*>(p.workspace) + accum_bytes);
    }
    return plan;
}

size_t backward_workspace_bytes(const AttnParams& p) {
    if (p.batch == 0 || p.seqlen_q == 0) return 0;
    return make_bwd_plan(p, current_sm_count()).workspace_bytes;
}

void run_backward(const AttnParams& p) {
    if (p.batch == 0 || p.seqlen_q == 0) return;
    require_supported_device();
    const BwdFn fn = sm80_launchers(p, "backward").bwd;
    const BwdPlan plan = make_bwd_plan(p, current_sm_count());
    if (p.workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && !p.workspace))
        throw Error(Status::invalid_argument, "workspace: the backward needs " + std::to_string(plan.workspace_bytes) +
                                                  " bytes (workspace_size()), got " + std::to_string(p.workspace_bytes));
    require_aligned_workspace(p);
    fn(p, plan);
}

// ---- kv-cache forward ------------------------------------------------------------------------------------------------

namespace {

constexpr int kKvcBlockM = 64;         // packed query rows per block (KvcTileShape in sm80/kvcache_launch.cuh)
constexpr int kKvcBlockN = 64;  // the Ampere-class kernel's keys a tile up to head dim 128 (32 above), for the heuristic
constexpr int kKvcMinTilesPerSplit = 2;  // a split's key tiles: fewer would not pay for the combine
constexpr int kKvcMaxSplits = 128;
constexpr int kKvcLongSplitTiles = 16;  // a split's key tiles from which the fuller count pays (1k keys of 64)

}  // namespace

// The split count. A decode block streams its keys at a rate set by the copies it keeps in flight, and about one
// block an SM already draws the memory system's bandwidth: a grid that fills the SMs is left whole, since splits would
// only add the combine (a second kernel, 3-4 us at batch 16 on an H100). A smaller grid is split: blocks all take
// about as long, so by how full the last wave of resident blocks is (efficiency = waves / ceil(waves) over
// `slots`), the fewest splits whose efficiency is within `good_enough` of the best.
int kvc_splits(int64_t blocks, int64_t key_tiles, int64_t sm_count, int64_t slots, double good_enough) {
    const int64_t most = std::min<int64_t>(kKvcMaxSplits, std::max<int64_t>(1, key_tiles / kKvcMinTilesPerSplit));
    if (blocks <= 0 || slots <= 0 || key_tiles <= 0) return 1;
    if (double(blocks) >= kKvcFilled * double(sm_count)) return 1;
    auto efficiency = [&](int64_t splits) {
        const double waves = double(blocks * splits) / double(slots);
        return waves / std::ceil(waves);
    };
    double best = 0.0;
    for (int64_t s = 1; s <= most; ++s) best = std::max(best, efficiency(s));
    for (int64_t s = 1; s <= most; ++s)
        if (efficiency(s) >= good_enough * best) {
            // Splits take ceil(key_tiles / s) tiles each: drop the ones that would be left with none.
            const int64_t per_split = (key_tiles + s - 1) / s;
            return static_cast<int>((key_tiles + per_split - 1) / per_split);
        }
    return 1;
}

// Evict-first K/V copies: L2 holds what earlier work wrote and has not written back (a decode step follows kernels
// that wrote their outputs). Read with the normal policy, the cache's stream pushes those dirty lines out and their
// writes-back share the call's DRAM bandwidth; marked evict-first, the stream's own lines (read once) are the ones
// replaced. On an H100 (50 MiB L2) after a 256 MiB write, the hint made calls of 67 MB of K/V 4-13% faster and calls
// of 134 MB 5-6%, but calls of 268 MB-1 GB 1-5% slower (bench/NOTES.md, "kv-cache: evict-first copies"): the rule
// takes it for calls up to 4x the L2 (210 MB there), between the two.
constexpr int64_t kKvcReadOnceL2Multiple = 4;
// FLASHATTN_KVC_READ_ONCE=0 never marks the copies, =1 always (for comparison); unset, the rule decides.
constexpr const char* kKvcReadOnceVariable = "FLASHATTN_KVC_READ_ONCE";

// FLASHATTN_KVC_AHEAD=n: the Hopper kv-cache kernel keeps n tiles ahead of its consumers (0: as many as its rings
// hold), whatever kvc_tiles_ahead says (for comparison).
constexpr const char* kKvcAheadVariable = "FLASHATTN_KVC_AHEAD";
// FLASHATTN_KVC_OVERLAP=0/1: the Hopper kv-cache kernel's next S product beside P V never / always, whatever
// kvc_overlap_products says (for comparison).
constexpr const char* kKvcOverlapVariable = "FLASHATTN_KVC_OVERLAP";
// FLASHATTN_KVC_ALL_ROWS=1: the Hopper kv-cache kernel's softmax on every packed row, padding too (for comparison).
constexpr const char* kKvcAllRowsVariable = "FLASHATTN_KVC_ALL_ROWS";
// FLASHATTN_KVC_ONE_PRODUCER=0/1: the Hopper kv-cache kernel on a paged cache with two / one producer warps, whatever
// kvc_one_producer says (for comparison).
constexpr const char* kKvcOneProducerVariable = "FLASHATTN_KVC_ONE_PRODUCER";
// FLASHATTN_KVC_K_FIRST=0: the Hopper kv-cache kernel's two producer warps issue their first tiles at once, V's not
// held until K's has gone out (for comparison).
constexpr const char* kKvcKFirstVariable = "FLASHATTN_KVC_K_FIRST";

// FLASHATTN_KVC_PAGE_ORDER=1: the Hopper kv-cache kernel reads a paged cache's middle tiles with their pages in address
// order on every paged call without ALiBi (tests, measurements); =0: table order everywhere (for comparison). Unset
// (or =auto): where kvc_pages_in_address_order says.
constexpr const char* kKvcPageOrderVariable = "FLASHATTN_KVC_PAGE_ORDER";

// FLASHATTN_KVC_FAST_MEMORY=0/1: the Hopper kv-cache plan without / with kvc_fast_memory's rules, whatever the
// device's bandwidth says (for comparison).
constexpr const char* kKvcFastMemoryVariable = "FLASHATTN_KVC_FAST_MEMORY";
bool kvc_fast_memory_device(const DeviceProps& device) {
    const char* choice = std::getenv(kKvcFastMemoryVariable);
    if (choice && *choice) return std::strcmp(choice, "0") != 0;
    return kvc_fast_memory(device.dram_bytes_per_s, device.sm_count);
}

bool kvc_reads_once(int64_t kv_bytes, int64_t l2_bytes) {
    return l2_bytes > 0 && kv_bytes <= kKvcReadOnceL2Multiple * l2_bytes;
}

// Where a kernel's splits may merge in a cluster (the Hopper kv-cache kernel's): clusters of `splits` blocks the GPU
// holds at once, 0 where it cannot launch them.
using KvcClusterCapacity = int (*)(const AttnParams&, int splits);

// FLASHATTN_KVC_CLUSTER=0: splits never merge in a cluster (the workspace and the combine kernel, for comparison).
constexpr const char* kKvcClusterVariable = "FLASHATTN_KVC_CLUSTER";
// FLASHATTN_KVC_FIT_CLUSTER=0 keeps the heuristic's split count where its clusters do not all fit; =1 trades it for one
// whose clusters do (kvc_cluster_fitting_splits) however long the splits (both for comparison); unset, the rule
// decides.
constexpr const char* kKvcFitClusterVariable = "FLASHATTN_KVC_FIT_CLUSTER";

// FLASHATTN_KVC_LAST_MERGE=1: the Hopper kernel's splits that do not merge in a cluster merged by each unit's last
// block to finish rather than by the combine kernel (KvcPlan::merge_by_last; for measurement: on the H200 it was no
// faster than the combine kernel at 8 splits and 2-9 us slower at 29-32; bench/NOTES.md, "kv-cache: the last-block
// merge").
constexpr const char* kKvcLastMergeVariable = "FLASHATTN_KVC_LAST_MERGE";

// Balanced splits are asked for, never taken by default: which split reads which tiles then changes from call to
// call, and with it the order in which the splits' partial results are summed, so two calls on the same inputs differ
// in the output's last bits (a decode step run twice would not be sure to pick the same tokens); with a fixed share
// each, a call's result is the same to the bit every time. FLASHATTN_KVC_BALANCE=rule takes them where
// kvc_balance_tiles says (on an H200, 2.2-3.6 us of ~258 faster at 4 x 8 and 1 x 32 kv heads x 64k page 16);
// =n: the splits take their unit's tiles n (at most kKvcMaxBalanceTiles) at a time from a counter the unit's blocks
// share (KvcPlan::balance_tiles) on any split call but those reading their pages in address order (measurements).
constexpr const char* kKvcBalanceVariable = "FLASHATTN_KVC_BALANCE";
constexpr int kKvcMaxBalanceTiles = 1024;

// FLASHATTN_KVC_MERGE_GROUP=2: the Hopper kernel's cluster merge takes the splits two at a time (KvcPlan::merge_group)
// rather than eight: less code at a call's end, on the general instance (kvc_lean leaves such calls to it).
// Not the default: kvc_cluster_merge_grouped says what it cost and gained.
constexpr const char* kKvcMergeGroupVariable = "FLASHATTN_KVC_MERGE_GROUP";

// block_n: the kernel's key-rows a tile, which a block of head_group kv heads shares out among them. many_waves: the
// grid is one of many waves (kvc_sm90_many_waves), split by kvc_many_wave_splits where it is of one kv head a block.
// tiles_in_flight: the Hopper kernel's stages, for kvc_latency_splits (its splits merge in a cluster) and
// kvc_tiles_ahead (KvcPlan::tiles_ahead); 0: neither is taken.
// fast_memory: kvc_fast_memory's rules (the Hopper kernel's plan on an H200-class device).
KvcPlan make_kvc_plan(const AttnParams& p, int sm_count, int blocks_per_sm, int block_n, int head_group = 1,
                      KvcClusterCapacity cluster_capacity = nullptr, bool many_waves = false, int tiles_in_flight = 0,
                      bool fast_memory = false) {
    KvcPlan plan;
    plan.head_group = head_group;
    const KvcGrid grid = kvc_grid(p.batch, p.seqlen_q, p.nheads, p.nheads_k, head_group, kKvcBlockM);
    const int64_t blocks = grid.row_blocks * grid.kv_groups;
    const int64_t key_tiles = kvc_key_tiles(p.seqlen_k, block_n, head_group);  // of the cache's capacity
    int64_t splits = p.num_splits;
    const int64_t slots = int64_t(sm_count) * std::max(blocks_per_sm, 1);
    const char* cluster_choice = std::getenv(kKvcClusterVariable);
    const bool clusters_allowed = !(cluster_choice && std::strcmp(cluster_choice, "0") == 0);
    if (splits <= 0) {
        splits = kvc_splits(blocks, key_tiles, sm_count, slots);
        if (fast_memory) {
            splits = kvc_two_per_sm_splits(splits, blocks, key_tiles, sm_count, slots,
                                           kvc_page_bytes(p.block_table != nullptr, p.k_batch_stride));
        }
        // More splits than a cluster merges (the Hopper kernel's batch 1 x 8 kv heads from 4k keys): the combine runs
        // anyway, so the count that fills the resident slots' waves, where its splits stay long. At 64k keys 32 splits
        // (32 tiles each) read 106-109 us where the 0.85 rule's 29 read 108-110 (cuDNN 106-108); at 16k keys (8 tiles
        // each) 32 splits were no faster with one query a head and 4.5% slower with four, and with clusters in reach
        // the fuller counts were not better (bench/NOTES.md, "kv-cache: split counts by measurement").
        if (cluster_capacity && splits > kKvcClusterMax) {
            const int fuller = kvc_splits(blocks, key_tiles, sm_count, slots, kKvcFillWaves);
            if (key_tiles / fuller >= kKvcLongSplitTiles) splits = fuller;
        }
        if (many_waves && head_group == 1) splits = kvc_many_wave_splits(key_tiles);
        if (cluster_capacity)
            splits = fast_memory ? kvc_fast_memory_one_sm_splits(splits, blocks, key_tiles, sm_count)
                                 : kvc_one_sm_splits(splits, blocks, key_tiles, sm_count);
        splits = kvc_latency_splits(splits, blocks, key_tiles, tiles_in_flight, sm_count);
        const char* fit_cluster = std::getenv(kKvcFitClusterVariable);
        const bool fit_always = fit_cluster && std::strcmp(fit_cluster, "1") == 0;
        if (cluster_capacity && clusters_allowed && !(fit_cluster && std::strcmp(fit_cluster, "0") == 0))
            splits = kvc_cluster_fitting_splits(
                splits, blocks, key_tiles, [&](int s) { return cluster_capacity(p, s); },
                fit_always ? std::numeric_limits<int64_t>::max() : kKvcFitClusterMaxTiles);
    }
    splits = std::min<int64_t>(splits, kKvcMaxSplits);  // a caller's count too: it is gridDim.z
    plan.num_splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(splits, std::max<int64_t>(key_tiles, 1))));
    if (p.seqlen_q == 0) plan.num_splits = 1;
    // The Hopper kernel's copies in flight, by the grid with its splits and the tiles each block reads.
    const int64_t grid_blocks = blocks * plan.num_splits;
    const bool small_pieces = kvc_small_page_pieces(p.block_table != nullptr, p.page_size, block_n);
    if (tiles_in_flight > 0) {
        const int64_t tiles_per_block = (key_tiles + plan.num_splits - 1) / plan.num_splits;
        plan.tiles_ahead = kvc_tiles_ahead(grid_blocks, tiles_per_block, sm_count, slots);
        if (fast_memory)
            plan.tiles_ahead = kvc_fast_memory_tiles_ahead(plan.tiles_ahead, p.block_table != nullptr, grid_blocks,
                                                           tiles_per_block, plan.num_splits, slots, small_pieces,
                                                           head_group);
        plan.overlap_products = kvc_overlap_products(grid_blocks, sm_count);
        plan.one_producer = p.block_table != nullptr && kvc_one_producer(key_tiles, plan.num_splits, tiles_in_flight);
    }
    // Splits merged in a cluster where the count allows (at most kKvcClusterMax) and the clusters, one a unit, are all
    // resident at once (as the heuristic's count assumed of the blocks). The heuristic's larger counts (batch 1 x 8
    // kv heads from 4k keys) keep the combine: capped at 16 in clusters they read 3% faster on one H100 at 16k-64k
    // keys and 3-7% slower on others, whose GPCs hold only 7 such clusters with one block an SM (bench/NOTES.md,
    // "kv-cache: splits merged in a cluster"; bench/probe_cluster_capacity.cu).
    if (cluster_capacity && plan.num_splits > 1 && plan.num_splits <= kKvcClusterMax && clusters_allowed)
        plan.merge_in_cluster = blocks <= cluster_capacity(p, plan.num_splits);
    const char* last_merge = std::getenv(kKvcLastMergeVariable);
    plan.merge_by_last = cluster_capacity && plan.num_splits > 1 && !plan.merge_in_cluster && last_merge &&
                         std::strcmp(last_merge, "1") == 0;
    const char* balance = std::getenv(kKvcBalanceVariable);
    if (balance && std::strcmp(balance, "rule") == 0) {
        if (cluster_capacity && fast_memory && tiles_in_flight > 0)
            plan.balance_tiles = kvc_balance_tiles(small_pieces, plan.tiles_ahead, plan.num_splits,
                                                   plan.merge_in_cluster, grid_blocks, slots);
    } else if (cluster_capacity && plan.num_splits > 1 && balance && *balance) {
        plan.balance_tiles = std::clamp(std::atoi(balance), 0, kKvcMaxBalanceTiles);
    }

    const size_t q_rot_bytes =
        p.rotary_dim > 0 ? align_up(2 * size_t(p.batch) * p.seqlen_q * p.nheads * p.head_dim) : 0;
    const size_t rows = size_t(p.batch) * p.nheads * p.seqlen_q;
    const bool accum = plan.num_splits > 1 && !plan.merge_in_cluster;
    const size_t o_bytes = accum ? align_up(sizeof(float) * plan.num_splits * rows * p.head_dim_v) : 0;
    const size_t lse_bytes = accum ? align_up(sizeof(float) * plan.num_splits * rows) : 0;
    const size_t flag_bytes =
        plan.merge_by_last ? align_up(sizeof(uint32_t) * size_t(blocks) * size_t(plan.num_splits)) : 0;
    const size_t claim_bytes = plan.balance_tiles > 0 ? align_up(sizeof(unsigned long long) * size_t(blocks)) : 0;
    plan.workspace_bytes = q_rot_bytes + o_bytes + lse_bytes + flag_bytes + claim_bytes;
    if (p.workspace) {
        auto* base = static_cast<unsigned char*>(p.workspace);
        if (q_rot_bytes) plan.q_rot = base;
        if (o_bytes) plan.o_accum = reinterpret_cast<float*>(base + q_rot_bytes);
        if (lse_bytes) plan.lse_accum = reinterpret_cast<float*>(base + q_rot_bytes + o_bytes);
        if (flag_bytes)
            plan.merge_flags = reinterpret_cast<uint32_t*>(base + q_rot_bytes + o_bytes + lse_bytes);
        if (claim_bytes)
            plan.tile_claims =
                reinterpret_cast<unsigned long long*>(base + q_rot_bytes + o_bytes + lse_bytes + flag_bytes);
    }
    return plan;
}

namespace {

// FLASHATTN_KVCACHE_PATH=sm80 keeps the kv-cache forward on the Ampere-class kernel on an H100; otherwise the Hopper
// kernel takes what it handles there (sm90/kvcache_sm90.h).
constexpr const char* kKvcachePathVariable = "FLASHATTN_KVCACHE_PATH";

bool use_sm90_kvcache(const AttnParams& p) {
    const char* choice = std::getenv(kKvcachePathVariable);
    if (choice && std::strcmp(choice, "sm80") == 0) return false;
    if (!sm90a_compiled()) return false;
    const DeviceProps& device = current_device_props();
    return device.cc_major == 9 && device.cc_minor == 0 && kvc_sm90_handles(p);
}

// The plan for the kernel that will run p: the split count depends on that kernel's occupancy. An empty plan where
// no kernel is compiled (the run is refused).
KvcPlan kvc_plan_for(const AttnParams& p) {
    if (use_sm90_kvcache(p)) {
        const DeviceProps& device = current_device_props();
        const int sm_count = device.sm_count, blocks_per_sm = kvc_sm90_blocks_per_sm(p);
        const int64_t slots = int64_t(sm_count) * blocks_per_sm;
        const bool fast_memory = kvc_fast_memory_device(device);
        const bool many_waves = kvc_sm90_many_waves(p, slots, fast_memory);
        const int block_n = kvc_sm90_block_n(p);
        const int head_group = kvc_sm90_head_group(p, slots, many_waves, fast_memory);
        KvcPlan plan = make_kvc_plan(p, sm_count, blocks_per_sm, block_n, head_group, kvc_sm90_cluster_capacity,
                                     many_waves, kvc_sm90_tiles_in_flight(p), fast_memory);
        const int64_t kv_bytes =
            int64_t(p.batch) * p.nheads_k * p.seqlen_k * (p.head_dim + p.head_dim_v) * kKvcElemBytes;
        const char* choice = std::getenv(kKvcReadOnceVariable);
        plan.kv_read_once = choice && *choice ? std::strcmp(choice, "0") != 0
                                              : kvc_reads_once(kv_bytes, device.l2_bytes);
        const char* ahead = std::getenv(kKvcAheadVariable);
        if (ahead && *ahead) plan.tiles_ahead = std::max(0, std::atoi(ahead));
        const char* all_rows = std::getenv(kKvcAllRowsVariable);
        plan.softmax_all_rows = all_rows && std::strcmp(all_rows, "1") == 0;
        const char* overlap = std::getenv(kKvcOverlapVariable);
        if (overlap && *overlap) plan.overlap_products = std::strcmp(overlap, "0") != 0;
        const char* producers = std::getenv(kKvcOneProducerVariable);
        if (producers && *producers) plan.one_producer = p.block_table != nullptr && std::strcmp(producers, "0") != 0;
        const char* k_first = std::getenv(kKvcKFirstVariable);
        plan.k_first = !(k_first && std::strcmp(k_first, "0") == 0);
        const char* merge_group = std::getenv(kKvcMergeGroupVariable);
        if (merge_group && std::strcmp(merge_group, "2") == 0) plan.merge_group = 2;
        const bool paged = p.block_table != nullptr, alibi = p.alibi_slopes != nullptr;
        // Fast memory: table order. On an H200 (bench/NOTES.md, "kv-cache on the H200") the address order the rule
        // takes read 16 x 8 x 64k page 16 (two splits, merged windows) at 983.9 us against 956.3 in table order, 4 x 8
        // x 64k and 1 x 32 x 64k (one window a block) 1.1-1.2% slower, 16 x 8 x 16k 0.4% faster; and with the pool's
        // pages in order, paged calls there still read 0.8-4.6% slower than dense: what pages cost on that device is
        // not where they lie.
        const char* page_order = std::getenv(kKvcPageOrderVariable);
        if (page_order && std::strcmp(page_order, "1") == 0)
            plan.pages_in_address_order = paged && !alibi;
        else if (!(page_order && std::strcmp(page_order, "0") == 0) && !fast_memory)
            plan.pages_in_address_order = kvc_pages_in_address_order(
                paged, alibi, kvc_key_tiles(p.seqlen_k, block_n, plan.head_group), plan.num_splits,
                block_n / plan.head_group, p.page_size,
                int64_t(p.batch) * (p.nheads_k / plan.head_group) * plan.num_splits, sm_count);
        // Balanced splits (FLASHATTN_KVC_BALANCE) take their tiles in the order claimed: not with the page order's
        // windows (a block's range sorted ahead), nor with the next S product beside P V (which needs the next tile
        // before this one's end).
        if (plan.pages_in_address_order) plan.balance_tiles = 0;
        if (plan.balance_tiles > 0) plan.overlap_products = false;
        return plan;
    }
    const Sm80Launchers l = sm80_launchers_or_none(p);
    if (!l.kvc_blocks_per_sm) return KvcPlan{};
    return make_kvc_plan(p, current_sm_count(), l.kvc_blocks_per_sm(p), kKvcBlockN);
}

// FLASHATTN_KVC_PRINT_PLAN=1: each kv-cache launch (the packed forward's too) writes its plan to stderr, one line:
// which kernel, the split count and how the splits merge (in a cluster or by the combine kernel), and most of KvcPlan
// (not the Hopper kernel's folded copies, v_fold_rows and k_fold, which its launch sets later). Why: which path a
// shape takes depends on the GPU (its SMs, the clusters it holds at once), and a measurement read against the wrong
// path misleads (bench/NOTES.md, "kv-cache: what the end of an eight-split call costs"). Captured in a CUDA graph, a
// call prints once, at capture.
constexpr const char* kKvcPrintPlanVariable = "FLASHATTN_KVC_PRINT_PLAN";

void print_kvc_plan(const AttnParams& p, const KvcPlan& plan, bool sm90) {
    const char* merge = plan.num_splits <= 1       ? "none"
                        : plan.merge_in_cluster ? "cluster"
                        : plan.merge_by_last    ? "last block"
                                                : "combine";
    std::fprintf(stderr,
                 "flashattn kv-cache plan: %s kernel; batch %d, seqlen_q %d, nheads %d, nheads_k %d, seqlen_k %d, "
                 "page_size %d: splits %d (merge: %s), head_group %d, tiles_ahead %d, overlap_products %d, "
                 "one_producer %d, k_first %d, pages_in_address_order %d, kv_read_once %d, softmax_all_rows %d, "
                 "balance_tiles %d, merge_group %d, workspace %zu bytes\n",
                 sm90 ? "Hopper" : "Ampere-class", p.batch, p.seqlen_q, p.nheads, p.nheads_k, p.seqlen_k,
                 p.block_table ? p.page_size : 0, plan.num_splits, merge, plan.head_group, plan.tiles_ahead,
                 int(plan.overlap_products), int(plan.one_producer), int(plan.k_first),
                 int(plan.pages_in_address_order), int(plan.kv_read_once), int(plan.softmax_all_rows),
                 plan.balance_tiles, plan.merge_group, plan.workspace_bytes);
}

void launch_kvc(const AttnParams& p, const KvcPlan& plan) {
    const bool sm90 = use_sm90_kvcache(p);
    const char* print_plan = std::getenv(kKvcPrintPlanVariable);
    if (print_plan && std::strcmp(print_plan, "1") == 0) print_kvc_plan(p, plan, sm90);
    if (sm90)
        launch_kvc_sm90(p, plan);
    else
        sm80_launchers(p, "kv-cache forward").kvc(p, plan);
}

}  // namespace

size_t kvcache_workspace_bytes(const AttnParams& p) {
    if (p.batch == 0) return 0;
    return kvc_plan_for(p).workspace_bytes;
}

void run_kvcache(const AttnParams& p) {
    if (p.batch == 0 || (p.seqlen_q == 0 && p.seqlen_new == 0)) return;
    require_supported_device();
    sm80_launchers(p, "kv-cache forward");  // refuses, naming what is not compiled
    const KvcPlan plan = kvc_plan_for(p);
    if (p.workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && !p.workspace))
        throw Error(Status::invalid_argument, "workspace: the kv-cache forward needs " +
                                                  std::to_string(plan.workspace_bytes) +
                                                  " bytes (workspace_size()), got " + std::to_string(p.workspace_bytes));
    require_aligned_workspace(p);
    launch_kvc(p, plan);
}

// ---- the forward with packed query heads -----------------------------------------------------------------------------
//
// With few query rows a head (speculative decoding's few tokens, a chunked prefill's short chunk against a long
// context), the forward's row tiles (64-128 rows) are mostly padding, every query head of a kv head reads the same
// keys again, and its grid (batch x heads x row tiles) can leave most SMs idle while each block streams a whole K/V
// alone. The kv-cache kernel (sm80/kvcache_kernel.cuh) does what such calls need: the query heads that share a kv head
// fill one tile together (each key read once per kv head) and the keys are split across blocks, merged by their LSEs.
// A forward over dense K/V is a kv-cache call with a full cache and nothing to append, so that is how it runs.

namespace {

constexpr const char* kPackedVariable = "FLASHATTN_FORWARD_PACKED";  // "0" never, "1" wherever it applies
std::atomic<int64_t> g_packed_launches{0};

// The forward's params as a kv-cache call: K/V the dense cache (one entry a sequence), every sequence's cache full.
AttnParams as_kvcache_call(const AttnParams& p) {
    AttnParams run = p;
    run.op = OpKind::kvcache;
    run.cache_seqlens = nullptr;
    run.cache_seqlen = p.seqlen_k;
    run.batch_cache = p.batch;
    run.num_splits = 0;  // the heuristic's count
    return run;
}

// What the kv-cache kernel cannot take from a forward: ragged batches, dropout, the probabilities output.
bool packed_forward_applies(const AttnParams& p) {
    return p.op == OpKind::forward && !p.is_varlen && p.dropout_p == 0.f && !p.attn_probs && p.seqlen_k > 0 &&
           sm80_launchers_or_none(p).kvc != nullptr;
}

size_t packed_forward_workspace_bytes(const AttnParams& p) { return kvc_plan_for(as_kvcache_call(p)).workspace_bytes; }

void run_packed_forward(const AttnParams& p) {
    AttnParams run = as_kvcache_call(p);
    KvcPlan plan = kvc_plan_for(run);
    // workspace_size() asks for the splits' partial results; a caller who passes no (or too little) workspace gets
    // the same result without splitting the keys.
    if (p.workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && !p.workspace)) {
        run.num_splits = 1;
        plan = kvc_plan_for(run);
    }
    require_aligned_workspace(run);
    launch_kvc(run, plan);
    g_packed_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

// The rule, from bench/bench_short_q.py on an H100 (head dim 128, 32 query heads on 8 or 32 kv heads, batch 1-32,
// 1k-16k keys; bench/results/2026-11-24_h100_session10.md). Packed against tiled, with the Ampere-class kv-cache
// kernel: 1.4-4.6x with 4 query heads a kv head while they fit one tile (16 query rows); 1.04-1.8x where the tiled
// grid is smaller than the GPU and each query row has many keys; 0.4-0.95x elsewhere (many query rows, or a full
// grid, over which the tiled forward's copy-engine loads stream K/V faster than that kernel's). With the Hopper
// kv-cache kernel (its products by wgmma, its loads by the copy engine), GQA packs up to 256 rows (64 query rows of 4
// heads: 1.3-2.0x at 4k keys, where 1024 rows read 0.75x).
constexpr int64_t kPackedMinKeys = 256;         // fewer keys: nothing to stream, nothing worth splitting
constexpr int64_t kPackedMaxRows = 64;          // GQA: packed rows (query rows x query heads a kv head) of one tile
constexpr int64_t kPackedMaxRowsHopper = 256;   // the same where the Hopper kv-cache kernel runs the packed forward
constexpr int64_t kPackedMaxSeqlenQ = 128;      // beyond, the tiled forward's tensor-core tiles win
constexpr int64_t kPackedMinKeysPerRow = 16;    // keys per query row below which the same holds
constexpr int64_t kTiledBlockM = 128;           // the tiled forward's query rows a block (head dim 128)
constexpr int64_t kPackedGridBlocks = 132;      // a tiled grid below this (an H100's SMs) leaves SMs idle

bool use_packed_forward(const AttnParams& p) {
    if (!packed_forward_applies(p)) return false;
    const char* choice = std::getenv(kPackedVariable);
    if (choice && std::strcmp(choice, "0") == 0) return false;
    if (choice && std::strcmp(choice, "1") == 0) return true;
    // Whether the Hopper kv-cache kernel would run it: asked only where the answer matters (GQA rows between the two
    // limits), and "no" where the device cannot be asked (a machine without a GPU sizing a workspace).
    auto hopper = [&] {
        try {
            return use_sm90_kvcache(as_kvcache_call(p));
        } catch (const Error&) {
            return false;
        }
    };
    const int64_t rows = int64_t(p.seqlen_q) * (p.nheads / std::max(p.nheads_k, 1));
    const bool ask = p.nheads > p.nheads_k && rows > kPackedMaxRows && rows <= kPackedMaxRowsHopper;
    return packed_forward_pays(p.batch, p.seqlen_q, p.seqlen_k, p.nheads, p.nheads_k, ask && hopper());
}

bool packed_forward_pays(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int nheads, int nheads_k,
                         bool hopper_kvcache) {
    if (seqlen_k < kPackedMinKeys) return false;
    const int64_t group = nheads / std::max(nheads_k, 1);
    // GQA: each key is read once for all the query heads of its kv head instead of once for each.
    if (group > 1 && seqlen_q * group <= (hopper_kvcache ? kPackedMaxRowsHopper : kPackedMaxRows)) return true;
    // Else only where the tiled forward would leave SMs idle (the split keys fill them) and its tiles would have
    // little to do.
    const int64_t tiled_blocks = batch * nheads * ((seqlen_q + kTiledBlockM - 1) / kTiledBlockM);
    return tiled_blocks < kPackedGridBlocks && seqlen_q <= kPackedMaxSeqlenQ &&
           seqlen_k >= kPackedMinKeysPerRow * seqlen_q;
}

int64_t packed_forward_launches() { return g_packed_launches.load(std::memory_order_relaxed); }

std::string compiled_kernels_summary() {
    std::ostringstream os;
    os << "Ampere-class (mma.sync) forward, backward and kv-cache forward: float16, bfloat16 x head dims";
    for (int b : kHeadDimBuckets) os << ' ' << b;
    os << " (other head dims up to 256, multiples of 8, run in the next bucket); archs " << FLASHATTN_CUDA_ARCHS;
    if (sm90a_compiled())
        os << "; Hopper (wgmma, TMA) forward: float16, bfloat16 x head dims up to 256 (q/k and v equal, or q/k up "
              "to 192 with v up to 128), the default on compute capability 9.0 (FLASHATTN_FORWARD_PATH=sm80 turns it "
              "off); dropout and return_attn_probs run on the Ampere-class forward, as does the backward";
    if (sm90a_compiled())
        os << "; Hopper kv-cache forward (copy-engine K/V tiles): float16, bfloat16 x head dims up to 128, dense caches "
              "and paged ones without cache_leftpad, the default on compute capability 9.0 (FLASHATTN_KVCACHE_PATH=sm80 "
              "turns it off)";
    os << "; forwards with few query rows (with GQA up to 64 packed rows, 256 on the Hopper kv-cache kernel; or a grid "
          "smaller than the GPU) run packed on the kv-cache kernel, keys split (FLASHATTN_FORWARD_PACKED=0 turns it off)";
    return os.str();
}

}  // namespace flashattn::kernels
