// The `flashattn` program.
//
//   flashattn run [options]   random inputs of a given shape; computes on the GPU if there is one (else the CPU
//                             reference); prints time, TFLOP/s and the error against an fp64 reference
//   flashattn doctor          build configuration, CUDA driver/runtime, visible GPUs and whether each is supported
//
// It uses the public API only: the fp64 reference is the same API called on float64 CPU tensors.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/build_config.h"
#include "flashattn/flashattn.h"
#include "device_buffer.h"
#include "support/host_tensor.h"

#if FLASHATTN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using namespace flashattn;

constexpr int kDefaultWarmup = 1;
constexpr int kDefaultRepeat = 3;
constexpr double kFlopsPerMac = 2.0;
constexpr double kBackwardFlopFactor = 2.5;  // FlashAttention's convention: backward = 2.5x forward

const char* kUsage = R"(usage: flashattn <command> [options]

commands:
  run      run attention on random inputs and check it against an fp64 reference
  doctor   diagnose the build and this machine (driver, runtime, GPUs)
  help     this text

run options (defaults in brackets):
  --batch N [2]          --seqlen N [512]        (sets both seqlen_q and seqlen_k)
  --seqlen-q N           --seqlen-k N
  --nheads N [8]         --nheads-k N [nheads]
  --head-dim N [64]      --head-dim-v N [head-dim]
  --dtype f16|bf16|f32 [bf16]
  --causal               --window L,R (-1 = unbounded)
  --softcap X [0]        --alibi (slopes 2^(-8(h+1)/nheads))
  --dropout P [0]        --seed N [0]
  --backward             also run and check the backward
  --device auto|cpu|cuda [auto]
  --warmup N [1]         --repeat N [3]
)";

struct RunConfig {
    int64_t batch = 2, seqlen_q = 512, seqlen_k = 512, nheads = 8, nheads_k = 0, head_dim = 64, head_dim_v = 0;
    DType dtype = DType::bf16;
    bool causal = false, alibi = false, backward = false;
    int32_t window_left = -1, window_right = -1;
    float softcap = 0.0f, dropout = 0.0f;
    uint64_t seed = 0;
    std::string device = "auto";
    int warmup = kDefaultWarmup, repeat = kDefaultRepeat;
};

[[noreturn]] void usage_error(const std::string& msg) {
    std::fprintf(stderr, "flashattn: %s\n\n%s", msg.c_str(), kUsage);
    std::exit(2);
}

int64_t parse_int(const std::string& flag, const std::string& text) {
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') usage_error(flag + " expects an integer, got '" + text + "'");
    return v;
}

float parse_float(const std::string& flag, const std::string& text) {
    char* end = nullptr;
    const float v = std::strtof(text.c_str(), &end);
    if (text.empty() || *end != '\0') usage_error(flag + " expects a number, got '" + text + "'");
    return v;
}

RunConfig parse_run_args(int argc, char** argv) {
    RunConfig c;
    bool seqlen_q_set = false, seqlen_k_set = false;
    for (int i = 0; i < argc; ++i) {
        std::string flag = argv[i], value;
        const size_t eq = flag.find('=');
        if (eq != std::string::npos) {
            value = flag.substr(eq + 1);
            flag = flag.substr(0, eq);
        }
        auto next = [&]() -> std::string {
            if (eq != std::string::npos) return value;
            if (i + 1 >= argc) usage_error(flag + " needs a value");
            return argv[++i];
        };
        if (flag == "--batch") c.batch = parse_int(flag, next());
        else if (flag == "--seqlen") c.seqlen_q = c.seqlen_k = parse_int(flag, next());
        else if (flag == "--seqlen-q") { c.seqlen_q = parse_int(flag, next()); seqlen_q_set = true; }
        else if (flag == "--seqlen-k") { c.seqlen_k = parse_int(flag, next()); seqlen_k_set = true; }
        else if (flag == "--nheads") c.nheads = parse_int(flag, next());
        else if (flag == "--nheads-k") c.nheads_k = parse_int(flag, next());
        else if (flag == "--head-dim") c.head_dim = parse_int(flag, next());
        else if (flag == "--head-dim-v") c.head_dim_v = parse_int(flag, next());
        else if (flag == "--dtype") {
            const std::string d = next();
            if (d == "f16" || d == "fp16" || d == "float16") c.dtype = DType::f16;
            else if (d == "bf16" || d == "bfloat16") c.dtype = DType::bf16;
            else if (d == "f32" || d == "fp32" || d == "float32") c.dtype = DType::f32;
            else usage_error("--dtype expects f16, bf16 or f32, got '" + d + "'");
        } else if (flag == "--causal") c.causal = true;
        else if (flag == "--window") {
            const std::string w = next();
            const size_t comma = w.find(',');
            if (comma == std::string::npos) usage_error("--window expects L,R, got '" + w + "'");
            c.window_left = static_cast<int32_t>(parse_int(flag, w.substr(0, comma)));
            c.window_right = static_cast<int32_t>(parse_int(flag, w.substr(comma + 1)));
        } else if (flag == "--softcap") c.softcap = parse_float(flag, next());
        else if (flag == "--alibi") c.alibi = true;
        else if (flag == "--dropout") c.dropout = parse_float(flag, next());
        else if (flag == "--seed") c.seed = static_cast<uint64_t>(parse_int(flag, next()));
        else if (flag == "--backward") c.backward = true;
        else if (flag == "--device") c.device = next();
        else if (flag == "--warmup") c.warmup = static_cast<int>(parse_int(flag, next()));
        else if (flag == "--repeat") c.repeat = static_cast<int>(parse_int(flag, next()));
        else usage_error("unknown option '" + flag + "'");
    }
    (void)seqlen_q_set;
    (void)seqlen_k_set;
    if (c.nheads_k == 0) c.nheads_k = c.nheads;
    if (c.head_dim_v == 0) c.head_dim_v = c.head_dim;
    if (c.repeat < 1) usage_error("--repeat must be >= 1");
    if (c.warmup < 0) usage_error("--warmup must be >= 0");
    if (c.device != "auto" && c.device != "cpu" && c.device != "cuda")
        usage_error("--device expects auto, cpu or cuda, got '" + c.device + "'");
    return c;
}

bool gpu_available() {
#if FLASHATTN_WITH_CUDA
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
    return false;
#endif
}

// FLOPs of the forward by FlashAttention's formula, counting only visible (row, key) pairs so causal and windowed
// runs are accounted exactly: 2 matmuls x 2 flops per multiply-add x head dims.
double forward_flops(const RunConfig& c) {
    int64_t visible = 0;
    const int32_t right = c.causal ? 0 : c.window_right;
    for (int64_t i = 0; i < c.seqlen_q; ++i) {
        const int64_t diag = i + c.seqlen_k - c.seqlen_q;
        const int64_t lo = c.window_left >= 0 ? std::max<int64_t>(0, diag - c.window_left) : 0;
        const int64_t hi = right >= 0 ? std::min<int64_t>(c.seqlen_k, diag + right + 1) : c.seqlen_k;
        visible += std::max<int64_t>(0, hi - lo);
    }
    return kFlopsPerMac * static_cast<double>(c.batch) * c.nheads * visible * (c.head_dim + c.head_dim_v);
}

// A rate in words: TFLOP/s on a GPU, GFLOP/s where it is slower (the CPU reference).
std::string rate_text(double flops, double ms) {
    const double per_s = flops / (ms * 1e-3);
    char buf[64];
    if (per_s >= 1e12) std::snprintf(buf, sizeof buf, "%8.2f TFLOP/s", per_s / 1e12);
    else std::snprintf(buf, sizeof buf, "%8.2f GFLOP/s", per_s / 1e9);
    return buf;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Times fn (warm-up runs first); milliseconds, median. On the GPU, CUDA events on the default stream.
double time_ms(bool on_gpu, int warmup, int repeat, const std::function<void()>& fn) {
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> times;
#if FLASHATTN_WITH_CUDA
    if (on_gpu) {
        cudaEvent_t start, stop;
        cudaEventCreate(&start);
        cudaEventCreate(&stop);
        for (int i = 0; i < repeat; ++i) {
            cudaEventRecord(start);
            fn();
            cudaEventRecord(stop);
            cudaEventSynchronize(stop);
            float ms = 0;
            cudaEventElapsedTime(&ms, start, stop);
            times.push_back(ms);
        }
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        return median(times);
    }
#else
    (void)on_gpu;
#endif
    for (int i = 0; i < repeat; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(times);
}

using testing::HostTensor;
using tools::DeviceBuffer;
using HostBuffer = testing::HostTensor;

// Error of a run against the fp64 reference, in words.
std::string error_text(const HostTensor& got, const HostTensor& ref) { return testing::compare(got, ref).str(); }

int run_command(int argc, char** argv) {
    const RunConfig c = parse_run_args(argc, argv);
    const bool on_gpu = c.device == "cuda" || (c.device == "auto" && gpu_available());
    if (c.device == "cuda" && !gpu_available()) {
        std::fprintf(stderr, "flashattn: --device cuda, but no GPU is visible (run `flashattn doctor`)\n");
        return 1;
    }
    const DeviceType dev = on_gpu ? DeviceType::cuda : DeviceType::cpu;
    std::mt19937_64 rng(c.seed);

    const std::vector<int64_t> q_shape{c.batch, c.seqlen_q, c.nheads, c.head_dim};
    const std::vector<int64_t> k_shape{c.batch, c.seqlen_k, c.nheads_k, c.head_dim};
    const std::vector<int64_t> v_shape{c.batch, c.seqlen_k, c.nheads_k, c.head_dim_v};
    const std::vector<int64_t> o_shape{c.batch, c.seqlen_q, c.nheads, c.head_dim_v};
    const std::vector<int64_t> lse_shape{c.batch, c.nheads, c.seqlen_q};

    // Inputs rounded to the run's dtype, and the same values in float64 for the reference.
    HostBuffer q(c.dtype, q_shape), k(c.dtype, k_shape), v(c.dtype, v_shape), dout(c.dtype, o_shape);
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
    dout.fill_normal(rng);
    HostBuffer alibi(DType::f32, {c.nheads});
    for (int64_t h = 0; h < c.nheads; ++h) alibi.set(h, std::exp2(-8.0 * (h + 1) / c.nheads));

    AttentionOptions opt;
    opt.causal = c.causal;
    opt.window_left = c.window_left;
    opt.window_right = c.window_right;
    opt.softcap = c.softcap;
    opt.dropout_p = c.dropout;
    opt.seed = c.seed;

    // Reference: the API on float64 CPU tensors.
    HostBuffer q64 = q.to(DType::f64), k64 = k.to(DType::f64), v64 = v.to(DType::f64), do64 = dout.to(DType::f64);
    HostBuffer out64(DType::f64, o_shape), lse64(DType::f32, lse_shape);
    HostBuffer dq64(DType::f64, q_shape), dk64(DType::f64, k_shape), dv64(DType::f64, v_shape);
    AttentionOptions ref_opt = opt;
    if (c.alibi) ref_opt.alibi_slopes = alibi.view();

    // The run under test, on the chosen device.
    HostBuffer out(c.dtype, o_shape), lse(DType::f32, lse_shape);
    HostBuffer dq(c.dtype, q_shape), dk(c.dtype, k_shape), dv(c.dtype, v_shape);
    DeviceBuffer d_q(q, dev), d_k(k, dev), d_v(v, dev), d_out(out, dev), d_lse(lse, dev), d_alibi(alibi, dev);
    DeviceBuffer d_dout(dout, dev), d_dq(dq, dev), d_dk(dk, dev), d_dv(dv, dev);

    try {
        ForwardArgs ref{q64.view(), k64.view(), v64.view(), out64.view(), lse64.view(), {}, ref_opt, {}};
        forward(ref);

        AttentionOptions run_opt = opt;
        if (c.alibi) run_opt.alibi_slopes = d_alibi.view();
        ForwardArgs fwd{d_q.view(), d_k.view(), d_v.view(), d_out.view(), d_lse.view(), {}, run_opt, {}};
        DeviceBuffer workspace(workspace_size(fwd), dev);
        fwd.ctx.workspace = workspace.data();
        fwd.ctx.workspace_bytes = workspace.bytes();

        const double fwd_ms = time_ms(on_gpu, c.warmup, c.repeat, [&] { forward(fwd); });
        d_out.copy_to(out);
        d_lse.copy_to(lse);
        const double flops = forward_flops(c);
        std::printf("flashattn run: %s, %s, batch %lld, seqlen_q %lld, seqlen_k %lld, nheads %lld/%lld, head_dim %lld/%lld%s%s\n",
                    on_gpu ? "cuda" : "cpu (reference)", dtype_name(c.dtype), (long long)c.batch,
                    (long long)c.seqlen_q, (long long)c.seqlen_k, (long long)c.nheads, (long long)c.nheads_k,
                    (long long)c.head_dim, (long long)c.head_dim_v, c.causal ? ", causal" : "",
                    c.dropout > 0 ? ", dropout" : "");
        std::printf("forward : %10.3f ms  %s  out error vs fp64: %s  lse error: %s\n", fwd_ms,
                    rate_text(flops, fwd_ms).c_str(), error_text(out, out64).c_str(),
                    error_text(lse, lse64).c_str());
        if (c.backward) {
            BackwardArgs ref_b{do64.view(), q64.view(), k64.view(), v64.view(), out64.view(), lse64.view(),
                               dq64.view(), dk64.view(), dv64.view(), {}, ref_opt, {}};
            backward(ref_b);
            BackwardArgs bwd{d_dout.view(), d_q.view(), d_k.view(), d_v.view(), d_out.view(), d_lse.view(),
                             d_dq.view(), d_dk.view(), d_dv.view(), {}, run_opt, {}};
            DeviceBuffer bwd_workspace(workspace_size(bwd), dev);
            bwd.ctx.workspace = bwd_workspace.data();
            bwd.ctx.workspace_bytes = bwd_workspace.bytes();
            const double bwd_ms = time_ms(on_gpu, c.warmup, c.repeat, [&] { backward(bwd); });
            d_dq.copy_to(dq);
            d_dk.copy_to(dk);
            d_dv.copy_to(dv);
            std::printf("backward: %10.3f ms  %s  dq: %s  dk: %s  dv: %s\n", bwd_ms,
                        rate_text(kBackwardFlopFactor * flops, bwd_ms).c_str(), error_text(dq, dq64).c_str(),
                        error_text(dk, dk64).c_str(), error_text(dv, dv64).c_str());
        }
    } catch (const Error& e) {
        std::fprintf(stderr, "flashattn: %s\n", e.what());
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string command = argc > 1 ? argv[1] : "help";
    if (command == "run") return run_command(argc - 2, argv + 2);
    if (command == "doctor") {
        std::fputs(flashattn::doctor_report().c_str(), stdout);
        return 0;
    }
    if (command == "version" || command == "--version") {
        std::printf("flashattn %s\n", flashattn::version());
        return 0;
    }
    if (command == "help" || command == "--help" || command == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
    }
    usage_error("unknown command '" + command + "'");
}
