// flashattn._C: the Python bindings of the C++ API.
//
// Tensors arrive as nanobind ndarrays, that is through DLPack (torch, numpy, anything exporting __dlpack__), and
// become non-owning flashattn::TensorView's: nothing here knows torch. The caller allocates every output and passes
// the CUDA stream as an integer (torch.cuda.current_stream().cuda_stream); a GPU call that needs scratch memory
// asks the caller's `alloc(nbytes)` for it, so that the caller's allocator (torch's caching allocator, CUDA graph
// pools) provides it. The GIL is released while an operation runs.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "api/arch_support.h"
#include "common/build_config.h"
#include "flashattn/flashattn.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using Array = nb::ndarray<nb::ro>;  // read-only: DLPack producers then hand over inputs without copying
using MutArray = nb::ndarray<>;
using OptArray = std::optional<nb::ndarray<nb::ro>>;

[[noreturn]] void bad_argument(const char* name, const std::string& what) {
    throw flashattn::Error(flashattn::Status::invalid_argument, std::string(name) + ": " + what);
}

flashattn::DType dtype_of(const nb::dlpack::dtype& t, const char* name) {
    using Code = nb::dlpack::dtype_code;
    const auto code = static_cast<Code>(t.code);
    if (t.lanes == 1) {
        if (code == Code::Float && t.bits == 16) return flashattn::DType::f16;
        if (code == Code::Bfloat && t.bits == 16) return flashattn::DType::bf16;
        if (code == Code::Float && t.bits == 32) return flashattn::DType::f32;
        if (code == Code::Float && t.bits == 64) return flashattn::DType::f64;
        if (code == Code::Int && t.bits == 32) return flashattn::DType::i32;
    }
    bad_argument(name, "expected a tensor of float16, bfloat16, float32, float64 or int32, got DLPack type code " +
                           std::to_string(t.code) + " with " + std::to_string(t.bits) + " bits");
}

template <class A>
flashattn::TensorView view_of(const A& a, const char* name) {
    flashattn::TensorView v;
    if (a.ndim() > static_cast<size_t>(flashattn::kMaxDims))
        bad_argument(name, "expected at most " + std::to_string(flashattn::kMaxDims) + " dimensions, got " +
                               std::to_string(a.ndim()));
    if (a.ndim() == 0) bad_argument(name, "expected a tensor with dimensions, got a scalar");
    v.data = const_cast<void*>(static_cast<const void*>(a.data()));
    v.dtype = dtype_of(a.dtype(), name);
    if (a.device_type() == nb::device::cpu::value) {
        v.device = flashattn::DeviceType::cpu;
    } else if (a.device_type() == nb::device::cuda::value) {
        v.device = flashattn::DeviceType::cuda;
        v.device_index = a.device_id();
    } else {
        bad_argument(name, "expected a CPU or CUDA tensor, got DLPack device type " + std::to_string(a.device_type()));
    }
    v.ndim = static_cast<int32_t>(a.ndim());
    for (size_t d = 0; d < a.ndim(); ++d) {
        v.shape[d] = static_cast<int64_t>(a.shape(d));
        v.stride[d] = a.stride(d);
    }
    return v;
}

flashattn::TensorView optional_view(const OptArray& a, const char* name) {
    return a ? view_of(*a, name) : flashattn::TensorView{};
}

flashattn::AttentionOptions options_of(float softmax_scale, bool causal, int32_t window_left, int32_t window_right,
                                       float softcap, const OptArray& alibi_slopes, float dropout_p, uint64_t seed,
                                       uint64_t offset, bool deterministic) {
    flashattn::AttentionOptions o;
    o.softmax_scale = softmax_scale;
    o.causal = causal;
    o.window_left = window_left;
    o.window_right = window_right;
    o.softcap = softcap;
    o.alibi_slopes = optional_view(alibi_slopes, "alibi_slopes");
    o.dropout_p = dropout_p;
    o.seed = seed;
    o.offset = offset;
    o.deterministic = deterministic;
    return o;
}

// Validates, asks `alloc` for the scratch memory the call needs (with the GIL held: it is Python), then runs the
// operation without the GIL. `alloc` returns a tensor or a DLPack capsule (the package's: a capsule, which skips the
// tensor's Python __dlpack__); `buffer`, the array made from it, owns the DLPack tensor and with it the memory until
// the operation has been enqueued; a stream-ordered allocator (torch's) may reuse it for work enqueued after that.
template <class Args, class Op>
void run(Args& args, uintptr_t stream, const nb::object& alloc, Op op) {
    args.ctx.stream = reinterpret_cast<void*>(stream);
    const size_t bytes = flashattn::workspace_size(args);
    std::optional<MutArray> buffer;  // destroyed after `unlocked` below: with the GIL held again
    if (bytes > 0) {
        if (alloc.is_none())
            throw flashattn::Error(flashattn::Status::invalid_argument,
                                   "alloc: this call needs " + std::to_string(bytes) +
                                       " bytes of device scratch memory; pass alloc(nbytes) returning a uint8 tensor");
        buffer = nb::cast<MutArray>(alloc(bytes));
        if (buffer->nbytes() < bytes)
            throw flashattn::Error(flashattn::Status::internal,
                                   "alloc: returned " + std::to_string(buffer->nbytes()) + " bytes, asked for " +
                                       std::to_string(bytes));
        args.ctx.workspace = buffer->data();
        args.ctx.workspace_bytes = buffer->nbytes();
    }
    nb::gil_scoped_release unlocked;
    op(args);
}

// The tensors every forward has, dense or varlen.
template <class Args>
void set_forward_tensors(Args& a, const Array& q, const Array& k, const Array& v, const MutArray& out,
                         const std::optional<MutArray>& softmax_lse, const std::optional<MutArray>& attn_probs) {
    a.q = view_of(q, "q");
    a.k = view_of(k, "k");
    a.v = view_of(v, "v");
    a.out = view_of(out, "out");
    if (softmax_lse) a.softmax_lse = view_of(*softmax_lse, "softmax_lse");
    if (attn_probs) a.attn_probs = view_of(*attn_probs, "attn_probs");
}

// The tensors every backward has, dense or varlen.
template <class Args>
void set_backward_tensors(Args& a, const Array& dout, const Array& q, const Array& k, const Array& v,
                          const Array& out, const Array& softmax_lse, const MutArray& dq, const MutArray& dk,
                          const MutArray& dv, const std::optional<MutArray>& softmax_d) {
    a.dout = view_of(dout, "dout");
    a.q = view_of(q, "q");
    a.k = view_of(k, "k");
    a.v = view_of(v, "v");
    a.out = view_of(out, "out");
    a.softmax_lse = view_of(softmax_lse, "softmax_lse");
    a.dq = view_of(dq, "dq");
    a.dk = view_of(dk, "dk");
    a.dv = view_of(dv, "dv");
    if (softmax_d) a.softmax_d = view_of(*softmax_d, "softmax_d");
}

// What a varlen call adds: where each sequence starts and the longest lengths.
template <class Args>
void set_sequences(Args& a, const Array& cu_seqlens_q, const Array& cu_seqlens_k, const OptArray& seqused_k,
                   int64_t max_seqlen_q, int64_t max_seqlen_k) {
    a.cu_seqlens_q = view_of(cu_seqlens_q, "cu_seqlens_q");
    a.cu_seqlens_k = view_of(cu_seqlens_k, "cu_seqlens_k");
    a.seqused_k = optional_view(seqused_k, "seqused_k");
    a.max_seqlen_q = max_seqlen_q;
    a.max_seqlen_k = max_seqlen_k;
}

void forward(Array q, Array k, Array v, MutArray out, std::optional<MutArray> softmax_lse,
             std::optional<MutArray> attn_probs, float softmax_scale, bool causal, int32_t window_left,
             int32_t window_right, float softcap, OptArray alibi_slopes, float dropout_p, uint64_t seed,
             uint64_t offset, uintptr_t stream, nb::object alloc) {
    flashattn::ForwardArgs a;
    set_forward_tensors(a, q, k, v, out, softmax_lse, attn_probs);
    a.options = options_of(softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, dropout_p, seed,
                           offset, false);
    run(a, stream, alloc, [](const auto& args) { flashattn::forward(args); });
}

void varlen_forward(Array q, Array k, Array v, Array cu_seqlens_q, Array cu_seqlens_k, OptArray seqused_k,
                    int64_t max_seqlen_q, int64_t max_seqlen_k, MutArray out, std::optional<MutArray> softmax_lse,
                    std::optional<MutArray> attn_probs, float softmax_scale, bool causal, int32_t window_left,
                    int32_t window_right, float softcap, OptArray alibi_slopes, float dropout_p, uint64_t seed,
                    uint64_t offset, uintptr_t stream, nb::object alloc) {
    flashattn::VarlenForwardArgs a;
    set_forward_tensors(a, q, k, v, out, softmax_lse, attn_probs);
    set_sequences(a, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k);
    a.options = options_of(softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, dropout_p, seed,
                           offset, false);
    run(a, stream, alloc, [](const auto& args) { flashattn::varlen_forward(args); });
}

void backward(Array dout, Array q, Array k, Array v, Array out, Array softmax_lse, MutArray dq, MutArray dk,
              MutArray dv, std::optional<MutArray> softmax_d, float softmax_scale, bool causal, int32_t window_left,
              int32_t window_right, float softcap, OptArray alibi_slopes, float dropout_p, uint64_t seed,
              uint64_t offset, bool deterministic, uintptr_t stream, nb::object alloc) {
    flashattn::BackwardArgs a;
    set_backward_tensors(a, dout, q, k, v, out, softmax_lse, dq, dk, dv, softmax_d);
    a.options = options_of(softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, dropout_p, seed,
                           offset, deterministic);
    run(a, stream, alloc, [](const auto& args) { flashattn::backward(args); });
}

void varlen_backward(Array dout, Array q, Array k, Array v, Array out, Array softmax_lse, Array cu_seqlens_q,
                     Array cu_seqlens_k, OptArray seqused_k, int64_t max_seqlen_q, int64_t max_seqlen_k, MutArray dq,
                     MutArray dk, MutArray dv, std::optional<MutArray> softmax_d, float softmax_scale, bool causal,
                     int32_t window_left, int32_t window_right, float softcap, OptArray alibi_slopes,
                     float dropout_p, uint64_t seed, uint64_t offset, bool deterministic, uintptr_t stream,
                     nb::object alloc) {
    flashattn::VarlenBackwardArgs a;
    set_backward_tensors(a, dout, q, k, v, out, softmax_lse, dq, dk, dv, softmax_d);
    set_sequences(a, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k);
    a.options = options_of(softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, dropout_p, seed,
                           offset, deterministic);
    run(a, stream, alloc, [](const auto& args) { flashattn::varlen_backward(args); });
}

void kvcache_forward(Array q, MutArray k_cache, MutArray v_cache, OptArray k, OptArray v, OptArray rotary_cos,
                     OptArray rotary_sin, bool rotary_interleaved, OptArray cache_seqlens, int64_t cache_seqlen,
                     OptArray cache_batch_idx, OptArray cache_leftpad, OptArray block_table, int32_t num_splits,
                     MutArray out, std::optional<MutArray> softmax_lse, float softmax_scale, bool causal,
                     int32_t window_left, int32_t window_right, float softcap, OptArray alibi_slopes, uintptr_t stream,
                     nb::object alloc) {
    flashattn::KvCacheArgs a;
    a.q = view_of(q, "q");
    a.k_cache = view_of(k_cache, "k_cache");
    a.v_cache = view_of(v_cache, "v_cache");
    a.k = optional_view(k, "k");
    a.v = optional_view(v, "v");
    a.rotary_cos = optional_view(rotary_cos, "rotary_cos");
    a.rotary_sin = optional_view(rotary_sin, "rotary_sin");
    a.rotary_interleaved = rotary_interleaved;
    a.cache_seqlens = optional_view(cache_seqlens, "cache_seqlens");
    a.cache_seqlen = cache_seqlen;
    a.cache_batch_idx = optional_view(cache_batch_idx, "cache_batch_idx");
    a.cache_leftpad = optional_view(cache_leftpad, "cache_leftpad");
    a.block_table = optional_view(block_table, "block_table");
    a.num_splits = num_splits;
    a.out = view_of(out, "out");
    if (softmax_lse) a.softmax_lse = view_of(*softmax_lse, "softmax_lse");
    a.options = options_of(softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, 0.0f, 0, 0, false);
    run(a, stream, alloc, [](const auto& args) { flashattn::kvcache_forward(args); });
}

void merge_attention(Array out_a, Array lse_a, Array out_b, Array lse_b, MutArray out,
                     std::optional<MutArray> softmax_lse, uintptr_t stream) {
    flashattn::MergeArgs a;
    a.out_a = view_of(out_a, "out_a");
    a.lse_a = view_of(lse_a, "lse_a");
    a.out_b = view_of(out_b, "out_b");
    a.lse_b = view_of(lse_b, "lse_b");
    a.out = view_of(out, "out");
    if (softmax_lse) a.softmax_lse = view_of(*softmax_lse, "softmax_lse");
    a.ctx.stream = reinterpret_cast<void*>(stream);
    nb::gil_scoped_release unlocked;
    flashattn::merge_attention(a);
}

// The C++ API names option fields "options.window_left" and so on; the Python functions take them as arguments
// of flash_attn's names, which the messages then use.
std::string python_names(std::string message) {
    static const std::pair<const char*, const char*> kRenames[] = {
        {"options.window_left", "window_size[0]"},
        {"options.window_right", "window_size[1]"},
        {"options.", ""},
    };
    for (const auto& [from, to] : kRenames) {
        const std::string needle = from;
        for (size_t at = message.find(needle); at != std::string::npos; at = message.find(needle, at)) {
            message.replace(at, needle.size(), to);
            at += std::strlen(to);
        }
    }
    return message;
}

const char* status_name(flashattn::Status s) {
    switch (s) {
        case flashattn::Status::ok: return "ok";
        case flashattn::Status::invalid_argument: return "invalid_argument";
        case flashattn::Status::unsupported: return "unsupported";
        case flashattn::Status::cuda_error: return "cuda_error";
        case flashattn::Status::internal: return "internal";
    }
    return "unknown";
}

}  // namespace

NB_MODULE(_C, m) {
    m.doc() = "flashattn's C++ API, bound through DLPack (see flashattn/_ops.py for the torch operators)";

    // flashattn::Error becomes flashattn.Error (a RuntimeError, as FlashAttention's checks raise); its message
    // names the argument and what was expected. The status rides along as the exception's `status` attribute.
    // A plain PyObject*, never released: a static nb::object would be decref'd after the interpreter is gone.
    static PyObject* error_type = PyErr_NewException("flashattn._C.Error", PyExc_RuntimeError, nullptr);
    m.attr("Error") = nb::borrow(error_type);
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const flashattn::Error& e) {
            // Only stable-ABI calls: build the exception, attach the status, raise it.
            const std::string message = python_names(e.what());
            PyObject* exc = PyObject_CallFunction(error_type, "s", message.c_str());
            if (!exc) return;  // the call's own error is set
            PyObject* status = PyUnicode_FromString(status_name(e.status()));
            if (status) {
                PyObject_SetAttrString(exc, "status", status);
                Py_DECREF(status);
            }
            PyErr_SetObject(error_type, exc);
            Py_DECREF(exc);
        }
    });

    m.def("version", &flashattn::version, "The library's version.");
    m.def("doctor_report", &flashattn::doctor_report,
          "The build (architectures, head dims), CUDA driver and runtime, and every visible GPU with whether "
          "flashattn supports it.");

    m.def(
        "build_info",
        [] {
            nb::dict info;
            info["version"] = FLASHATTN_VERSION;
            info["with_cuda"] = static_cast<bool>(FLASHATTN_WITH_CUDA);
            info["cuda_archs"] = FLASHATTN_CUDA_ARCHS;
            info["nvcc_version"] = FLASHATTN_NVCC_VERSION;
            info["cxx_compiler"] = FLASHATTN_CXX_COMPILER;
            info["build_type"] = FLASHATTN_BUILD_TYPE;
            return info;
        },
        "What this build holds: version, with_cuda, cuda_archs (comma-separated), nvcc_version, cxx_compiler, "
        "build_type.");
    m.def(
        "gpu_support",
        [](int major, int minor) {
            const auto s = flashattn::api::arch_support(major, minor, FLASHATTN_CUDA_ARCHS);
            return std::make_pair(s.supported, s.detail);
        },
        "major"_a, "minor"_a,
        "(supported, why) for a GPU of compute capability major.minor with the architectures this build holds.");

    m.def("forward", &forward, "q"_a, "k"_a, "v"_a, "out"_a, "softmax_lse"_a.none(), "attn_probs"_a.none(),
          "softmax_scale"_a, "causal"_a, "window_left"_a, "window_right"_a, "softcap"_a, "alibi_slopes"_a.none(),
          "dropout_p"_a, "seed"_a, "offset"_a, "stream"_a, "alloc"_a.none(),
          "Attention forward into caller-allocated out (and softmax_lse, attn_probs when given).");
    m.def("varlen_forward", &varlen_forward, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a,
          "seqused_k"_a.none(), "max_seqlen_q"_a, "max_seqlen_k"_a, "out"_a, "softmax_lse"_a.none(),
          "attn_probs"_a.none(), "softmax_scale"_a, "causal"_a, "window_left"_a, "window_right"_a, "softcap"_a,
          "alibi_slopes"_a.none(), "dropout_p"_a, "seed"_a, "offset"_a, "stream"_a, "alloc"_a.none(),
          "Variable-length attention forward: sequences packed along the first dimension.");
    m.def("backward", &backward, "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "softmax_lse"_a, "dq"_a, "dk"_a, "dv"_a,
          "softmax_d"_a.none(), "softmax_scale"_a, "causal"_a, "window_left"_a, "window_right"_a, "softcap"_a,
          "alibi_slopes"_a.none(), "dropout_p"_a, "seed"_a, "offset"_a, "deterministic"_a, "stream"_a,
          "alloc"_a.none(), "Attention backward into caller-allocated dq, dk, dv.");
    m.def("varlen_backward", &varlen_backward, "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "softmax_lse"_a,
          "cu_seqlens_q"_a, "cu_seqlens_k"_a, "seqused_k"_a.none(), "max_seqlen_q"_a, "max_seqlen_k"_a, "dq"_a,
          "dk"_a, "dv"_a, "softmax_d"_a.none(), "softmax_scale"_a, "causal"_a, "window_left"_a, "window_right"_a,
          "softcap"_a, "alibi_slopes"_a.none(), "dropout_p"_a, "seed"_a, "offset"_a, "deterministic"_a, "stream"_a,
          "alloc"_a.none(), "Variable-length attention backward.");
    m.def("kvcache_forward", &kvcache_forward, "q"_a, "k_cache"_a, "v_cache"_a, "k"_a.none(), "v"_a.none(),
          "rotary_cos"_a.none(), "rotary_sin"_a.none(), "rotary_interleaved"_a, "cache_seqlens"_a.none(),
          "cache_seqlen"_a, "cache_batch_idx"_a.none(), "cache_leftpad"_a.none(), "block_table"_a.none(),
          "num_splits"_a, "out"_a, "softmax_lse"_a.none(), "softmax_scale"_a, "causal"_a, "window_left"_a,
          "window_right"_a, "softcap"_a, "alibi_slopes"_a.none(), "stream"_a, "alloc"_a.none(),
          "Attention against a KV cache, appending k and v (rotated when rotary_cos/sin are given) in place.");
    m.def("merge_attention", &merge_attention, "out_a"_a, "lse_a"_a, "out_b"_a, "lse_b"_a, "out"_a,
          "softmax_lse"_a.none(), "stream"_a,
          "Merge two attention results over disjoint keys by their LSEs into out (and softmax_lse).");
}
