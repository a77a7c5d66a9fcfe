#include "api/api_fixtures.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

namespace flashattn::testing {

::testing::AssertionResult throws_error(const std::function<void()>& fn, Status status,
                                        std::initializer_list<std::string> fragments) {
    try {
        fn();
    } catch (const Error& e) {
        const std::string msg = e.what();
        if (e.status() != status)
            return ::testing::AssertionFailure() << "status " << static_cast<int>(e.status()) << " instead of "
                                                 << static_cast<int>(status) << ": " << msg;
        for (const std::string& f : fragments)
            if (msg.find(f) == std::string::npos)
                return ::testing::AssertionFailure() << "message lacks \"" << f << "\": " << msg;
        return ::testing::AssertionSuccess() << msg;
    } catch (const std::exception& e) {
        return ::testing::AssertionFailure() << "threw a non-flashattn exception: " << e.what();
    }
    return ::testing::AssertionFailure() << "did not throw";
}

bool all_poisoned(const HostTensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) {
        const double v = t.get(i);
        const bool poisoned = t.dtype() == DType::i32 ? v == std::numeric_limits<int32_t>::max() : std::isnan(v);
        if (!poisoned) return false;
    }
    return true;
}

namespace {

HostTensor random_tensor(DType dtype, std::vector<int64_t> shape, std::mt19937_64& rng) {
    HostTensor t(dtype, std::move(shape));
    t.fill_normal(rng);
    return t;
}

HostTensor poisoned_tensor(DType dtype, std::vector<int64_t> shape) {
    HostTensor t(dtype, std::move(shape));
    t.poison();
    return t;
}

HostTensor i32_tensor(const std::vector<int32_t>& values) {
    HostTensor t(DType::i32, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
    return t;
}

HostTensor cumulative(const std::vector<int32_t>& lens) {
    std::vector<int32_t> cu(lens.size() + 1, 0);
    for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
    return i32_tensor(cu);
}

}  // namespace

DenseProblem::DenseProblem(DenseShape shape, DType dt, uint64_t seed) : s(shape), dtype(dt) {
    std::mt19937_64 rng(seed);
    q = random_tensor(dtype, {s.batch, s.seqlen_q, s.nheads, s.head_dim}, rng);
    k = random_tensor(dtype, {s.batch, s.seqlen_k, s.nheads_k, s.head_dim}, rng);
    v = random_tensor(dtype, {s.batch, s.seqlen_k, s.nheads_k, s.head_dim_v}, rng);
    dout = random_tensor(dtype, {s.batch, s.seqlen_q, s.nheads, s.head_dim_v}, rng);
    out = poisoned_tensor(dtype, {s.batch, s.seqlen_q, s.nheads, s.head_dim_v});
    lse = poisoned_tensor(DType::f32, {s.batch, s.nheads, s.seqlen_q});
    probs = poisoned_tensor(DType::f32, {s.batch, s.nheads, s.seqlen_q, s.seqlen_k});
    dq = poisoned_tensor(dtype, {s.batch, s.seqlen_q, s.nheads, s.head_dim});
    dk = poisoned_tensor(dtype, {s.batch, s.seqlen_k, s.nheads_k, s.head_dim});
    dv = poisoned_tensor(dtype, {s.batch, s.seqlen_k, s.nheads_k, s.head_dim_v});
    softmax_d = poisoned_tensor(DType::f32, {s.batch, s.nheads, s.seqlen_q});
}

ForwardArgs DenseProblem::forward_args() {
    ForwardArgs a;
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    a.out = out.view();
    a.softmax_lse = lse.view();
    return a;
}

BackwardArgs DenseProblem::backward_args() {
    BackwardArgs a;
    a.dout = dout.view();
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    a.out = out.view();
    a.softmax_lse = lse.view();
    a.dq = dq.view();
    a.dk = dk.view();
    a.dv = dv.view();
    return a;
}

bool DenseProblem::outputs_untouched() const {
    return all_poisoned(out) && all_poisoned(lse) && all_poisoned(probs) && all_poisoned(dq) && all_poisoned(dk) &&
           all_poisoned(dv) && all_poisoned(softmax_d);
}

VarlenProblem::VarlenProblem(std::vector<int32_t> lq, std::vector<int32_t> lk, DType dt, uint64_t seed)
    : lens_q(std::move(lq)), lens_k(std::move(lk)), dtype(dt) {
    std::mt19937_64 rng(seed);
    const int64_t total_q = std::accumulate(lens_q.begin(), lens_q.end(), int64_t{0});
    const int64_t total_k = std::accumulate(lens_k.begin(), lens_k.end(), int64_t{0});
    for (int32_t l : lens_q) max_q = std::max<int64_t>(max_q, l);
    for (int32_t l : lens_k) max_k = std::max<int64_t>(max_k, l);
    q = random_tensor(dtype, {total_q, nheads, head_dim}, rng);
    k = random_tensor(dtype, {total_k, nheads_k, head_dim}, rng);
    v = random_tensor(dtype, {total_k, nheads_k, head_dim_v}, rng);
    dout = random_tensor(dtype, {total_q, nheads, head_dim_v}, rng);
    out = poisoned_tensor(dtype, {total_q, nheads, head_dim_v});
    lse = poisoned_tensor(DType::f32, {nheads, total_q});
    dq = poisoned_tensor(dtype, {total_q, nheads, head_dim});
    dk = poisoned_tensor(dtype, {total_k, nheads_k, head_dim});
    dv = poisoned_tensor(dtype, {total_k, nheads_k, head_dim_v});
    cu_q = cumulative(lens_q);
    cu_k = cumulative(lens_k);
}

VarlenForwardArgs VarlenProblem::forward_args() {
    VarlenForwardArgs a;
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    a.cu_seqlens_q = cu_q.view();
    a.cu_seqlens_k = cu_k.view();
    a.max_seqlen_q = max_q;
    a.max_seqlen_k = max_k;
    a.out = out.view();
    a.softmax_lse = lse.view();
    return a;
}

VarlenBackwardArgs VarlenProblem::backward_args() {
    VarlenBackwardArgs a;
    a.dout = dout.view();
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    a.out = out.view();
    a.softmax_lse = lse.view();
    a.cu_seqlens_q = cu_q.view();
    a.cu_seqlens_k = cu_k.view();
    a.max_seqlen_q = max_q;
    a.max_seqlen_k = max_k;
    a.dq = dq.view();
    a.dk = dk.view();
    a.dv = dv.view();
    return a;
}

bool VarlenProblem::outputs_untouched() const {
    return all_poisoned(out) && all_poisoned(lse) && all_poisoned(dq) && all_poisoned(dk) && all_poisoned(dv);
}

KvCacheProblem::KvCacheProblem(std::vector<int32_t> lens, int64_t ps, uint64_t seed) : page_size(ps) {
    std::mt19937_64 rng(seed);
    batch = static_cast<int64_t>(lens.size());
    q = random_tensor(dtype, {batch, seqlen_q, nheads, head_dim}, rng);
    if (page_size > 0) {
        const int64_t pages = capacity / page_size;
        num_blocks = batch * pages + 2;  // spare blocks, so that ids are not simply 0..n-1
        k_cache = random_tensor(dtype, {num_blocks, page_size, nheads_k, head_dim}, rng);
        v_cache = random_tensor(dtype, {num_blocks, page_size, nheads_k, head_dim_v}, rng);
        std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        block_table = HostTensor(DType::i32, {batch, pages});
        for (int64_t i = 0; i < batch * pages; ++i) block_table.set(i, ids[static_cast<size_t>(i)]);
    } else {
        k_cache = random_tensor(dtype, {batch, capacity, nheads_k, head_dim}, rng);
        v_cache = random_tensor(dtype, {batch, capacity, nheads_k, head_dim_v}, rng);
    }
    knew = random_tensor(dtype, {batch, seqlen_new, nheads_k, head_dim}, rng);
    vnew = random_tensor(dtype, {batch, seqlen_new, nheads_k, head_dim_v}, rng);
    cache_seqlens = i32_tensor(lens);
    out = poisoned_tensor(dtype, {batch, seqlen_q, nheads, head_dim_v});
    lse = poisoned_tensor(DType::f32, {batch, nheads, seqlen_q});
}

KvCacheArgs KvCacheProblem::args(bool with_new) {
    KvCacheArgs a;
    a.q = q.view();
    a.k_cache = k_cache.view();
    a.v_cache = v_cache.view();
    if (with_new) {
        a.k = knew.view();
        a.v = vnew.view();
    }
    a.cache_seqlens = cache_seqlens.view();
    if (page_size > 0) a.block_table = block_table.view();
    a.out = out.view();
    a.softmax_lse = lse.view();
    return a;
}

bool KvCacheProblem::outputs_untouched() const { return all_poisoned(out) && all_poisoned(lse); }

void* fake_device_address(size_t index) {
    // 1 TiB apart from a base well above any host mapping used by the tests; never dereferenced.
    constexpr uintptr_t kBase = uintptr_t{1} << 44;
    constexpr uintptr_t kGap = uintptr_t{1} << 40;
    return reinterpret_cast<void*>(kBase + index * kGap);
}

TensorView cuda_view(size_t address_index, DType dtype, std::initializer_list<int64_t> shape, int32_t device_index) {
    return make_view(fake_device_address(address_index), dtype, shape, DeviceType::cuda, device_index);
}

CudaForward::CudaForward(DenseShape s, DType dtype) {
    args.q = cuda_view(0, dtype, {s.batch, s.seqlen_q, s.nheads, s.head_dim});
    args.k = cuda_view(1, dtype, {s.batch, s.seqlen_k, s.nheads_k, s.head_dim});
    args.v = cuda_view(2, dtype, {s.batch, s.seqlen_k, s.nheads_k, s.head_dim_v});
    args.out = cuda_view(3, dtype, {s.batch, s.seqlen_q, s.nheads, s.head_dim_v});
    args.softmax_lse = cuda_view(4, DType::f32, {s.batch, s.nheads, s.seqlen_q});
}

}  // namespace flashattn::testing
