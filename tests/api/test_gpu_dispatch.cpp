// The API's GPU path on a real device: dispatch to the kernels, workspace sizing, and the zero key gradients of a
// backward without queries (written by the API itself). Skipped where no GPU is visible; the kernels' numerics
// are tested in tests/kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "api/api_fixtures.h"
#include "common/build_config.h"

#if FLASHATTN_WITH_CUDA
#include <cuda_runtime_api.h>

namespace flashattn::testing {
namespace {

bool gpu_visible() {
    int count = 0;
    const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    cudaGetLastError();  // a failed probe must not leak into later calls
    return ok;
}

// Device memory holding a copy of a host tensor (or `bytes` uninitialised), freed on destruction.
class DeviceCopy {
  public:
    explicit DeviceCopy(const HostTensor& t) : DeviceCopy(t.nbytes()) {
        if (bytes_) EXPECT_EQ(cudaMemcpy(ptr_, t.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    }
    explicit DeviceCopy(size_t bytes) : bytes_(bytes) {
        if (bytes_) EXPECT_EQ(cudaMalloc(&ptr_, bytes_), cudaSuccess);
    }
    ~DeviceCopy() {
        if (ptr_) cudaFree(ptr_);
    }
    DeviceCopy(const DeviceCopy&) = delete;
    DeviceCopy& operator=(const DeviceCopy&) = delete;
    void* get() const { return ptr_; }
    void to_host(HostTensor& t) const { EXPECT_EQ(cudaMemcpy(t.data(), ptr_, t.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess); }

  private:
    size_t bytes_;
    void* ptr_ = nullptr;
};

TensorView on_device(const DeviceCopy& d, const HostTensor& like) {
    TensorView v = const_cast<HostTensor&>(like).view();
    v.data = d.get();
    v.device = DeviceType::cuda;
    return v;
}

TEST(ApiGpu, ForwardRunsOnTheTensorsDevice) {
    if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
    DenseProblem cpu(DenseShape{2, 33, 70, 4, 2, 64, 64}, DType::f16);
    DenseProblem gpu(DenseShape{2, 33, 70, 4, 2, 64, 64}, DType::f16);
    DeviceCopy q(gpu.q), k(gpu.k), v(gpu.v), out(gpu.out), lse(gpu.lse);
    ForwardArgs a;
    a.q = on_device(q, gpu.q);
    a.k = on_device(k, gpu.k);
    a.v = on_device(v, gpu.v);
    a.out = on_device(out, gpu.out);
    a.softmax_lse = on_device(lse, gpu.lse);
    a.options.causal = true;
    ForwardArgs c = cpu.forward_args();
    c.options.causal = true;
    forward(c);
    forward(a);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.to_host(gpu.out);
    lse.to_host(gpu.lse);
    for (int64_t i = 0; i < gpu.out.numel(); ++i) ASSERT_NEAR(gpu.out.get(i), cpu.out.get(i), 1e-2) << i;
    for (int64_t i = 0; i < gpu.lse.numel(); ++i) ASSERT_NEAR(gpu.lse.get(i), cpu.lse.get(i), 1e-3) << i;
}

TEST(ApiGpu, BackwardWithWorkspace) {
    if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
    DenseProblem p(DenseShape{1, 40, 40, 2, 2, 64, 64}, DType::bf16);
    DeviceCopy q(p.q), k(p.k), v(p.v), out(p.out), lse(p.lse), dout(p.dout), dq(p.dq), dk(p.dk), dv(p.dv);
    ForwardArgs f;
    f.q = on_device(q, p.q);
    f.k = on_device(k, p.k);
    f.v = on_device(v, p.v);
    f.out = on_device(out, p.out);
    f.softmax_lse = on_device(lse, p.lse);
    forward(f);
    BackwardArgs b;
    b.q = f.q, b.k = f.k, b.v = f.v, b.out = f.out, b.softmax_lse = f.softmax_lse;
    b.dout = on_device(dout, p.dout);
    b.dq = on_device(dq, p.dq);
    b.dk = on_device(dk, p.dk);
    b.dv = on_device(dv, p.dv);
    b.options.deterministic = true;
    const size_t bytes = workspace_size(b);
    EXPECT_GT(bytes, 0u);  // the fp32 dQ accumulator at least
    DeviceCopy workspace(bytes);
    b.ctx.workspace = workspace.get();
    b.ctx.workspace_bytes = bytes;
    backward(b);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dk.to_host(p.dk);
    EXPECT_FALSE(p.dk.has_poison_or_nan());
}

TEST(ApiGpu, BackwardRefusesMisalignedWorkspace) {
    if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
    DenseProblem p(DenseShape{1, 40, 40, 2, 2, 64, 64}, DType::bf16);
    DeviceCopy q(p.q), k(p.k), v(p.v), out(p.out), lse(p.lse), dout(p.dout), dq(p.dq), dk(p.dk), dv(p.dv);
    BackwardArgs b;
    b.q = on_device(q, p.q), b.k = on_device(k, p.k), b.v = on_device(v, p.v), b.out = on_device(out, p.out);
    b.softmax_lse = on_device(lse, p.lse), b.dout = on_device(dout, p.dout);
    b.dq = on_device(dq, p.dq), b.dk = on_device(dk, p.dk), b.dv = on_device(dv, p.dv);
    const size_t bytes = workspace_size(b);
    constexpr size_t kMisalignment = 4;  // float-aligned, not 16-byte aligned
    DeviceCopy workspace(bytes + 16);
    b.ctx.workspace = static_cast<unsigned char*>(workspace.get()) + kMisalignment;
    b.ctx.workspace_bytes = bytes;
    EXPECT_INVALID(backward(b), "workspace: expected a 16-byte aligned pointer, got one 4 bytes past");
}

// attn_probs without softmax_lse keeps the LSE in the workspace: a null or misaligned one is refused before any launch.
TEST(ApiGpu, ForwardProbsRefusesNullOrMisalignedWorkspace) {
    if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
    DenseProblem p(DenseShape{1, 40, 40, 2, 2, 64, 64}, DType::bf16);
    HostTensor probs(DType::f32, {1, 2, 40, 40});
    DeviceCopy q(p.q), k(p.k), v(p.v), out(p.out), pr(probs);
    ForwardArgs f;
    f.q = on_device(q, p.q), f.k = on_device(k, p.k), f.v = on_device(v, p.v), f.out = on_device(out, p.out);
    f.attn_probs = on_device(pr, probs);
    const size_t bytes = workspace_size(f);
    EXPECT_GT(bytes, 0u);
    f.ctx.workspace = nullptr;
    f.ctx.workspace_bytes = bytes;
    EXPECT_INVALID(forward(f), "workspace: attn_probs without softmax_lse needs", "at a null pointer");
    constexpr size_t kMisalignment = 4;  // float-aligned, not 16-byte aligned
    DeviceCopy workspace(bytes + 16);
    f.ctx.workspace = static_cast<unsigned char*>(workspace.get()) + kMisalignment;
    EXPECT_INVALID(forward(f), "workspace: expected a 16-byte aligned pointer, got one 4 bytes past");
}

TEST(ApiGpu, BackwardWithoutQueriesZeroesKeyGradients) {
    if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
    DenseProblem p(DenseShape{2, 0, 5, 2, 2, 16, 16}, DType::f16);
    HostTensor wide(DType::f16, {2, 5, 3, 16});  // dk: 2 of 3 heads of a wider buffer (2D memsets)
    wide.poison();
    DeviceCopy q(p.q), k(p.k), v(p.v), out(p.out), lse(p.lse), dout(p.dout), dq(p.dq), dk(wide), dv(p.dv);
    BackwardArgs b;
    b.q = on_device(q, p.q);
    b.k = on_device(k, p.k);
    b.v = on_device(v, p.v);
    b.out = on_device(out, p.out);
    b.softmax_lse = on_device(lse, p.lse);
    b.dout = on_device(dout, p.dout);
    b.dq = on_device(dq, p.dq);
    b.dk = make_strided_view(dk.get(), DType::f16, {2, 5, 2, 16}, {5 * 3 * 16, 3 * 16, 16, 1}, DeviceType::cuda);
    b.dv = on_device(dv, p.dv);
    backward(b);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dk.to_host(wide);
    dv.to_host(p.dv);
    for (int64_t i = 0; i < wide.numel(); ++i) {
        if ((i / 16) % 3 == 2) EXPECT_TRUE(std::isnan(wide.get(i))) << i;  // not part of dk
        else EXPECT_EQ(wide.get(i), 0.0) << i;
    }
    for (int64_t i = 0; i < p.dv.numel(); ++i) EXPECT_EQ(p.dv.get(i), 0.0);
}

// Kernel attributes (shared-memory limits above 48 KB, clusters above 8) are set once per kernel and CUDA context
// (src/kernels/common/func_attributes.h). A caller's cudaDeviceReset makes a new context where they are unset: the
// calls after it must set them again. A forward and a backward at head dim 128 and a kv-cache call with its default
// splits (each needs a raised limit), before and after a reset, against the CPU path.
TEST(ApiGpu, CallsAfterDeviceReset) {
    if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
    constexpr int64_t kBatch = 1, kNheads = 8, kNheadsK = 2, kHeadDim = 128, kCacheLen = 2048;
    std::mt19937_64 rng(11);
    HostTensor kq(DType::bf16, {kBatch, 1, kNheads, kHeadDim});
    HostTensor kc(DType::bf16, {kBatch, kCacheLen, kNheadsK, kHeadDim});
    HostTensor vc(DType::bf16, {kBatch, kCacheLen, kNheadsK, kHeadDim});
    for (HostTensor* t : {&kq, &kc, &vc}) t->fill_normal(rng);
    HostTensor kvc_cpu(DType::bf16, {kBatch, 1, kNheads, kHeadDim});
    KvCacheArgs cpu_args;
    cpu_args.q = kq.view(), cpu_args.k_cache = kc.view(), cpu_args.v_cache = vc.view(), cpu_args.out = kvc_cpu.view();
    kvcache_forward(cpu_args);
    DenseProblem cpu(DenseShape{1, 77, 77, 4, 2, kHeadDim, kHeadDim}, DType::bf16);
    forward(cpu.forward_args());

    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE(round == 0 ? "before the reset" : "after the reset");
        {
            DenseProblem gpu(DenseShape{1, 77, 77, 4, 2, kHeadDim, kHeadDim}, DType::bf16);
            DeviceCopy q(gpu.q), k(gpu.k), v(gpu.v), out(gpu.out), lse(gpu.lse), dout(gpu.dout), dq(gpu.dq),
                dk(gpu.dk), dv(gpu.dv);
            ForwardArgs f;
            f.q = on_device(q, gpu.q), f.k = on_device(k, gpu.k), f.v = on_device(v, gpu.v);
            f.out = on_device(out, gpu.out), f.softmax_lse = on_device(lse, gpu.lse);
            ASSERT_NO_THROW(forward(f));
            BackwardArgs b;
            b.q = f.q, b.k = f.k, b.v = f.v, b.out = f.out, b.softmax_lse = f.softmax_lse;
            b.dout = on_device(dout, gpu.dout), b.dq = on_device(dq, gpu.dq);
            b.dk = on_device(dk, gpu.dk), b.dv = on_device(dv, gpu.dv);
            const size_t workspace_bytes = workspace_size(b);
            DeviceCopy workspace(workspace_bytes);
            b.ctx.workspace = workspace.get(), b.ctx.workspace_bytes = workspace_bytes;
            ASSERT_NO_THROW(backward(b));
            HostTensor kvc_gpu(DType::bf16, {kBatch, 1, kNheads, kHeadDim});
            kvc_gpu.poison();
            DeviceCopy q_kvc(kq), k_cache(kc), v_cache(vc), out_kvc(kvc_gpu);
            KvCacheArgs a;
            a.q = on_device(q_kvc, kq), a.k_cache = on_device(k_cache, kc), a.v_cache = on_device(v_cache, vc);
            a.out = on_device(out_kvc, kvc_gpu);
            // Splits merged by the combine kernel (the Ampere-class kernel's, or past a cluster) need the workspace.
            const size_t kvc_workspace_bytes = workspace_size(a);
            DeviceCopy kvc_workspace(kvc_workspace_bytes);
            a.ctx.workspace = kvc_workspace.get(), a.ctx.workspace_bytes = kvc_workspace_bytes;
            ASSERT_NO_THROW(kvcache_forward(a));
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            out.to_host(gpu.out);
            dk.to_host(gpu.dk);
            out_kvc.to_host(kvc_gpu);
            for (int64_t i = 0; i < gpu.out.numel(); ++i) ASSERT_NEAR(gpu.out.get(i), cpu.out.get(i), 1e-2) << i;
            EXPECT_FALSE(gpu.dk.has_poison_or_nan());
            for (int64_t i = 0; i < kvc_gpu.numel(); ++i) ASSERT_NEAR(kvc_gpu.get(i), kvc_cpu.get(i), 1e-2) << i;
        }
        if (round == 0) ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
    }
}

// Waits for the stream's work with a deadline: a call that never finishes fails the test (and ends the process, whose
// context holds the stalled kernel) instead of stalling the suite.
void finish_within(double seconds, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    cudaError_t err;
    while ((err = cudaStreamQuery(nullptr)) == cudaErrorNotReady) {
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) {
            ADD_FAILURE() << what << ": not finished after " << seconds << " s";
            std::fflush(stdout);
            std::_Exit(3);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(err, cudaSuccess) << what;
}

// Grids of many waves of one kv head a block (the Hopper planner's kvc_many_waves: 64 sequences x 32 kv heads, one
// query row, 2048 blocks before the splits), the tests/python many-waves cases from C++: a 4100-row cache split by
// default and merged by the combine, one new key appended, ragged lengths (some caches empty before the append: their
// only key the new one). Every call must finish and agree with the CPU path; the cache rows outside the sequences
// are NaN, so none may reach an output.
TEST(ApiGpu, ManyWaveKvCacheCallsFinish) {
    if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
    constexpr int64_t kBatch = 64, kHeads = 32, kCapacity = 4100;
    constexpr int kLengths[8] = {4000, 1, 17, 113, 250, 600, 0, 40};
    constexpr double kDeadlineSeconds = 30.0;
    constexpr int kCalls = 3;
    struct Case {
        int64_t page, head_dim;
    };
    for (const Case c : {Case{0, 128}, Case{64, 64}, Case{256, 40}}) {
        SCOPED_TRACE("page " + std::to_string(c.page) + ", head dim " + std::to_string(c.head_dim));
        std::mt19937_64 rng(uint64_t(c.page * 1000 + c.head_dim));
        const int64_t pages = c.page ? (kCapacity + c.page - 1) / c.page : 0, blocks = kBatch * pages + 2;
        const std::vector<int64_t> cache_shape = c.page ? std::vector<int64_t>{blocks, c.page, kHeads, c.head_dim}
                                                        : std::vector<int64_t>{kBatch, kCapacity, kHeads, c.head_dim};
        HostTensor q(DType::bf16, {kBatch, 1, kHeads, c.head_dim}), k_new(DType::bf16, {kBatch, 1, kHeads, c.head_dim}),
            v_new(DType::bf16, {kBatch, 1, kHeads, c.head_dim});
        for (HostTensor* t : {&q, &k_new, &v_new}) t->fill_normal(rng);
        HostTensor lengths(DType::i32, {kBatch}), table(DType::i32, {kBatch, pages > 0 ? pages : 1});
        std::vector<int32_t> order(static_cast<size_t>(blocks));
        for (int64_t i = 0; i < blocks; ++i) order[size_t(i)] = int32_t(i);
        std::shuffle(order.begin(), order.end(), rng);
        for (int64_t i = 0; i < kBatch * pages; ++i) static_cast<int32_t*>(table.data())[i] = order[size_t(i)];
        // The caches: NaN, but for the rows each sequence holds after its append.
        HostTensor k_cache(DType::bf16, cache_shape), v_cache(DType::bf16, cache_shape);
        std::normal_distribution<double> normal;
        const int64_t row_elems = kHeads * c.head_dim;
        for (HostTensor* t : {&k_cache, &v_cache}) {
            std::memset(t->data(), 0xff, t->nbytes());  // all bits set: a NaN in 16-bit floats (poison() is slower)
            for (int64_t b = 0; b < kBatch; ++b) {
                const int64_t end = kLengths[b % 8] + 1;
                for (int64_t pos = 0; pos < end; ++pos) {
                    const int64_t row = c.page ? static_cast<const int32_t*>(table.data())[b * pages + pos / c.page] *
                                                         c.page + pos % c.page
                                               : b * kCapacity + pos;
                    for (int64_t i = 0; i < row_elems; ++i) t->set(row * row_elems + i, normal(rng));
                }
            }
        }
        for (int64_t b = 0; b < kBatch; ++b) static_cast<int32_t*>(lengths.data())[b] = kLengths[b % 8];

        // The GPU's copies first: the CPU call below appends to the host caches.
        DeviceCopy dq(q), dk_new(k_new), dv_new(v_new), dk_cache(k_cache), dv_cache(v_cache), dlengths(lengths),
            dtable(table);
        HostTensor out_gpu(DType::bf16, {kBatch, 1, kHeads, c.head_dim}), lse_gpu(DType::f32, {kBatch, kHeads, 1});
        out_gpu.poison(), lse_gpu.poison();
        DeviceCopy dout(out_gpu), dlse(lse_gpu);
        KvCacheArgs a;
        a.q = on_device(dq, q), a.k = on_device(dk_new, k_new), a.v = on_device(dv_new, v_new);
        a.k_cache = on_device(dk_cache, k_cache), a.v_cache = on_device(dv_cache, v_cache);
        a.cache_seqlens = on_device(dlengths, lengths);
        if (c.page) a.block_table = on_device(dtable, table);
        a.out = on_device(dout, out_gpu), a.softmax_lse = on_device(dlse, lse_gpu);
        a.options.causal = true;

        HostTensor out_cpu(DType::bf16, {kBatch, 1, kHeads, c.head_dim}), lse_cpu(DType::f32, {kBatch, kHeads, 1});
        KvCacheArgs h = a;
        h.q = q.view(), h.k = k_new.view(), h.v = v_new.view(), h.k_cache = k_cache.view(), h.v_cache = v_cache.view();
        h.cache_seqlens = lengths.view(), h.block_table = c.page ? table.view() : TensorView{};
        h.out = out_cpu.view(), h.softmax_lse = lse_cpu.view();
        kvcache_forward(h);

        const size_t workspace_bytes = workspace_size(a);
        DeviceCopy workspace(workspace_bytes);
        a.ctx.workspace = workspace.get(), a.ctx.workspace_bytes = workspace_bytes;
        // Each call appends the same new key at the same place, so every call's result is the first's.
        for (int call = 0; call < kCalls; ++call) {
            ASSERT_NO_THROW(kvcache_forward(a));
            ASSERT_NO_FATAL_FAILURE(finish_within(kDeadlineSeconds, "a many-wave kv-cache call"));
        }
        dout.to_host(out_gpu);
        dlse.to_host(lse_gpu);
        EXPECT_FALSE(out_gpu.has_poison_or_nan());
        const ErrorStats err = compare(out_gpu, out_cpu);
        EXPECT_EQ(err.nonfinite, 0) << err.str();
        EXPECT_LT(err.rel_l2, 1e-2) << err.str();  // a sanity bound: the numerics are tested in tests/python
        for (int64_t i = 0; i < lse_gpu.numel(); ++i) {
            if (std::isinf(lse_cpu.get(i))) continue;
            ASSERT_NEAR(lse_gpu.get(i), lse_cpu.get(i), 1e-3) << i;
        }
    }
}

TEST(ApiGpu, MissingDeviceIsACudaError) {
    if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    CudaForward f;  // fake addresses: the call must fail on the device index before touching them
    for (TensorView* t : {&f.args.q, &f.args.k, &f.args.v, &f.args.out, &f.args.softmax_lse}) t->device_index = count;
    EXPECT_TRUE(throws_error([&] { forward(f.args); }, Status::cuda_error, {"cudaSetDevice"}));
    int current = -1;
    EXPECT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, 0);                          // the caller's device is left as it was
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);     // and no error lingers for the caller's next check
}

}  // namespace
}  // namespace flashattn::testing
#endif
