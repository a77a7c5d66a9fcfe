// The Hopper primitives (ptx_sm90.cuh, wgmma_ops.cuh, sm90/tensor_map.h) on their own, before any kernel is built
// from them: a 64 x 64 x K GEMM, C = A B^T with A (64 x K) and B (64 x K) row-major bf16, whose K tiles arrive by
// the copy engine (128-byte swizzle, two stages on mbarriers) and are multiplied by wgmma, with A from shared memory
// (SS) or from registers (RS); and C = A B with B (K x 64) row-major, the N-major B operand (the forward's P V).
// Runs on compute capability 9.0 only (sm_90a code); skips elsewhere, saying why.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "kernels/common/ptx_sm90.cuh"
#include "kernels/common/wgmma_ops.cuh"
#include "kernels/gpu_test_util.h"
#include "kernels/sm90/tensor_map.h"

namespace flashattn::testing {
namespace {

constexpr int kTileM = 64, kTileN = 64, kTileK = 64;  // one warpgroup's tile; 64 bf16 = one 128-byte swizzled row
constexpr int kStages = 2;
constexpr int kThreads = 128;  // one warpgroup
constexpr int kKStep = 16;     // k of one wgmma
constexpr int kAccRegs = kTileN / 2;
constexpr uint32_t kTileBytes = kTileM * kTileK * 2;
constexpr int kSmemAlign = 1024;  // the 128-byte swizzle repeats every 8 rows: tiles start on 1024-byte boundaries

struct alignas(kSmemAlign) GemmSmem {
    __nv_bfloat16 a[kStages][kTileM * kTileK];
    __nv_bfloat16 b[kStages][kTileN * kTileK];
    uint64_t full[kStages];
};

constexpr int kSwizzleRowBytes = 128;  // one row of a swizzled tile: an N-major B's k16 step is 16 of them

template <bool kAFromRegisters, bool kBNMajor>
__global__ void __launch_bounds__(kThreads) gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                                                        const __grid_constant__ CUtensorMap map_b,
                                                        const __nv_bfloat16* a_global, float* c, int k_tiles, int k) {
    extern __shared__ unsigned char smem_raw[];
    GemmSmem& s = *reinterpret_cast<GemmSmem*>(
        (reinterpret_cast<uintptr_t>(smem_raw) + kSmemAlign - 1) / kSmemAlign * kSmemAlign);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    if (tid == 0) {
        for (int st = 0; st < kStages; ++st) ptx::mbarrier_init(&s.full[st], 1);
        ptx::fence_mbarrier_init();
    }
    __syncthreads();
    auto issue = [&](int kt) {
        const int st = kt % kStages;
        ptx::mbarrier_arrive_expect_tx(&s.full[st], 2 * kTileBytes);
        ptx::tma_load_2d(s.a[st], &map_a, &s.full[st], kt * kTileK, 0);
        if constexpr (kBNMajor)
            ptx::tma_load_2d(s.b[st], &map_b, &s.full[st], 0, kt * kTileK);  // rows kt*64.. of B (K x 64)
        else
            ptx::tma_load_2d(s.b[st], &map_b, &s.full[st], kt * kTileK, 0);
    };
    if (tid == 0)
        for (int kt = 0; kt < kStages && kt < k_tiles; ++kt) issue(kt);

    float acc[kAccRegs];
    for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.f;
    for (int kt = 0; kt < k_tiles; ++kt) {
        const int st = kt % kStages;
        ptx::mbarrier_wait(&s.full[st], (kt / kStages) % 2);
        ptx::fence_registers(acc);
        ptx::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kTileK / kKStep; ++ks) {
            const int step_bytes = ks * kKStep * 2;
            const uint32_t b_step_bytes = kBNMajor ? ks * kKStep * kSwizzleRowBytes : step_bytes;
            const uint64_t desc_b = ptx::smem_desc_sw128(ptx::smem_addr(s.b[st]) + b_step_bytes);
            if constexpr (kAFromRegisters) {
                // The mma.sync A layout of this warp's 16 rows, read straight from global memory.
                const int row = warp * 16 + lane / 4, col = kt * kTileK + ks * kKStep + 2 * (lane % 4);
                auto pair = [&](int r, int cc) { return *reinterpret_cast<const uint32_t*>(a_global + r * k + cc); };
                const uint32_t a[4] = {pair(row, col), pair(row + 8, col), pair(row, col + 8), pair(row + 8, col + 8)};
                ptx::wgmma_rs_m64n64k16<kBNMajor ? 1 : 0>(acc, a, desc_b, 1, __nv_bfloat16());
            } else {
                const uint64_t desc_a = ptx::smem_desc_sw128(ptx::smem_addr(s.a[st]) + step_bytes);
                ptx::wgmma_ss_m64n64k16<kBNMajor ? 1 : 0>(acc, desc_a, desc_b, (kt > 0 || ks > 0) ? 1 : 0,
                                                          __nv_bfloat16());
            }
        }
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::fence_registers(acc);
        __syncthreads();  // every thread is done with stage st: it can be refilled
        if (tid == 0 && kt + kStages < k_tiles) issue(kt + kStages);
    }
    // The accumulator layout: register 4j + i is row 16 warp + lane/4 + 8 (i/2), column 8j + 2 (lane%4) + i%2.
    for (int j = 0; j < kTileN / 8; ++j)
        for (int i = 0; i < 4; ++i)
            c[(warp * 16 + lane / 4 + 8 * (i / 2)) * kTileN + 8 * j + 2 * (lane % 4) + i % 2] = acc[4 * j + i];
}

class GpuSm90Primitives : public GpuTest {
  protected:
    void SetUp() override {
        GpuTest::SetUp();
        if (IsSkipped()) return;
        int device = 0, major = 0, minor = 0;
        cuda_check(cudaGetDevice(&device), "cudaGetDevice");
        cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "major");
        cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "minor");
        if (major != 9 || minor != 0) GTEST_SKIP() << "the sm_90a primitives run on compute capability 9.0 only";
    }

    // kBNMajor: B is (K x 64) row-major and C = A B; otherwise B is (64 x K) and C = A B^T.
    template <bool kAFromRegisters, bool kBNMajor = false>
    void check_gemm(int k) {
        std::mt19937_64 rng(k);
        HostTensor a(DType::bf16, {kTileM, k});
        HostTensor b = kBNMajor ? HostTensor(DType::bf16, {k, kTileN}) : HostTensor(DType::bf16, {kTileN, k});
        a.fill_normal(rng);
        b.fill_normal(rng);
        DeviceTensor da = DeviceTensor::upload(a), db = DeviceTensor::upload(b);
        DeviceTensor dc(DType::f32, {kTileM, kTileN});
        dc.poison();
        const CUtensorMap map_a =
            kernels::make_tensor_map_2d_sw128(da.data(), ElemType::bf16, k, kTileM, k, kTileK, kTileM);
        const CUtensorMap map_b =
            kBNMajor ? kernels::make_tensor_map_2d_sw128(db.data(), ElemType::bf16, kTileN, k, kTileN, kTileN, kTileK)
                     : kernels::make_tensor_map_2d_sw128(db.data(), ElemType::bf16, k, kTileN, k, kTileK, kTileN);
        const int smem = sizeof(GemmSmem) + kSmemAlign;
        const auto kernel = gemm_kernel<kAFromRegisters, kBNMajor>;
        cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem limit");
        kernel<<<1, kThreads, smem>>>(map_a, map_b, static_cast<const __nv_bfloat16*>(da.data()),
                                      static_cast<float*>(dc.data()), k / kTileK, k);
        cuda_sync_check("gemm kernel");
        const HostTensor c = dc.download();
        // fp32 accumulation of k products: |error| <= k * 2^-24 * sum |a b| (a bound, not a fitted tolerance).
        const double unit_roundoff = std::ldexp(1.0, -24);
        for (int m = 0; m < kTileM; ++m)
            for (int n = 0; n < kTileN; ++n) {
                double want = 0, magnitude = 0;
                for (int kk = 0; kk < k; ++kk) {
                    const double bv = kBNMajor ? b.get(int64_t(kk) * kTileN + n) : b.get(int64_t(n) * k + kk);
                    want += a.get(int64_t(m) * k + kk) * bv;
                    magnitude += std::fabs(a.get(int64_t(m) * k + kk) * bv);
                }
                const double got = c.get(int64_t(m) * kTileN + n);
                ASSERT_LE(std::fabs(got - want), k * unit_roundoff * magnitude)
                    << "C[" << m << "][" << n << "] = " << got << ", want " << want;
            }
    }
};

TEST_F(GpuSm90Primitives, TmaAndWgmmaSharedShared) {
    check_gemm<false>(kTileK);      // one tile: the swizzle and the descriptors
    check_gemm<false>(8 * kTileK);  // both stages reused: mbarrier phases
}

TEST_F(GpuSm90Primitives, WgmmaRegistersShared) { check_gemm<true>(4 * kTileK); }

TEST_F(GpuSm90Primitives, WgmmaNMajorB) {
    check_gemm<false, true>(kTileK);      // SS, one tile
    check_gemm<true, true>(4 * kTileK);   // RS (the forward's P V), stages reused
}

}  // namespace
}  // namespace flashattn::testing
