// The host's time to validate one kv-cache call (api::validate, no GPU needed: the tensors are views at fake device
// addresses, never touched). The validation runs twice a Python call (workspace_size, then the call), before any
// launch; bench/host_path.cu times the whole call on a GPU machine.
//
// Build and run (the library built in build/, which links the CUDA runtime):
//   g++ -O2 -std=c++17 -Isrc -Iinclude -Ibuild/generated bench/validate_time.cpp build/libflashattn_static.a \
//     -L/usr/local/cuda/lib64 -lcudart -lpthread -ldl -o /tmp/validate_time && /tmp/validate_time
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>

#include "api/validate.h"
#include "flashattn/flashattn.h"

namespace {

using namespace flashattn;

constexpr int kCalls = 200000;

// A contiguous view at `slot` terabytes above 16 TiB: distinct, aligned, never dereferenced.
TensorView fake_cuda_view(int slot, DType dtype, std::initializer_list<int64_t> shape) {
    constexpr uintptr_t kBase = uintptr_t{1} << 44, kGap = uintptr_t{1} << 40;
    TensorView v = make_view(reinterpret_cast<void*>(kBase + slot * kGap), dtype, shape);
    v.device = DeviceType::cuda;
    return v;
}

}  // namespace

int main() {
    // Batch 1, 32 query heads over 8 kv heads, head dim 128, a 4k dense cache, per-sequence lengths, the LSE.
    KvCacheArgs a;
    a.q = fake_cuda_view(0, DType::bf16, {1, 1, 32, 128});
    a.k_cache = fake_cuda_view(1, DType::bf16, {1, 4096, 8, 128});
    a.v_cache = fake_cuda_view(2, DType::bf16, {1, 4096, 8, 128});
    a.cache_seqlens = fake_cuda_view(3, DType::i32, {1});
    a.out = fake_cuda_view(4, DType::bf16, {1, 1, 32, 128});
    a.softmax_lse = fake_cuda_view(5, DType::f32, {1, 32, 1});
    a.options.causal = true;
    volatile int64_t sink = 0;
    for (int i = 0; i < kCalls / 10; ++i) sink = sink + api::validate(a).batch;  // warm up
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) sink = sink + api::validate(a).batch;
    const auto t1 = std::chrono::steady_clock::now();
    std::printf("api::validate(KvCacheArgs), batch 1 x 32 / 8 heads x 128, 4k dense: %.0f ns a call (mean of %d)\n",
                std::chrono::duration<double, std::nano>(t1 - t0).count() / kCalls, kCalls);
    return 0;
}
