// Thin, named wrappers over the PTX instructions the Ampere-class kernels are built from (sm_80 and newer).
//
// Fragment layouts of mma.m16n8k16 (lane = 4 * group + tig, group = lane / 4, tig = lane % 4):
//   A 16x16 (row major), 4 regs of 2 x 16-bit: a0 (group,   2tig..+1)  a1 (group+8, 2tig..+1)
//                                              a2 (group,   2tig+8..)  a3 (group+8, 2tig+8..)
//   B 16x8  (col major), 2 regs:               b0 (k = 2tig..+1, n = group)  b1 (k = 2tig+8..+9, n = group)
//   C 16x8  fp32, 4 regs:                      c0,c1 (group, 2tig..+1)  c2,c3 (group+8, 2tig..+1)
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace flashattn::ptx {

// Shared-memory address of a generic pointer, as the 32-bit value the shared-state-space instructions take.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ----- tensor-core matrix multiply-accumulate -----------------------------------------------------------------------

// D = A * B + D, m16n8k16, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], __half) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D = A * B + D, m16n8k16, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                             __nv_bfloat16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ----- shared memory -> registers -------------------------------------------------------------------------------------

// Four 8x8 16-bit matrices; lanes 8i..8i+7 give the row addresses of matrix i; reg i holds matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The same, each matrix transposed on the way (for B operands stored k-major, e.g. V).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// ----- global -> shared asynchronous copies --------------------------------------------------------------------------

// Copy 16 bytes global -> shared without blocking; when !valid, write 16 zero bytes instead (reads nothing).
__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem, bool valid) {
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
}

// Copy 4 bytes global -> shared without blocking (through L1: cp.async takes .cg for 16-byte copies only).
__device__ __forceinline__ void cp_async_4(uint32_t smem, const void* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(gmem));
}

// Close the group of cp.async issued so far by this thread.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// ----- 16-byte global and shared accesses ----------------------------------------------------------------------------

// 4-byte read-only global load, issued where it is written: volatile keeps it ahead of the work it should overlap
// (the compiler would otherwise sink it to its use).
__device__ __forceinline__ int32_t ld_global_nc_early_s32(const int32_t* gmem) {
    int32_t v;
    asm volatile("ld.global.nc.s32 %0, [%1];\n" : "=r"(v) : "l"(gmem));
    return v;
}

// 4-byte shared load by its 32-bit address (ld.shared): where the compiler cannot tell that a pointer is into shared
// memory it emits a generic load.
__device__ __forceinline__ int32_t ld_shared_s32(uint32_t addr) {
    int32_t v;
    asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
}

__device__ __forceinline__ uint4 ld_shared_16(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}

__device__ __forceinline__ void st_shared_16(uint32_t addr, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ void st_shared_32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Store four 8x8 b16 matrices to shared memory (sm_90 and newer): lane l gives the address of row l % 8 of matrix
// l / 8; register i holds this lane's pair of matrix i in the mma.sync accumulator layout (row lane / 4, columns
// 2 * (lane % 4) and the next). One instruction where st_shared_32 takes four.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3));
}
#endif

__device__ __forceinline__ void st_global_16(void* gmem, uint4 v) {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"l"(gmem), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

// ----- flags between blocks ------------------------------------------------------------------------------------------

// A 32-bit word other blocks read while this grid runs: stored and loaded "relaxed" at GPU scope (strong operations,
// as the PTX memory model names them, so a fence orders them; plain loads may be served from L1 or merged). The
// ordering itself comes from the caller's fences (__threadfence: fence.sc.gpu).
__device__ __forceinline__ void st_relaxed_gpu_u32(uint32_t* gmem, uint32_t v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(gmem), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t ld_relaxed_gpu_u32(const uint32_t* gmem) {
    uint32_t v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(gmem) : "memory");
    return v;
}

// ----- programmatic dependent launch (sm_90) --------------------------------------------------------------------------

// A kernel launched as a programmatic dependent of the one before it in the stream may start while that one drains;
// it waits here until that kernel has finished and its writes are visible. A no-op otherwise, and before sm_90.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The other side: lets the kernel after this one in the stream, launched as a programmatic dependent, have its blocks
// launched once every block of this grid has executed this (or exited), rather than once this grid has ended; they
// then wait in wait_for_prior_grid. A no-op before sm_90.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ----- global reductions ---------------------------------------------------------------------------------------------

// gmem[0..3] += a, b, c, d, fire and forget. sm_90 has a vector form (one instruction, one request per 16 bytes
// instead of four 4-byte ones); gmem must be 16-byte aligned. Below sm_90, four scalar atomics.
__device__ __forceinline__ void red_add_f32x4(float* gmem, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(gmem), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
#else
    atomicAdd(gmem, a);
    atomicAdd(gmem + 1, b);
    atomicAdd(gmem + 2, c);
    atomicAdd(gmem + 3, d);
#endif
}

// ----- arithmetic ----------------------------------------------------------------------------------------------------

// 2^x on the special-function unit (flush denormals to zero): the softmax exponential.
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// tanh on the special-function unit (sm_75+): the softcap.
__device__ __forceinline__ float tanh_fast(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats packed into one register of two 16-bit values (lo = a, hi = b), rounded to nearest.
__device__ __forceinline__ uint32_t pack2(float a, float b, __half) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack2(float a, float b, __nv_bfloat16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
}

// ----- warp reductions -----------------------------------------------------------------------------------------------

// Max / sum over the 4 lanes of a quad (the lanes that share an mma row).
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace flashattn::ptx
