// Launching the Hopper forward: tensor maps for Q, K and V, the grid, the shared memory. Instances: float16,
// bfloat16 x head dims 64, 128 x {serial1, specialised with 128-key tiles, specialised with 176-key tiles}, head dim
// 64 with three consumer warpgroups, and in the specialised schedule alone head dim 256 (64- and 80-key tiles) and
// q/k head dim 192 with v head dim 128; head dims below a bucket are zero-filled by the copy engine.
// FLASHATTN_SM90_SCHEDULE picks the schedule (bench/NOTES_sm90.md has each one's measurements; unset:
// sm90_default_schedule, specialised above head dim 64, specialised3 for long rows at 64, serial1 otherwise):
//   serial1     one warpgroup a block, each product waited for at once, 64-key tiles
//   specialised a producer warpgroup and two overlapped consumer warpgroups taking turns
//   specialised_free  the same without turns
//   specialised3 at head dim 64: three consumer warpgroups taking turns, 192 query rows a block (elsewhere as
//               specialised)
// Key tiles of the specialised schedule where no causal or window mask applies: 176 keys up to head dim 128 from
// 4096 keys on (128 otherwise), 80 at head dim 256 (64 otherwise), at head dim 256 causal too where rows see 1024
// keys or more on average: fewer softmax rounds and barriers per product.
// FLASHATTN_SM90_BLOCK_N=128 keeps the narrower tiles everywhere, =wide takes the wider ones everywhere (masks too).
// The specialised kernel runs one block a work tile, or persistent, one block an SM looping over the tiles with two Q
// tiles in flight and the output stored by the copy engine (up to head dim 128 with the 128-key tiles, no varlen):
// by default at head dims 65-128 where rows see fewer than 3072 keys on average; FLASHATTN_SM90_PERSISTENT=1 / 0 forces
// it on / off. The consumer warpgroups take turns issuing their products except at head dim 256 where rows see 2048
// keys or more on average (specialised_free: never). Where no mask or varlen applies and the last wave of work tiles
// is partly full, the one-tile kernel may run those tiles in parts over their keys (below, tail_split_of). Every
// choice is made once a launch (launch_plan, tail_split_of).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_props.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/common/func_attributes.h"
#include "kernels/sm90/fwd_kernel.cuh"
#include "kernels/sm90/fwd_specialised_kernel.cuh"
#include "kernels/sm90/fwd_tail_split.cuh"
#include "kernels/sm90/fwd_sm90.h"
#include "kernels/sm90/tensor_map.h"

namespace flashattn::kernels {

namespace {

constexpr int kSmallBucket = 64, kLargeBucket = 128, kHugeBucket = 256;
// Above kLargeBucket only the specialised schedule is compiled, with 64-key tiles: O alone is 128 registers a thread
// at head dim 256, and S, P and O of a 128-key tile would not fit a consumer's 240. Without masks 80-key tiles
// (S 40 and P 20 registers; Q and two stages of K and V take 225 KB of shared memory).
constexpr int kHugeBlockN = 64, kHugeWideBlockN = 80;
// q/k head dims in (128, 192] with v head dims up to 128 (the 192/128 shape of multi-head latent attention): the
// specialised schedule, 128-key tiles (S, P and an O of 128 columns fit as at head dim 128).
constexpr int kWideQkBucket = 192;
bool wide_qk_narrow_v(const AttnParams& p) {
    return p.head_dim > kLargeBucket && p.head_dim <= kWideQkBucket && p.head_dim_v <= kLargeBucket;
}
// Key tiles of the specialised schedule up to head dim 128 where every key is visible to every row: S 88, P 44 and
// O 64 registers a thread at head dim 128; 2 x (K + V) stages and Q take 209 KB of shared memory.
constexpr int kWideBlockN = 176;
// Head dim 64 with three consumer warpgroups (192 query rows a block): a consumer holds 160 registers, room for S, P
// and O of 128-key tiles (64 + 32 + 32).
constexpr int kThreeWgBlockN = 128;
// An environment variable's value, "" where unset.
std::string env_value(const char* name) {
    const char* value = std::getenv(name);
    return value ? value : "";
}

// ----- what the copy engine can address -----------------------------------------------------------------------------

constexpr int64_t kTmaStrideElems = 8;  // the copy engine's strides are multiples of 16 bytes
constexpr uintptr_t kTmaBaseAlign = 16;

// A size-1 dimension's stride is never stepped (the API records it as 0); the encoder still wants a valid one: the
// stride a packed tensor would have there, from the dimension inside it.
int64_t usable_stride(int64_t stride, int extent, int64_t inner_stride, int64_t inner_extent) {
    return extent == 1 ? inner_stride * inner_extent : stride;
}
int64_t packed_row_elems(int head_dim) { return (head_dim + kTmaStrideElems - 1) / kTmaStrideElems * kTmaStrideElems; }

bool tma_addressable(const void* base, int head_dim, int64_t row, int64_t head, int64_t batch, int rows, int heads,
                     int batches) {
    auto fits = [](int64_t stride) { return stride > 0 && stride % kTmaStrideElems == 0; };
    row = usable_stride(row, rows, packed_row_elems(head_dim), 1);
    head = usable_stride(head, heads, row, rows);
    batch = usable_stride(batch, batches, head, heads);
    return reinterpret_cast<uintptr_t>(base) % kTmaBaseAlign == 0 && fits(row) && fits(head) && fits(batch);
}

// ----- the choices: each made once a launch (LaunchPlan) ------------------------------------------------------------

// The keys a query row sees, averaged over rows (causal halves it, a window bounds it); varlen: of the padded shape.
constexpr int kMeanKeysSamples = 16;  // rows sampled: the visible range changes linearly along rows
int64_t mean_visible_keys(const AttnParams& p) {
    int64_t keys = 0;
    for (int i = 0; i < kMeanKeysSamples; ++i) {
        const int64_t row = (2 * i + 1) * int64_t(p.seqlen_q) / (2 * kMeanKeysSamples);
        const KeyRange r = visible_keys(row, p.seqlen_q, p.seqlen_k, p.window_left, p.window_right);
        keys += std::max<int64_t>(0, r.end - r.begin);
    }
    return keys / kMeanKeysSamples;
}

// From the sweeps of bench/NOTES_sm90.md: above head dim 64 the specialised schedule leads every other by 20-40%. At
// head dim 64 the one-warpgroup serial blocks lead unless rows see many keys on average; there the three consumer
// warpgroups do. A/B, three interleaved runs (v8), specialised3 / the previous default against cuDNN: 0.994 / 0.949
// at 4k, 1.023 / 0.893 at 8k, 1.064 / 0.949 at 16k non-causal; 0.918 / 0.882 at 8k and 1.001 / 0.974 at 16k causal
// (4096 and 8192 keys a row on average); behind at 2k non-causal (0.961 / 0.987) and 4k causal (0.887 / 0.909).
constexpr int64_t kSpecialisedMinMeanKeys = 4096;
// With ALiBi, though, long rows at head dim 64 take the two consumer warpgroups: the bias rises by the head's slope
// per key toward a row's own position, past 2^8 a key tile for the steeper slopes, so the speculative softmax fails
// step after step; the three-warpgroup instance has no registers for the exact fallback (fwd_specialised_kernel.cuh,
// kAdaptive) and computed such steps twice (0.55x on rising scores, bench/NOTES_sm90.md v32).
const char* default_schedule(const AttnParams& p, int64_t mean_keys) {
    if (p.head_dim > kSmallBucket) return "specialised";
    if (mean_keys < kSpecialisedMinMeanKeys) return "serial1";
    return p.alibi_slopes != nullptr ? "specialised" : "specialised3";
}

// The persistent kernel writes its output by the copy engine through a tensor map over the padded output: not for
// varlen (the map spans the packed rows, so a tile's rows past its sequence would land in the next one).
bool persistent_output_ok(const AttnParams& p) {
    return !p.is_varlen && tma_addressable(p.out, p.head_dim_v, p.out_row_stride, p.out_head_stride,
                                           p.out_batch_stride, p.seqlen_q, p.nheads, p.batch);
}
// Where the persistent kernel measured ahead of one block a tile (bench/NOTES_sm90.md v12; interleaved A/B at hd128,
// persistent / one-tile: +15.0 / +6.5% at seqlen 512 non-causal / causal, +9.8 / +8.9% at 1k, +0.7 / +5.6% at 2k,
// +0.7 / +1.4% at 4k; at 8k-16k the one-tile kernel with its wide key tiles led by 7% and more; with the lazy
// softmax, v14: +1.9 / +0.6% at 2k, -1.3 / +3.3% at 4k, -2.6 / -0.1% at 8k): head dims above 64 up to 128 (at 64 the
// serial kernel's two blocks an SM lead; above 128 two Q tiles do not fit beside the K/V stages), rows seeing fewer
// than 3072 keys on average (4k causal, 2049, in; 4k non-causal and 8k causal, 4096, out). The persistent kernel keeps
// the narrower tiles: with the loop over work tiles live beside them, S, P and O of the wider ones spill (ptxas: 224
// bytes at 176 keys, 412 at 80 keys and head dim 256), so those are not compiled.
constexpr int64_t kPersistentMaxMeanKeys = 3072;
bool default_persistent(const AttnParams& p, int64_t mean_keys) {
    return p.head_dim > kSmallBucket && p.head_dim <= kLargeBucket && p.head_dim_v == p.head_dim &&
           mean_keys < kPersistentMaxMeanKeys && persistent_output_ok(p);
}
// FLASHATTN_SM90_PERSISTENT: 1 the persistent kernel wherever it is compiled and can store the output, 0 never,
// unset the default above.
bool persistent_wanted(const AttnParams& p, int64_t mean_keys) {
    const std::string forced = env_value("FLASHATTN_SM90_PERSISTENT");
    if (forced == "1") return persistent_output_ok(p);
    if (forced == "0") return false;
    return default_persistent(p, mean_keys);
}

// Up to head dim 128 the 176-key tiles pay only with enough of them a block (the pipeline's fill and drain weigh more
// in a short block). A/B at hd128 non-causal, three interleaved runs (bench/NOTES_sm90.md, v6): wide / narrow 0.956 at
// seqlen 512, 0.960 at 1k, 0.985 at 2k, 1.006 at 4k (and +7% at 8k in a full sweep).
constexpr int kWideMinKeys = 4096;
// At head dim 256 the 80-key tiles pay with a causal mask too once rows see 1024 keys on average (interleaved A/B,
// v8: +4.0% at 2k, +6.2% at 4k, +6.6% at 8k, +9.0% at 16k causal; -3.9% at 512).
constexpr int64_t kHugeWideCausalMinMeanKeys = 1024;
// Above head dim 64 up to 128 they lost with a causal mask in v8 (-4 to -13% at 512-2k, and at 8k-16k). Since the
// wait for P V sits below half of the exponentials (bench/NOTES_sm90.md v17) they pay where rows see 4096 keys or
// more on average: interleaved A/B, wide / 128 keys, +2.2% / +2.7% at 8k and +6.4% / +4.6% at 16k causal (two runs).
constexpr int64_t kLargeWideCausalMinMeanKeys = 4096;
bool wide_key_tiles(const AttnParams& p, int64_t mean_keys, bool persistent) {
    const std::string forced = env_value("FLASHATTN_SM90_BLOCK_N");
    if (forced == "128" || persistent) return false;
    if (forced == "wide") return true;  // masks too: the mask edges then cross the wide tiles
    const bool causal_only = p.window_left < 0 && p.window_right == 0;
    if (p.head_dim > kLargeBucket && causal_only) return mean_keys >= kHugeWideCausalMinMeanKeys;
    if (p.head_dim > kSmallBucket && causal_only && mean_keys >= kLargeWideCausalMinMeanKeys) return true;
    if (p.window_left >= 0 || p.window_right >= 0) return false;
    return p.head_dim > kLargeBucket || p.seqlen_k >= kWideMinKeys;
}

// Turns between the consumer warpgroups (fwd_specialised_kernel.cuh): at head dim 256 they cost once rows are long.
// Interleaved A/B at hd256 without / with turns (bench/NOTES_sm90.md v14): +2.9 / +6.7 / +4.1% at 4k / 8k / 16k
// non-causal, +2.1 / +2.7 / +3.1% causal, +0.4 / +0.8% at 2k (+3.7% in a second run), -1.4 to 0% at 512-1k. Up to
// head dim 128 they stay (0.97-1.00 without).
constexpr int64_t kHugeFreeMinMeanKeys = 2048;
bool takes_turns(const AttnParams& p, const std::string& schedule, int64_t mean_keys) {
    if (schedule == "specialised_free") return false;
    if (p.head_dim > kLargeBucket && !wide_qk_narrow_v(p)) return mean_keys < kHugeFreeMinMeanKeys;
    return true;
}

// What a launch runs.
struct LaunchPlan {
    std::string schedule;  // serial1, specialised, specialised_free or specialised3 (FLASHATTN_SM90_SCHEDULE)
    bool persistent;       // the persistent kernel, where the instance has one
    bool wide;             // the wide key tiles
    bool take_turns;
};
LaunchPlan launch_plan(const AttnParams& p) {
    const int64_t mean_keys = mean_visible_keys(p);
    LaunchPlan plan;
    plan.schedule = env_value("FLASHATTN_SM90_SCHEDULE");
    if (plan.schedule.empty()) plan.schedule = default_schedule(p, mean_keys);
    plan.persistent = persistent_wanted(p, mean_keys);
    plan.wide = wide_key_tiles(p, mean_keys, plan.persistent);
    plan.take_turns = takes_turns(p, plan.schedule, mean_keys);
    return plan;
}

// ----- the last wave's split (fwd_tail_split.cuh) -------------------------------------------------------------------

// The one-tile kernel, where every work tile sees the same keys (no causal or window mask, no varlen): with more tiles
// than SMs and a partly full last wave of r tiles, those r tiles run as k parts each over their n key tiles (k up to
// kTailMaxParts, each part at least kTailMinPartTiles key tiles). The last wave then takes ceil(r k / SMs) rounds of
// ceil(n / k) / n of a tile, and the parts' fp32 rows and LSEs are written and read back once by the combine kernel,
// which also costs a launch. Both are reckoned in microseconds: a tile's time from its products at kSmTflops a SM,
// the traffic at kDeviceBytesPerUs. The k that makes the last wave shortest is taken where it saves at least
// kTailMinSavingUs on the whole tile. (Interleaved A/B at hd128 with 2048 tiles on 132 SMs, a model that left the
// traffic out: +1.3 / +1.9% at 16k, 0 / +0.3% at 8k, -3.7 / -1.6% at 4k, where its 36 MB of parts cost as much as
// they saved.) FLASHATTN_SM90_TAIL_SPLIT: "0" never; "R,K" the last R tiles in K parts wherever a split can run.
constexpr int kTailMaxParts = 8, kTailMinPartTiles = 2;
constexpr double kSmTflops = 650.0 / 132;      // the kernel's rate at hd128 8k on the H100, a SM (TFLOP/s)
constexpr double kDeviceBytesPerUs = 3.0e6;    // the H100's measured device copy rate (3.0 TB/s)
constexpr double kCombineLaunchUs = 5.0;       // the combine kernel's launch and ramp
constexpr double kTailMinSavingUs = 10.0;      // below this the split is not worth its risk of noise
std::atomic<int64_t> g_tail_splits{0};

// The instances with a split form (fwd_sm90_specialised_kernel's kSplit): the one-tile kernels that long unmasked rows
// take, the wide key tiles up to head dim 256 and head dim 64's three consumer warpgroups. Compiling it for every
// instance would double the one-tile kernels' build for shapes that never split.
template <class T>
constexpr bool has_tail_split() {
    constexpr bool kWideTiles = T::kBlockN == kWideBlockN || T::kBlockN == kHugeWideBlockN;
    return T::kSchedule == Sm90Schedule::specialised && T::kHeadDimV == T::kHeadDim &&
           (kWideTiles || T::kWarpgroups == 3);
}

template <class T>
Sm90TailSplit tail_split_of(const AttnParams& p, bool persistent) {
    Sm90TailSplit split;
    if (!has_tail_split<T>() || persistent) return split;
    if (p.causal || p.window_left >= 0 || p.window_right >= 0 || p.is_varlen || p.seqused_k || p.seqlen_k <= 0)
        return split;
    const int64_t total = int64_t((p.seqlen_q + T::kBlockM - 1) / T::kBlockM) * p.batch * p.nheads;
    const int key_tiles = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
    const std::string forced = env_value("FLASHATTN_SM90_TAIL_SPLIT");
    if (forced == "0") return split;
    int64_t tiles = 0;
    int parts = 1;
    if (!forced.empty()) {
        const size_t comma = forced.find(',');
        if (comma == std::string::npos) return split;
        tiles = std::min<int64_t>(std::atoll(forced.c_str()), total);
        parts = std::atoi(forced.c_str() + comma + 1);
        if (tiles <= 0 || parts < 2 || parts > kTailMaxParts || key_tiles < parts) return split;
    } else {
        const int64_t sms = current_device_props().sm_count;
        if (sms <= 0 || total < sms || total % sms == 0) return split;
        tiles = total % sms;
        // Microseconds: one whole tile's products, and the traffic of one tile's part (its fp32 rows and LSEs, written
        // by the kernel and read by the combine).
        const double tile_us = 2.0 * T::kBlockM * double(p.seqlen_k) * (T::kHeadDim + T::kHeadDimV) / (kSmTflops * 1e6);
        const double part_bytes = double(T::kBlockM) * (T::kHeadDimV + 1) * sizeof(float);
        double best = tile_us - kTailMinSavingUs;
        for (int k = 2; k <= kTailMaxParts; ++k) {
            if (key_tiles / k < kTailMinPartTiles) continue;
            const double rounds = double((tiles * k + sms - 1) / sms);
            const double us = rounds * tile_us * ((key_tiles + k - 1) / k) / key_tiles + kCombineLaunchUs +
                              2.0 * double(tiles) * k * part_bytes / kDeviceBytesPerUs;
            if (us < best) best = us, parts = k;
        }
        if (parts < 2) return Sm90TailSplit{};
    }
    if (total + tiles * (parts - 1) > INT32_MAX) return Sm90TailSplit{};  // the grid's block count is an int
    split.first = static_cast<int>(total - tiles);
    split.tiles = static_cast<int>(tiles);
    split.parts = parts;
    return split;
}
// Its workspace: the parts' fp32 rows, then their LSEs.
template <class T>
size_t tail_split_bytes(const Sm90TailSplit& split) {
    if (split.parts <= 1) return 0;
    const size_t rows = size_t(split.tiles) * split.parts * T::kBlockM;
    return rows * T::kHeadDimV * sizeof(float) + rows * sizeof(float);
}

// ----- the launch ---------------------------------------------------------------------------------------------------

std::atomic<int64_t> g_launches{0};

CUtensorMap attention_map(const void* base, ElemType dtype, int head_dim, int rows, int heads, int batch,
                          int64_t row_stride, int64_t head_stride, int64_t batch_stride, uint32_t box_cols,
                          uint32_t box_rows) {
    const uint64_t dims[4] = {uint64_t(head_dim), uint64_t(rows), uint64_t(heads), uint64_t(batch)};
    row_stride = usable_stride(row_stride, rows, packed_row_elems(head_dim), 1);
    head_stride = usable_stride(head_stride, heads, row_stride, rows);
    batch_stride = usable_stride(batch_stride, batch, head_stride, heads);
    const uint64_t strides[3] = {uint64_t(row_stride), uint64_t(head_stride), uint64_t(batch_stride)};
    return make_tensor_map_4d_sw128(base, dtype, dims, strides, box_cols, box_rows);
}

// The rows and batches a tensor map spans: varlen tensors are one batch of packed rows.
int map_rows(const AttnParams& p, int64_t padded_rows, int64_t total_rows) {
    return static_cast<int>(p.is_varlen ? total_rows : padded_rows);
}
int map_batches(const AttnParams& p) { return p.is_varlen ? 1 : p.batch; }

template <class T>
void launch(const AttnParams& p, const LaunchPlan& plan) {
    const int batches = map_batches(p);
    const CUtensorMap map_q = attention_map(p.q, p.dtype, p.head_dim, map_rows(p, p.seqlen_q, p.total_q), p.nheads,
                                            batches, p.q_row_stride, p.q_head_stride, p.q_batch_stride, T::kBoxCols,
                                            T::kBlockM);
    const CUtensorMap map_k = attention_map(p.k, p.dtype, p.head_dim, map_rows(p, p.seqlen_k, p.total_k), p.nheads_k,
                                            batches, p.k_row_stride, p.k_head_stride, p.k_batch_stride, T::kBoxCols,
                                            T::kBlockN);
    const CUtensorMap map_v = attention_map(p.v, p.dtype, p.head_dim_v, map_rows(p, p.seqlen_k, p.total_k),
                                            p.nheads_k, batches, p.v_row_stride, p.v_head_stride, p.v_batch_stride,
                                            T::kBoxCols, T::kBlockN);
    constexpr bool kWideTiles = T::kBlockN == kWideBlockN || T::kBlockN == kHugeWideBlockN;
    // The persistent kernel is compiled for two consumer warpgroups with the narrower tiles alone, up to head dim 128
    // (two Q tiles and two stages of K and V: 192 KB of shared memory at 128; 256 KB at 256).
    constexpr bool kHasPersistent = T::kSchedule == Sm90Schedule::specialised && !kWideTiles &&
                                    T::kWarpgroups == 2 && T::kHeadDim <= kLargeBucket &&
                                    T::kHeadDimV == T::kHeadDim;
    const bool persistent = kHasPersistent && plan.persistent;
    const CUtensorMap map_o = persistent ? attention_map(p.out, p.dtype, p.head_dim_v, p.seqlen_q, p.nheads, p.batch,
                                                         p.out_row_stride, p.out_head_stride, p.out_batch_stride,
                                                         T::kBoxCols, T::kRowsPerWarpgroup)
                                         : map_q;  // unread
    // The last wave's split, where the caller's workspace has room for it (else the tiles run whole).
    Sm90TailSplit split = tail_split_of<T>(p, persistent);
    const size_t split_bytes = tail_split_bytes<T>(split);
    if (split_bytes > 0 && (!p.workspace || p.workspace_bytes < split_bytes ||
                            reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0))
        split = Sm90TailSplit{};
    if (split.parts > 1) {
        split.o = static_cast<float*>(p.workspace);
        split.lse = split.o + size_t(split.tiles) * split.parts * T::kBlockM * T::kHeadDimV;
    }
    const bool splits = split.parts > 1;
    const auto kernel = [persistent, splits] {
        if constexpr (kHasPersistent)
            return persistent ? fwd_sm90_specialised_kernel<T, true> : fwd_sm90_specialised_kernel<T, false>;
        else if constexpr (has_tail_split<T>())
            return splits ? fwd_sm90_specialised_kernel<T, false, true> : fwd_sm90_specialised_kernel<T, false>;
        else if constexpr (T::kSchedule == Sm90Schedule::specialised)
            return fwd_sm90_specialised_kernel<T, false>;
        else
            return fwd_sm90_kernel<T>;
    }();
    constexpr int kMaxSmemPerBlock = 227 * 1024;  // compute capability 9.0's opt-in limit
    constexpr int kOneTileSmem = sm90_fwd_smem_bytes<T>();
    constexpr int kPersistentSmem = kHasPersistent ? sm90_fwd_smem_bytes<T, 2>() : kOneTileSmem;
    static_assert(kOneTileSmem <= kMaxSmemPerBlock && kPersistentSmem <= kMaxSmemPerBlock,
                  "Q and the K/V stages fit one block's shared memory");
    const int kSmem = persistent ? kPersistentSmem : kOneTileSmem;
    ensure_func_attributes(kernel, kSmem, /*non_portable_clusters=*/false, "Hopper forward");
    const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
    const dim3 grid(m_blocks, p.batch, p.nheads);
    if constexpr (T::kSchedule == Sm90Schedule::specialised) {
        // Work tiles over a 1-D grid: one block a tile, or (persistent) one block an SM looping over them.
        const int64_t tiles = int64_t(m_blocks) * p.batch * p.nheads;
        const int64_t blocks = persistent ? std::min<int64_t>(tiles, current_device_props().sm_count)
                                          : tiles + int64_t(split.tiles) * (split.parts - 1);
        kernel<<<static_cast<unsigned>(blocks), T::kThreads, kSmem, static_cast<cudaStream_t>(p.stream)>>>(
            map_q, map_k, map_v, map_o, p, plan.take_turns, split);
        if (splits) {
            check_cuda(cudaGetLastError(), "Hopper forward kernel launch");
            const dim3 combine_grid(split.tiles, T::kBlockM / kTailCombineWarps);
            sm90_tail_combine<T><<<combine_grid, kTailCombineWarps * 32, 0, static_cast<cudaStream_t>(p.stream)>>>(
                p, split, m_blocks);
            g_tail_splits.fetch_add(1, std::memory_order_relaxed);
        }
    } else {
        kernel<<<grid, T::kThreads, kSmem, static_cast<cudaStream_t>(p.stream)>>>(map_q, map_k, map_v, p);
    }
    check_cuda(cudaGetLastError(), "Hopper forward kernel launch");
    g_launches.fetch_add(1, std::memory_order_relaxed);
}

// f(TraitsOf<T>{}) with the traits p's launch takes (launch_fwd_sm90, and the workspace query beside it).
template <class T>
struct TraitsOf {
    using type = T;
};
template <ElemType kElem, int kWarpgroups, Sm90Schedule kSchedule, int kBlockN, class F>
void visit_shape(const AttnParams& p, F&& f) {
    using Elem = ElemOf<kElem>;
    if (p.head_dim <= kSmallBucket)
        f(TraitsOf<Sm90FwdTraits<Elem, kSmallBucket, kWarpgroups, kSchedule, kBlockN>>{});
    else
        f(TraitsOf<Sm90FwdTraits<Elem, kLargeBucket, kWarpgroups, kSchedule, kBlockN>>{});
}

template <ElemType kElem, class F>
void visit_traits(const AttnParams& p, const LaunchPlan& plan, F&& f) {
    using Elem = ElemOf<kElem>;
    constexpr auto kSpecialised = Sm90Schedule::specialised;
    if (wide_qk_narrow_v(p)) {
        f(TraitsOf<Sm90FwdTraits<Elem, kWideQkBucket, 2, kSpecialised, 128, kLargeBucket>>{});
    } else if (p.head_dim > kLargeBucket) {
        if (plan.wide)
            f(TraitsOf<Sm90FwdTraits<Elem, kHugeBucket, 2, kSpecialised, kHugeWideBlockN>>{});
        else
            f(TraitsOf<Sm90FwdTraits<Elem, kHugeBucket, 2, kSpecialised, kHugeBlockN>>{});
    } else if (plan.schedule == "specialised3" && p.head_dim <= kSmallBucket) {
        f(TraitsOf<Sm90FwdTraits<Elem, kSmallBucket, 3, kSpecialised, kThreeWgBlockN>>{});
    } else if (plan.schedule == "specialised" || plan.schedule == "specialised_free" ||
               plan.schedule == "specialised3") {  // specialised3 is compiled at head dim 64 alone
        if (plan.wide)
            visit_shape<kElem, 2, kSpecialised, kWideBlockN>(p, f);
        else
            visit_shape<kElem, 2, kSpecialised, 128>(p, f);
    } else {
        visit_shape<kElem, 1, Sm90Schedule::serial, 64>(p, f);
    }
}
template <class F>
void visit_traits(const AttnParams& p, const LaunchPlan& plan, F&& f) {
    if (p.dtype == ElemType::bf16)
        visit_traits<ElemType::bf16>(p, plan, f);
    else
        visit_traits<ElemType::f16>(p, plan, f);
}

// Whether the launch of T for this plan runs the persistent kernel (launch's rule).
template <class T>
bool runs_persistent(const LaunchPlan& plan) {
    constexpr bool kWideTiles = T::kBlockN == kWideBlockN || T::kBlockN == kHugeWideBlockN;
    return T::kSchedule == Sm90Schedule::specialised && !kWideTiles && T::kWarpgroups == 2 &&
           T::kHeadDim <= kLargeBucket && T::kHeadDimV == T::kHeadDim && plan.persistent;
}

}  // namespace

const char* sm90_default_schedule(const AttnParams& p) { return default_schedule(p, mean_visible_keys(p)); }

bool sm90_wide_key_tiles(const AttnParams& p) { return launch_plan(p).wide; }

bool sm90_default_persistent(const AttnParams& p) { return default_persistent(p, mean_visible_keys(p)); }

bool sm90_takes_turns(const AttnParams& p) { return launch_plan(p).take_turns; }

bool sm90_forward_handles(const AttnParams& p) {
    if (p.op != OpKind::forward) return false;
    if (p.dtype != ElemType::f16 && p.dtype != ElemType::bf16) return false;
    // Dropout and the attention-probabilities output stay with the Ampere-class kernel.
    if (p.dropout_p > 0.f || p.attn_probs) return false;
    if (p.head_dim > kHugeBucket || p.head_dim % 8 != 0 || p.head_dim_v % 8 != 0) return false;
    if (p.head_dim != p.head_dim_v && !wide_qk_narrow_v(p)) return false;
    if (p.batch <= 0 || p.seqlen_q <= 0 || p.seqlen_k <= 0) return false;
    if (p.is_varlen && (p.total_q <= 0 || p.total_k <= 0)) return false;  // a tensor map needs rows
    // Work tiles are counted in an int over a 1-D grid (the smallest row block, 64, counts the most).
    constexpr int64_t kSmallestBlockM = 64;
    if ((p.seqlen_q + kSmallestBlockM - 1) / kSmallestBlockM * p.batch * int64_t(p.nheads) > INT32_MAX) return false;
    // The output is written 4 bytes (two elements) at a time.
    if (reinterpret_cast<uintptr_t>(p.out) % 4 != 0 || p.out_row_stride % 2 != 0 ||
        (p.nheads > 1 && p.out_head_stride % 2 != 0) || (p.batch > 1 && p.out_batch_stride % 2 != 0))
        return false;
    const int batches = map_batches(p);
    const int q_rows = map_rows(p, p.seqlen_q, p.total_q), k_rows = map_rows(p, p.seqlen_k, p.total_k);
    return tma_addressable(p.q, p.head_dim, p.q_row_stride, p.q_head_stride, p.q_batch_stride, q_rows, p.nheads,
                           batches) &&
           tma_addressable(p.k, p.head_dim, p.k_row_stride, p.k_head_stride, p.k_batch_stride, k_rows, p.nheads_k,
                           batches) &&
           tma_addressable(p.v, p.head_dim_v, p.v_row_stride, p.v_head_stride, p.v_batch_stride, k_rows, p.nheads_k,
                           batches);
}

void launch_fwd_sm90(const AttnParams& p) {
    const LaunchPlan plan = launch_plan(p);
    visit_traits(p, plan, [&](auto t) { launch<typename decltype(t)::type>(p, plan); });
}

size_t sm90_forward_workspace_bytes(const AttnParams& p) {
    const LaunchPlan plan = launch_plan(p);
    size_t bytes = 0;
    visit_traits(p, plan, [&](auto t) {
        using T = typename decltype(t)::type;
        bytes = tail_split_bytes<T>(tail_split_of<T>(p, runs_persistent<T>(plan)));
    });
    return bytes;
}

int64_t sm90_forward_tail_splits() { return g_tail_splits.load(std::memory_order_relaxed); }

int64_t sm90_forward_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace flashattn::kernels

#if defined(FLASHATTN_TIMELINE) && FLASHATTN_TIMELINE
// The diagnostic build's per-block timestamps (timeline.cuh): rows of kTlEvents 64-bit values for blocks
// [0, blocks), as the last launch of the specialised kernel left them. Returns 0, or 1 on a CUDA error.
extern "C" __attribute__((visibility("default"))) int flashattn_debug_timeline(unsigned long long* out, int blocks) {
    using namespace flashattn::kernels;
    const size_t rows = static_cast<size_t>(std::min(blocks, kTimelineBlocks));
    return cudaMemcpyFromSymbol(out, g_timeline, rows * kTlEvents * sizeof(unsigned long long)) == cudaSuccess ? 0 : 1;
}
// The persistent kernel's per-work-tile timestamps (timeline.cuh): for blocks [0, blocks), kTileTimelineTiles rows of
// kTtEvents values each, as its last launch left them (rows of tiles a block did not run are as an earlier launch
// left them, or 0). Returns 0, or 1 on a CUDA error.
extern "C" __attribute__((visibility("default"))) int flashattn_debug_tile_timeline(unsigned long long* out,
                                                                                    int blocks) {
    using namespace flashattn::kernels;
    const size_t n = static_cast<size_t>(std::min(blocks, kTileTimelineBlocks)) * kTileTimelineTiles * kTtEvents;
    return cudaMemcpyFromSymbol(out, g_tile_timeline, n * sizeof(unsigned long long)) == cudaSuccess ? 0 : 1;
}
#endif
