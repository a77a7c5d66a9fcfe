// Thin, named wrappers over the Hopper (sm_90 / sm_90a) PTX the Hopper kernels are built from: mbarriers, the
// bulk tensor copy engine (TMA), async-proxy fences, wgmma's fence / commit / wait and shared-memory descriptors,
// setmaxnreg, named barriers, and a cluster's barrier and shared memory. The wgmma multiply-adds themselves are in
// wgmma_ops.cuh (generated).
//
// Every wrapper compiles for every target; in a pass for an architecture without the instruction (sm_80, or plain
// sm_90 for the sm_90a-only wgmma and setmaxnreg) it traps, so a kernel built from them must only be launched on a
// device of the right architecture (the dispatch's job).
#pragma once

#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/common/smem_desc.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHATTN_SM90 1
#else
#define FLASHATTN_SM90 0
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASHATTN_SM90A 1
#else
#define FLASHATTN_SM90A 0
#endif

namespace flashattn::ptx {

// ----- mbarrier: a shared-memory barrier that also counts bytes delivered by the copy engine ------------------------

// Initialise with the number of arrivals that complete a phase.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
#if FLASHATTN_SM90
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals));
#else
    (void)bar, (void)arrivals;
    __trap();
#endif
}

// Make initialised mbarriers visible to the copy engine (before the __syncthreads that publishes them).
__device__ __forceinline__ void fence_mbarrier_init() {
#if FLASHATTN_SM90
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
    __trap();
#endif
}

// One arrival that also announces `bytes` the copy engine will deliver in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if FLASHATTN_SM90
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
#else
    (void)bar, (void)bytes;
    __trap();
#endif
}

// A plain arrival (consumers releasing a stage back to the producer).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if FLASHATTN_SM90
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#else
    (void)bar;
    __trap();
#endif
}

// Wait until the phase with parity `phase` (0 or 1) has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t phase) {
#if FLASHATTN_SM90
    asm volatile(
        "{\n.reg .pred done;\n"
        "wait_loop:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_loop;\n}\n" ::"r"(smem_addr(bar)),
        "r"(phase)
        : "memory");
#else
    (void)bar, (void)phase;
    __trap();
#endif
}

// ----- the bulk tensor copy engine (TMA) --------------------------------------------------------------------------

// Copy the box at coordinates (x = innermost, y) of the tensor `map` (a __grid_constant__ CUtensorMap) into shared
// memory `dst`, completing on `bar` (which must expect the box's bytes).
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, uint64_t* bar, int x, int y) {
#if FLASHATTN_SM90
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
        "[%2];\n" ::"r"(smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(x), "r"(y)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)x, (void)y;
    __trap();
#endif
}

// The same for a 3-D tensor (x innermost).
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar, int x, int y, int z) {
#if FLASHATTN_SM90
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(x), "r"(y), "r"(z)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)x, (void)y, (void)z;
    __trap();
#endif
}

// The same for a 4-D tensor (x innermost): (head dim, row, head, batch) boxes of attention tensors.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar, int x, int y, int z, int w) {
#if FLASHATTN_SM90
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
        "%6}], [%2];\n" ::"r"(smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(x), "r"(y), "r"(z), "r"(w)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)x, (void)y, (void)z, (void)w;
    __trap();
#endif
}

// An L2 eviction policy for data read once, as the kv cache is by a decode step: its lines are the first L2 gives up
// when it needs room, so the lines other work left there (a previous kernel's output, not yet written back) stay
// rather than being written back to make room for a stream nobody reads again.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
#if FLASHATTN_SM90
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
#else
    __trap();
    return 0;
#endif
}

// tma_load_4d with an L2 eviction policy (l2_policy_evict_first's) for the lines it reads.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar, int x, int y, int z, int w,
                                            uint64_t policy) {
#if FLASHATTN_SM90
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
        "{%3, %4, %5, %6}], [%2], %7;\n" ::"r"(smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(x), "r"(y), "r"(z), "r"(w), "l"(policy)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)x, (void)y, (void)z, (void)w, (void)policy;
    __trap();
#endif
}

// tma_load_4d for a 5-D map (x innermost), without and with an L2 eviction policy: the kv-cache kernel's folded K
// pieces (a page's 8-row groups and the head dim's halves as dimensions of their own).
__device__ __forceinline__ void tma_load_5d(void* dst, const void* map, uint64_t* bar, int x, int y, int z, int w,
                                            int v) {
#if FLASHATTN_SM90
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
        "%6, %7}], [%2];\n" ::"r"(smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(v)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)x, (void)y, (void)z, (void)w, (void)v;
    __trap();
#endif
}
__device__ __forceinline__ void tma_load_5d(void* dst, const void* map, uint64_t* bar, int x, int y, int z, int w,
                                            int v, uint64_t policy) {
#if FLASHATTN_SM90
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
        "{%3, %4, %5, %6, %7}], [%2], %8;\n" ::"r"(smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(v), "l"(policy)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)x, (void)y, (void)z, (void)w, (void)v, (void)policy;
    __trap();
#endif
}

// Copy the box at (x innermost, y, z, w) of `map` from shared memory (byte address src, the box's swizzled layout) to
// global memory, as one operation of this thread's current bulk async-group; parts of the box outside the tensor are
// not written.
__device__ __forceinline__ void tma_store_4d(const void* map, uint32_t src, int x, int y, int z, int w) {
#if FLASHATTN_SM90
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map),
                 "r"(src), "r"(x), "r"(y), "r"(z), "r"(w)
                 : "memory");
#else
    (void)map, (void)src, (void)x, (void)y, (void)z, (void)w;
    __trap();
#endif
}

// Close this thread's current bulk async-group (the stores issued since the last commit).
__device__ __forceinline__ void bulk_commit_group() {
#if FLASHATTN_SM90
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
    __trap();
#endif
}

// Wait until every bulk async-group of this thread has read its shared-memory source (the memory may then be reused
// or the block may exit; the global writes complete on their own).
__device__ __forceinline__ void bulk_wait_group_read_all() {
#if FLASHATTN_SM90
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#else
    __trap();
#endif
}

// Shared memory written by ordinary stores that the copy engine or wgmma reads next: each writing thread fences
// before the barrier that hands the data over.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if FLASHATTN_SM90
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
    __trap();
#endif
}

// ----- wgmma bookkeeping (the multiply-adds: wgmma_ops.cuh) ------------------------------------------------------

// Orders this warpgroup's register and shared-memory accesses before the wgmma operations that follow.
__device__ __forceinline__ void wgmma_fence() {
#if FLASHATTN_SM90A
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}

// Closes the group of wgmma operations issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
#if FLASHATTN_SM90A
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}

// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if FLASHATTN_SM90A
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#else
    __trap();
#endif
}

// Keeps the compiler from moving accesses to an accumulator across a wgmma fence / wait.
template <int kRegs>
__device__ __forceinline__ void fence_registers(float (&r)[kRegs]) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Hides a value's origin from the compiler, so that what is computed from it is computed where it is used rather
// than hoisted out of a loop and kept in registers.
__device__ __forceinline__ void opaque(uint32_t& v) { asm volatile("" : "+r"(v)); }

// v as lane 0 holds it: a value the compiler then knows to be the same across the warp, so that what is computed from
// it stays in uniform registers (wgmma descriptors are read from there) instead of ordinary ones moved over by R2UR.
// A shuffle of the whole warp: every lane must call it, never a branch that only some lanes take.
__device__ __forceinline__ int warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }

// Shared-memory matrix descriptors (smem_desc_sw128, smem_desc_advance, smem_desc_sw128_n_major): smem_desc.h.

// ----- registers and barriers -------------------------------------------------------------------------------------

// Raise / lower this warpgroup's register budget (producer warpgroups give registers to the consumers).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
#if FLASHATTN_SM90A
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
    __trap();
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
#if FLASHATTN_SM90A
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
    __trap();
#endif
}

// Named barrier kId (1..15; 0 is __syncthreads') for `threads` threads, a multiple of 32. The id is a constant:
// ptxas counts a computed one as all 16 barriers in use.
template <int kId>
__device__ __forceinline__ void named_barrier_sync(int threads) {
    static_assert(kId > 0 && kId < 16, "barrier 0 is __syncthreads'; there are 16");
    asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "r"(threads) : "memory");
}
template <int kId>
__device__ __forceinline__ void named_barrier_arrive(int threads) {
    static_assert(kId > 0 && kId < 16, "barrier 0 is __syncthreads'; there are 16");
    asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "r"(threads) : "memory");
}

// Named barrier kId for `threads` threads that also ORs a predicate over them: true where any thread passed true.
template <int kId>
__device__ __forceinline__ bool named_barrier_any(bool pred, int threads) {
    static_assert(kId > 0 && kId < 16, "barrier 0 is __syncthreads'; there are 16");
    uint32_t any;
    asm volatile(
        "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
        : "=r"(any)
        : "r"(static_cast<uint32_t>(pred)), "n"(kId), "r"(threads)
        : "memory");
    return any != 0;
}

// Named barrier kBase + n, n in [0, kCount) known only at run time (a warpgroup's own barrier): each branch names a
// constant id, so ptxas still counts the barriers in use exactly.
template <int kBase, int kCount>
__device__ __forceinline__ void named_barrier_sync_nth(int n, int threads) {
    if constexpr (kCount > 1) {
        if (n == kCount - 1) return named_barrier_sync<kBase + kCount - 1>(threads);
        return named_barrier_sync_nth<kBase, kCount - 1>(n, threads);
    } else {
        named_barrier_sync<kBase>(threads);
    }
}
template <int kBase, int kCount>
__device__ __forceinline__ void named_barrier_arrive_nth(int n, int threads) {
    if constexpr (kCount > 1) {
        if (n == kCount - 1) return named_barrier_arrive<kBase + kCount - 1>(threads);
        return named_barrier_arrive_nth<kBase, kCount - 1>(n, threads);
    } else {
        named_barrier_arrive<kBase>(threads);
    }
}

template <int kBase, int kCount>
__device__ __forceinline__ bool named_barrier_any_nth(int n, bool pred, int threads) {
    if constexpr (kCount > 1) {
        if (n == kCount - 1) return named_barrier_any<kBase + kCount - 1>(pred, threads);
        return named_barrier_any_nth<kBase, kCount - 1>(n, pred, threads);
    } else {
        return named_barrier_any<kBase>(pred, threads);
    }
}

// ----- thread block clusters: the cluster barrier and another block's shared memory (DSMEM) ----------------------

// This block's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_rank() {
#if FLASHATTN_SM90
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
#else
    __trap();
    return 0;
#endif
}

// The cluster-wide barrier, by every thread of a warp together (.aligned): arrive publishes this thread's earlier
// shared-memory writes (release), wait returns once every thread of the cluster that has not exited has arrived and
// makes their writes visible (acquire).
__device__ __forceinline__ void cluster_arrive() {
#if FLASHATTN_SM90
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if FLASHATTN_SM90
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

// Cheaper arrivals where less needs publishing. The release arrive above is a GPU-scope memory barrier in the SASS
// (MEMBAR.ALL.GPU), which waits on the memory system: microseconds at the end of a decode call.
// cluster_arrive_shared: publishes this thread's earlier writes to its own block's shared memory alone (for the
// cluster's other blocks to read), by a release fence restricted to shared::cta at cluster scope and a relaxed arrive
// (PTX ISA 8.6, CUDA 12.8; older toolkits take the release arrive).
// cluster_arrive_relaxed: publishes nothing; for a thread that wrote nothing another block reads, e.g. one that only
// keeps its shared memory alive until the others' reads of it have returned.
__device__ __forceinline__ void cluster_arrive_shared() {
#if FLASHATTN_SM90 && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
    asm volatile("fence.release.sync_restrict::shared::cta.cluster;\n" ::: "memory");
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
    cluster_arrive();
#endif
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if FLASHATTN_SM90
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}

// The address, in the cluster's shared window, of the same shared-memory location in the block of rank `rank`.
__device__ __forceinline__ uint32_t cluster_smem_addr(uint32_t smem_byte_addr, uint32_t rank) {
#if FLASHATTN_SM90
    uint32_t out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(smem_byte_addr), "r"(rank));
    return out;
#else
    (void)smem_byte_addr, (void)rank;
    __trap();
    return 0;
#endif
}
// One arrival on an mbarrier in any block of the cluster (its cluster_smem_addr), relaxed: it orders nothing, it
// only counts (a pace between blocks, not a hand-over of data).
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t cluster_addr) {
#if FLASHATTN_SM90
    asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
#else
    (void)cluster_addr;
    __trap();
#endif
}
__device__ __forceinline__ float ld_cluster_f32(uint32_t cluster_addr) {
#if FLASHATTN_SM90
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(cluster_addr) : "memory");
    return v;
#else
    (void)cluster_addr;
    __trap();
    return 0.f;
#endif
}
__device__ __forceinline__ float4 ld_cluster_f32x4(uint32_t cluster_addr) {
#if FLASHATTN_SM90
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(cluster_addr)
                 : "memory");
    return v;
#else
    (void)cluster_addr;
    __trap();
    return make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}

}  // namespace flashattn::ptx
