// The Hopper kv-cache kernel's shared tiles (KvcPlan::share_tiles): a grid of one block a unit (batch x kv heads),
// all resident at once, where the blocks that finish their own unit early take chunks of the others' tiles.
//
// Why: with one such wave, every block streams the same bytes, but not at the same rate. On an H100 at two blocks an
// SM, the blocks on some groups of SMs (SM indices 32-47 and 80-95 on the board measured) finish their unit 10-15%
// before the rest, every call, and the call lasts until the slowest block's last tile (bench/kvc_timeline.py:
// batch 64 x 32 kv heads x 1k keys, mean block end 340 us, last 362). cuDNN's kernel (more, smaller blocks, several
// waves) gets the same balance from the block scheduler; our blocks' start and end cost too much to do the same
// (bench/NOTES.md, "kv-cache: shared tiles").
//
// How: a unit's tiles are chunks of KvcPlan::steal_chunk_tiles. Its own block takes the first half without asking,
// then claims chunks one at a time from the unit's counter (KvcUnitState::claimed, the chunks claimed past the
// first half). A block whose unit has no chunk left looks for the unit with the most unclaimed chunks (32 at a time,
// a lane each), takes a slot for its partial result there, and claims chunks of that unit while it has any. The
// producer warp makes the claims and tells the consumers each tile's unit and slot (KvcWork, beside the K stage the
// tile lands in); a unit's tiles one block computed in a row are one run, one online softmax. A run that computed
// all of its unit's tiles writes the output; any other writes its normalised partial O and LSE to its slot, and the
// run that finishes the unit's last tile (KvcUnitState::done) merges the slots, as the split-KV combine does.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "kernels/sm80/kvcache_common.cuh"
#include "kernels/sm80/kvcache_plan.h"

namespace flashattn::kernels {

// A tile's place, written by the producer beside the K stage it lands in (before the stage's arrival) and read by the
// consumers once the stage is full. unit < 0: no more tiles (the stage's barrier completes without copies). run_end:
// the run's last tile (its block found no further chunk of the unit), so the consumers write the run's result at
// once rather than after the producer's search for the next unit.
struct KvcWork {
    int unit, tile, slot, run_end;
};
constexpr int kKvcNoWork = -1;

// Chunks of a unit of `tiles` tiles, and those its own block takes without a claim (the first half).
__device__ __forceinline__ int kvc_chunks(int tiles, int chunk_tiles) { return (tiles + chunk_tiles - 1) / chunk_tiles; }
__device__ __forceinline__ int kvc_own_chunks(int chunks) { return (chunks + 1) / 2; }

__device__ __forceinline__ KvcUnitState* kvc_unit_state(const KvcPlan& plan, int unit) {
    return reinterpret_cast<KvcUnitState*>(plan.steal_state) + unit;
}
__device__ __forceinline__ int* kvc_slot_flags(const KvcPlan& plan, int units, int unit) {
    return plan.steal_state + units * int(sizeof(KvcUnitState) / sizeof(int)) + unit * kKvcStealSlots;
}
// Successful steals since the module loaded (tests read it: kvc_sm90_steals).
__device__ unsigned long long g_kvc_steals;

// Units with no chunk left to claim (after the flags): a block that finds every unit so stops looking at once.
__device__ __forceinline__ int* kvc_exhausted(const KvcPlan& plan, int units) {
    return plan.steal_state + units * int(sizeof(KvcUnitState) / sizeof(int) + kKvcStealSlots);
}
// Another block's counters: read at L2 (never a stale L1 line).
__device__ __forceinline__ int kvc_load_shared_int(const int* at) { return __ldcg(at); }

// A claim of the next chunk of `unit` past its own block's half, in two steps so that its latency hides under the
// copies issued between them: lane 0's atomic (the chunks claimed before it), then the chunk for every lane. The
// claim that first finds the unit without chunks counts it exhausted.
__device__ __forceinline__ int kvc_claim_issue(const KvcPlan& plan, int unit, int lane) {
    return lane == 0 ? atomicAdd(&kvc_unit_state(plan, unit)->claimed, 1) : 0;
}
__device__ __forceinline__ int kvc_claim_result(const KvcPlan& plan, int units, int issued, int chunks, int own,
                                                int lane) {
    const int claimed = __shfl_sync(0xffffffffu, issued, 0);
    if (lane == 0 && claimed == chunks - own) atomicAdd(kvc_exhausted(plan, units), 1);
    return own + claimed;
}
// Chunks a unit must have left for a steal to pay: a stealer starts later than the unit's own block goes on (its
// victim search, Q's gather, the first copy's latency) and ends with a partial result to write and merge.
constexpr int kKvcStealMinChunks = 2;

// A unit to take chunks from, for the whole producer warp: the unit (not `home`) with the most unclaimed chunks among
// each 32 in turn, where a slot is still free and the claim succeeds. Returns false where no unit has a chunk left.
struct KvcSteal {
    int unit, slot, chunk;
};
template <int kBlockM>
__device__ __forceinline__ bool kvc_find_victim(const AttnParams& p, const KvcPlan& plan, int home, int units,
                                                int keys_per_tile, int lane, KvcSteal& out) {
    for (int base = 1; base < units;) {
        if (kvc_load_shared_int(kvc_exhausted(plan, units)) >= units) return false;  // nothing left anywhere
        const int v = (home + base + lane) % units;
        int left = 0;
        if (base + lane < units) {
            const KvcBlock vb(p, 1, kBlockM, keys_per_tile, plan.head_group, v);
            const int chunks = kvc_chunks(vb.tiles.end - vb.tiles.begin, plan.steal_chunk_tiles);
            const KvcUnitState* st = kvc_unit_state(plan, v);
            const bool slot_free = kvc_load_shared_int(&st->slots) < kKvcStealSlots - 1;
            left = slot_free ? chunks - kvc_own_chunks(chunks) - kvc_load_shared_int(&st->claimed) : 0;
            if (left < kKvcStealMinChunks) left = 0;
        }
        // The lane with the most chunks left (the lowest such lane on ties).
        int best = left, best_lane = lane;
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) {
            const int other = __shfl_xor_sync(0xffffffffu, best, offset);
            const int other_lane = __shfl_xor_sync(0xffffffffu, best_lane, offset);
            if (other > best || (other == best && other_lane < best_lane)) best = other, best_lane = other_lane;
        }
        if (best <= 0) {  // none of these 32 has a chunk left: the next 32
            base += 32;
            continue;
        }
        const int victim = __shfl_sync(0xffffffffu, v, best_lane);
        int slot = 0, chunk = 0, chunks = 0;
        if (lane == best_lane) {
            const KvcBlock vb(p, 1, kBlockM, keys_per_tile, plan.head_group, victim);
            chunks = kvc_chunks(vb.tiles.end - vb.tiles.begin, plan.steal_chunk_tiles);
            const int own = kvc_own_chunks(chunks);
            KvcUnitState* st = kvc_unit_state(plan, victim);
            slot = 1 + atomicAdd(&st->slots, 1);  // slot 0 is the unit's own block's
            chunk = chunks;
            if (slot < kKvcStealSlots) {
                const int claimed = atomicAdd(&st->claimed, 1);
                if (claimed == chunks - own) atomicAdd(kvc_exhausted(plan, units), 1);
                chunk = own + claimed;
            }
        }
        slot = __shfl_sync(0xffffffffu, slot, best_lane);
        chunk = __shfl_sync(0xffffffffu, chunk, best_lane);
        chunks = __shfl_sync(0xffffffffu, chunks, best_lane);
        if (chunk < chunks) {
            out = KvcSteal{victim, slot, chunk};
            if (lane == 0) atomicAdd(&g_kvc_steals, 1ull);
            return true;
        }
        // Taken meanwhile (its slots or its chunks): look again; its counters now say so.
    }
    return false;
}

// After a run's partial rows and LSEs are in its slot (every consumer thread's stores issued): publish them and count
// the run's tiles as done. Every consumer thread calls this; returns true in the run that finished the unit (it
// merges the slots). `flag` is smem scratch for the answer.
template <int kConsumerThreads>
__device__ __forceinline__ bool kvc_publish_run(const KvcPlan& plan, int units, int unit, int slot, int run_tiles,
                                                int unit_tiles, int tid, int* flag) {
    __threadfence();  // this thread's partial stores, before the flag and the count
    ptx::named_barrier_sync<1>(kConsumerThreads);
    if (tid == 0) {
        kvc_slot_flags(plan, units, unit)[slot] = 1;
        __threadfence();
        const int before = atomicAdd(&kvc_unit_state(plan, unit)->done, run_tiles);
        *flag = before + run_tiles == unit_tiles;
    }
    ptx::named_barrier_sync<1>(kConsumerThreads);
    const bool last = *flag != 0;
    if (last) __threadfence();  // the other runs' stores, seen through their count
    return last;
}

}  // namespace flashattn::kernels
