// The host's time in a kv-cache call, part by part, from C++ (no Python): what an eager decode loop pays on the CPU
// before the GPU sees the work, and which part of flashattn's host path it is.
//
// Question it answers: the eager Python call of a split decode took 11-25 us more host time than num_splits=1 on the
// H100 machine's host (bench/NOTES.md, "Order for the next device session", item 3), inside that host's spread. From
// C++ each part is timed alone, back to back with no sync between calls (the launch queue never fills at these
// counts), the median of several rounds:
//   workspace_size       the validation and the plan, no launch
//   call, num_splits=1   validation, plan, tensor maps, one launch
//   call, default        the heuristic's splits (merged in a cluster, or the workspace and the combine)
//   empty launch         cudaLaunchKernel of an empty kernel (the floor of any launch)
//   two func attributes  cudaFuncSetAttribute twice on that kernel (what each Hopper kv-cache launch did before the
//                        attributes were set once per kernel and context: src/kernels/common/func_attributes.h)
//
// Build and run (on a machine with the library built in build/):
//   nvcc -O2 -std=c++17 -Iinclude bench/host_path.cu -Lbuild -lflashattn -Xlinker -rpath=$PWD/build -o /tmp/host_path
//   /tmp/host_path [calls=200] [rounds=9]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "flashattn/flashattn.h"

namespace {

constexpr int kNheads = 32, kNheadsK = 8, kHeadDim = 128, kPage = 16;

__global__ void empty_kernel(int* p) {
    if (p) p[0] = 0;
}

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

// Host microseconds a call: wall time of `calls` calls queued back to back, over the count; median of `rounds`.
double host_us(const std::function<void()>& fn, int calls, int rounds) {
    for (int i = 0; i < 10; ++i) fn();
    check(cudaDeviceSynchronize(), "warm-up");
    std::vector<double> per_call;
    for (int r = 0; r < rounds; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) fn();
        const auto t1 = std::chrono::steady_clock::now();
        per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
        check(cudaDeviceSynchronize(), "round");
    }
    std::sort(per_call.begin(), per_call.end());
    return per_call[per_call.size() / 2];
}

struct DecodeCase {
    const char* name;
    int batch, cache_len;
    bool paged;
};

void measure(const DecodeCase& c, int calls, int rounds) {
    using namespace flashattn;
    const int64_t cache_elems = int64_t(c.batch) * c.cache_len * kNheadsK * kHeadDim;
    const int64_t q_elems = int64_t(c.batch) * kNheads * kHeadDim;
    void *q, *k, *v, *out, *lse, *lens, *table, *workspace;
    check(cudaMalloc(&q, q_elems * 2), "q");
    check(cudaMalloc(&out, q_elems * 2), "out");
    check(cudaMalloc(&lse, q_elems / kHeadDim * 4), "lse");
    check(cudaMalloc(&k, cache_elems * 2), "k");
    check(cudaMalloc(&v, cache_elems * 2), "v");
    check(cudaMemset(q, 0x3c, q_elems * 2), "q fill");  // small finite bf16 values
    check(cudaMemset(k, 0x3c, cache_elems * 2), "k fill");
    check(cudaMemset(v, 0x3c, cache_elems * 2), "v fill");
    const int pages = c.cache_len / kPage;
    std::vector<int32_t> host_lens(c.batch, c.cache_len), host_table(int64_t(c.batch) * pages);
    for (size_t i = 0; i < host_table.size(); ++i) host_table[i] = int32_t(i);
    check(cudaMalloc(&lens, c.batch * 4), "lens");
    check(cudaMalloc(&table, host_table.size() * 4), "table");
    check(cudaMemcpy(lens, host_lens.data(), c.batch * 4, cudaMemcpyHostToDevice), "lens copy");
    check(cudaMemcpy(table, host_table.data(), host_table.size() * 4, cudaMemcpyHostToDevice), "table copy");

    KvCacheArgs a;
    a.q = make_view(q, DType::bf16, {c.batch, 1, kNheads, kHeadDim}, DeviceType::cuda);
    if (c.paged) {
        a.k_cache = make_view(k, DType::bf16, {int64_t(c.batch) * pages, kPage, kNheadsK, kHeadDim}, DeviceType::cuda);
        a.v_cache = make_view(v, DType::bf16, {int64_t(c.batch) * pages, kPage, kNheadsK, kHeadDim}, DeviceType::cuda);
        a.block_table = make_view(table, DType::i32, {c.batch, pages}, DeviceType::cuda);
    } else {
        a.k_cache = make_view(k, DType::bf16, {c.batch, c.cache_len, kNheadsK, kHeadDim}, DeviceType::cuda);
        a.v_cache = make_view(v, DType::bf16, {c.batch, c.cache_len, kNheadsK, kHeadDim}, DeviceType::cuda);
    }
    a.cache_seqlens = make_view(lens, DType::i32, {c.batch}, DeviceType::cuda);
    a.out = make_view(out, DType::bf16, {c.batch, 1, kNheads, kHeadDim}, DeviceType::cuda);
    a.softmax_lse = make_view(lse, DType::f32, {c.batch, kNheads, 1}, DeviceType::cuda);
    a.options.causal = true;
    const size_t bytes = workspace_size(a);
    check(cudaMalloc(&workspace, bytes > 0 ? bytes : 1), "workspace");
    a.ctx.workspace = workspace, a.ctx.workspace_bytes = bytes;
    KvCacheArgs unsplit = a;
    unsplit.num_splits = 1;

    const double ws = host_us([&] { (void)workspace_size(a); }, calls, rounds);
    const double one = host_us([&] { kvcache_forward(unsplit); }, calls, rounds);
    const double dflt = host_us([&] { kvcache_forward(a); }, calls, rounds);
    std::printf("%-28s workspace %7zu B | workspace_size %6.2f us | call num_splits=1 %6.2f us | call default %6.2f us\n",
                c.name, bytes, ws, one, dflt);
    for (void* p : {q, k, v, out, lse, lens, table, workspace}) cudaFree(p);
}

}  // namespace

int main(int argc, char** argv) {
    const int calls = argc > 1 ? std::atoi(argv[1]) : 200;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
    check(cudaFree(nullptr), "context");
    const double launch = host_us([] { empty_kernel<<<1, 32>>>(nullptr); }, calls, rounds);
    const double attrs = host_us(
        [] {
            cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024);
            cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        },
        calls, rounds);
    std::printf("empty launch %.2f us | two cudaFuncSetAttribute %.2f us  (host us a call, median of %d rounds of %d)\n",
                launch, attrs, rounds, calls);
    const DecodeCase cases[] = {
        {"batch 1 x 8 kv heads, 1k", 1, 1024, false},   {"batch 1 x 8 kv heads, 1k, page 16", 1, 1024, true},
        {"batch 1 x 8 kv heads, 4k", 1, 4096, false},   {"batch 1 x 8 kv heads, 16k", 1, 16384, false},
        {"batch 64 x 8 kv heads, 1k", 64, 1024, false},
    };
    try {
        for (const DecodeCase& c : cases) measure(c, calls, rounds);
    } catch (const flashattn::Error& e) {
        std::fprintf(stderr, "flashattn: %s\n", e.what());
        return 1;
    }
    return 0;
}
