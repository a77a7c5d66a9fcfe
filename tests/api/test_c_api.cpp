// The C ABI from C++: defaults, status codes and messages, per-thread last error, results identical to the C++ API.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api/api_fixtures.h"
#include "common/build_config.h"
#include "flashattn/flashattn_c.h"

namespace flashattn::testing {
namespace {

flashattn_tensor to_c(const TensorView& v) {
    flashattn_tensor t;
    flashattn_tensor_init(&t);
    t.data = v.data;
    t.dtype = static_cast<int32_t>(v.dtype);
    t.device_type = static_cast<int32_t>(v.device);
    t.device_index = v.device_index;
    t.ndim = v.ndim;
    for (int d = 0; d < v.ndim; ++d) {
        t.shape[d] = v.shape[d];
        t.stride[d] = v.stride[d];
    }
    return t;
}

flashattn_fwd_args c_forward_args(DenseProblem& p) {
    flashattn_fwd_args a;
    flashattn_fwd_args_init(&a);
    a.q = to_c(p.q.view());
    a.k = to_c(p.k.view());
    a.v = to_c(p.v.view());
    a.out = to_c(p.out.view());
    a.softmax_lse = to_c(p.lse.view());
    return a;
}

TEST(ApiCAbi, InitSetsDefaults) {
    flashattn_options o;
    std::memset(&o, 0x5A, sizeof o);
    flashattn_options_init(&o);
    EXPECT_TRUE(std::isnan(o.softmax_scale));
    EXPECT_EQ(o.causal, 0);
    EXPECT_EQ(o.window_left, -1);
    EXPECT_EQ(o.window_right, -1);
    EXPECT_EQ(o.alibi_slopes.ndim, 0);
    EXPECT_EQ(o.dropout_p, 0.0f);

    flashattn_kvcache_args k;
    std::memset(&k, 0x5A, sizeof k);
    flashattn_kvcache_args_init(&k);
    EXPECT_EQ(k.rotary_interleaved, 1);
    EXPECT_EQ(k.cache_seqlen, -1);
    EXPECT_EQ(k.num_splits, 0);
    EXPECT_EQ(k.block_table.ndim, 0);
    EXPECT_EQ(k.options.window_left, -1);
    EXPECT_EQ(k.ctx.stream, nullptr);

    flashattn_varlen_bwd_args v;
    std::memset(&v, 0x5A, sizeof v);
    flashattn_varlen_bwd_args_init(&v);
    EXPECT_EQ(v.seqused_k.ndim, 0);
    EXPECT_EQ(v.max_seqlen_q, 0);
    EXPECT_EQ(v.options.window_right, -1);
    EXPECT_EQ(v.struct_size, sizeof v);
    EXPECT_EQ(flashattn_fwd_args_init_sized(nullptr, sizeof(flashattn_fwd_args)), FLASHATTN_STATUS_INVALID_ARGUMENT);
}

// A struct of another size (a caller built against another flashattn_c.h): _init writes struct_size alone and says
// why, and the operation refuses the struct without reading past the caller's size.
TEST(ApiCAbi, StructOfAnotherSizeIsRefused) {
    constexpr size_t kOlder = sizeof(flashattn_fwd_args) - 64;
    unsigned char buf[sizeof(flashattn_fwd_args)];
    std::memset(buf, 0x5A, sizeof buf);
    auto* a = reinterpret_cast<flashattn_fwd_args*>(buf);
    EXPECT_EQ(flashattn_fwd_args_init_sized(a, kOlder), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashattn_last_error()).find("flashattn_fwd_args.struct_size: expected " +
                                                       std::to_string(sizeof(flashattn_fwd_args))),
              std::string::npos)
        << flashattn_last_error();
    EXPECT_EQ(a->struct_size, kOlder);
    for (size_t i = sizeof(size_t); i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0x5A) << "byte " << i << " written";
    EXPECT_EQ(flashattn_forward(a), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashattn_last_error()).find("another flashattn_c.h"), std::string::npos);
    size_t bytes = 0;
    EXPECT_EQ(flashattn_forward_workspace_size(a, &bytes), FLASHATTN_STATUS_INVALID_ARGUMENT);

    DenseProblem p;
    flashattn_fwd_args ok = c_forward_args(p);
    ok.struct_size = 0;  // a struct set up by hand, without _init
    EXPECT_EQ(flashattn_forward(&ok), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiCAbi, BadInputGivesStatusAndMessage) {
    DenseProblem p;
    flashattn_fwd_args a = c_forward_args(p);
    a.q.dtype = FLASHATTN_DTYPE_I32;
    EXPECT_EQ(flashattn_forward(&a), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashattn_last_error()).find("q: expected dtype float16 or bfloat16"), std::string::npos)
        << flashattn_last_error();
    EXPECT_TRUE(p.outputs_untouched());
}

TEST(ApiCAbi, NullPointers) {
    EXPECT_EQ(flashattn_forward(nullptr), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_STREQ(flashattn_last_error(), "args: expected a pointer to flashattn_fwd_args, got NULL");
    EXPECT_EQ(flashattn_kvcache_forward(nullptr), FLASHATTN_STATUS_INVALID_ARGUMENT);
    DenseProblem p;
    flashattn_fwd_args a = c_forward_args(p);
    EXPECT_EQ(flashattn_forward_workspace_size(&a, nullptr), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_STREQ(flashattn_last_error(), "bytes: expected a pointer to a size_t, got NULL");
}

TEST(ApiCAbi, SuccessClearsLastError) {
    EXPECT_EQ(flashattn_forward(nullptr), FLASHATTN_STATUS_INVALID_ARGUMENT);
    DenseProblem p;
    flashattn_fwd_args a = c_forward_args(p);
    size_t bytes = 1;
    EXPECT_EQ(flashattn_forward_workspace_size(&a, &bytes), FLASHATTN_STATUS_OK);
    EXPECT_EQ(bytes, 0u);
    EXPECT_STREQ(flashattn_last_error(), "");
}

TEST(ApiCAbi, LastErrorIsPerThread) {
    EXPECT_EQ(flashattn_forward(nullptr), FLASHATTN_STATUS_INVALID_ARGUMENT);
    std::string other;
    std::thread t([&] {
        DenseProblem p;
        flashattn_fwd_args a = c_forward_args(p);
        a.options.window_left = -3;
        flashattn_forward(&a);
        other = flashattn_last_error();
    });
    t.join();
    EXPECT_NE(other.find("options.window_left"), std::string::npos) << other;
    EXPECT_STREQ(flashattn_last_error(), "args: expected a pointer to flashattn_fwd_args, got NULL");
}

// A build without CUDA refuses CUDA tensors as unsupported. A CUDA build has a kernel for every valid call, so
// nothing there answers unsupported without touching a GPU (and these views hold fake device addresses).
TEST(ApiCAbi, UnsupportedStatus) {
#if FLASHATTN_WITH_CUDA
    GTEST_SKIP() << "this build has CUDA: no valid call is unsupported before reaching the GPU";
#endif
    flashattn_kvcache_args a;
    flashattn_kvcache_args_init(&a);
    a.q = to_c(cuda_view(0, DType::f16, {1, 1, 4, 64}));
    a.k_cache = to_c(cuda_view(1, DType::f16, {1, 32, 4, 64}));
    a.v_cache = to_c(cuda_view(2, DType::f16, {1, 32, 4, 64}));
    a.out = to_c(cuda_view(3, DType::f16, {1, 1, 4, 64}));
    EXPECT_EQ(flashattn_kvcache_forward(&a), FLASHATTN_STATUS_UNSUPPORTED) << flashattn_last_error();
}

TEST(ApiCAbi, EveryOperationValidates) {
    flashattn_varlen_fwd_args vf;
    flashattn_varlen_fwd_args_init(&vf);
    EXPECT_EQ(flashattn_varlen_forward(&vf), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashattn_last_error()).find("q: required"), std::string::npos);
    flashattn_bwd_args b;
    flashattn_bwd_args_init(&b);
    EXPECT_EQ(flashattn_backward(&b), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashattn_last_error()).find("dout: required"), std::string::npos);
    flashattn_varlen_bwd_args vb;
    flashattn_varlen_bwd_args_init(&vb);
    size_t bytes = 0;
    EXPECT_EQ(flashattn_varlen_backward_workspace_size(&vb, &bytes), FLASHATTN_STATUS_INVALID_ARGUMENT);
    flashattn_kvcache_args k;
    flashattn_kvcache_args_init(&k);
    EXPECT_EQ(flashattn_kvcache_workspace_size(&k, &bytes), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashattn_last_error()).find("q: required"), std::string::npos);
}

TEST(ApiCAbi, ForwardMatchesCpp) {
    DenseProblem cpp, c;  // same seed: the same inputs
    ForwardArgs a = cpp.forward_args();
    a.options.causal = true;
    forward(a);
    flashattn_fwd_args ca = c_forward_args(c);
    ca.options.causal = 1;
    ASSERT_EQ(flashattn_forward(&ca), FLASHATTN_STATUS_OK) << flashattn_last_error();
    EXPECT_EQ(std::memcmp(cpp.out.data(), c.out.data(), c.out.nbytes()), 0);
    EXPECT_EQ(std::memcmp(cpp.lse.data(), c.lse.data(), c.lse.nbytes()), 0);
}

TEST(ApiCAbi, TensorContiguous) {
    float data[2 * 3 * 4];
    const int64_t shape[] = {2, 3, 4};
    flashattn_tensor t;
    ASSERT_EQ(flashattn_tensor_contiguous(&t, data, FLASHATTN_DTYPE_F32, 3, shape, FLASHATTN_DEVICE_CPU, 0),
              FLASHATTN_STATUS_OK);
    EXPECT_EQ(t.ndim, 3);
    EXPECT_EQ(t.stride[0], 12);
    EXPECT_EQ(t.stride[1], 4);
    EXPECT_EQ(t.stride[2], 1);
    EXPECT_EQ(t.shape[3], 0);
    EXPECT_EQ(flashattn_tensor_contiguous(&t, data, FLASHATTN_DTYPE_F32, 5, shape, FLASHATTN_DEVICE_CPU, 0),
              FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_STREQ(flashattn_last_error(), "ndim: expected 1..4, got 5");
}

TEST(ApiCAbi, VersionAbiAndStatusNames) {
    EXPECT_STREQ(flashattn_version(), version());
    EXPECT_EQ(flashattn_abi_version(), FLASHATTN_ABI_VERSION);
    EXPECT_STREQ(flashattn_status_name(FLASHATTN_STATUS_OK), "ok");
    EXPECT_STREQ(flashattn_status_name(FLASHATTN_STATUS_INVALID_ARGUMENT), "invalid_argument");
    EXPECT_STREQ(flashattn_status_name(FLASHATTN_STATUS_UNSUPPORTED), "unsupported");
    EXPECT_STREQ(flashattn_status_name(FLASHATTN_STATUS_CUDA_ERROR), "cuda_error");
    EXPECT_STREQ(flashattn_status_name(FLASHATTN_STATUS_INTERNAL), "internal");
    EXPECT_STREQ(flashattn_status_name(42), "unknown");
}

TEST(ApiCAbi, DoctorReportSizing) {
    const size_t n = flashattn_doctor_report(nullptr, 0);
    ASSERT_GT(n, 0u);
    std::vector<char> full(n + 1, 'x');
    EXPECT_EQ(flashattn_doctor_report(full.data(), full.size()), n);
    EXPECT_EQ(std::strlen(full.data()), n);
    EXPECT_EQ(std::string(full.data()), doctor_report());
    char small[8];
    EXPECT_EQ(flashattn_doctor_report(small, sizeof small), n);
    EXPECT_EQ(std::strlen(small), sizeof small - 1);  // truncated and NUL-terminated
    EXPECT_EQ(std::string(small), doctor_report().substr(0, sizeof small - 1));
}

TEST(ApiCAbi, MergeAttention) {
    // Two CPU results merged through the C ABI: equal weights (equal LSEs) average the outputs.
    HostTensor out_a(DType::f32, {1, 2, 1, 8}), out_b(DType::f32, {1, 2, 1, 8}), out(DType::f32, {1, 2, 1, 8});
    HostTensor lse_a(DType::f32, {1, 1, 2}), lse_b(DType::f32, {1, 1, 2}), lse(DType::f32, {1, 1, 2});
    for (int64_t i = 0; i < out_a.numel(); ++i) {
        out_a.set(i, 1.0 + i);
        out_b.set(i, 3.0 + i);
    }
    for (int64_t i = 0; i < lse_a.numel(); ++i) {
        lse_a.set(i, 0.5);
        lse_b.set(i, 0.5);
    }
    flashattn_merge_args a;
    flashattn_merge_args_init(&a);
    a.out_a = to_c(out_a.view());
    a.lse_a = to_c(lse_a.view());
    a.out_b = to_c(out_b.view());
    a.lse_b = to_c(lse_b.view());
    a.out = to_c(out.view());
    a.softmax_lse = to_c(lse.view());
    ASSERT_EQ(flashattn_merge_attention(&a), FLASHATTN_STATUS_OK) << flashattn_last_error();
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_DOUBLE_EQ(out.get(i), 2.0 + i);
    for (int64_t i = 0; i < lse.numel(); ++i) EXPECT_NEAR(lse.get(i), 0.5 + std::log(2.0), 1e-6);
    a.out_b = to_c(out_a.view());
    a.out_b.shape[3] = 4;
    EXPECT_EQ(flashattn_merge_attention(&a), FLASHATTN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashattn_last_error()).find("out_b: expected shape"), std::string::npos);
}

}  // namespace
}  // namespace flashattn::testing
