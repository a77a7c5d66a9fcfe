// The C ABI: plain C structs converted field by field to the C++ ones; every exception becomes a status code and
// this thread's last-error message, so none crosses into C.
#include "flashattn/flashattn.h"
#include "flashattn/flashattn_c.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>

namespace {

using namespace flashattn;

static_assert(FLASHATTN_MAX_DIMS == kMaxDims);
static_assert(FLASHATTN_STATUS_OK == static_cast<int32_t>(Status::ok));
static_assert(FLASHATTN_STATUS_INVALID_ARGUMENT == static_cast<int32_t>(Status::invalid_argument));
static_assert(FLASHATTN_STATUS_UNSUPPORTED == static_cast<int32_t>(Status::unsupported));
static_assert(FLASHATTN_STATUS_CUDA_ERROR == static_cast<int32_t>(Status::cuda_error));
static_assert(FLASHATTN_STATUS_INTERNAL == static_cast<int32_t>(Status::internal));
static_assert(FLASHATTN_DTYPE_F16 == static_cast<int32_t>(DType::f16));
static_assert(FLASHATTN_DTYPE_BF16 == static_cast<int32_t>(DType::bf16));
static_assert(FLASHATTN_DTYPE_F32 == static_cast<int32_t>(DType::f32));
static_assert(FLASHATTN_DTYPE_F64 == static_cast<int32_t>(DType::f64));
static_assert(FLASHATTN_DTYPE_I32 == static_cast<int32_t>(DType::i32));
static_assert(FLASHATTN_DEVICE_CPU == static_cast<int32_t>(DeviceType::cpu));
static_assert(FLASHATTN_DEVICE_CUDA == static_cast<int32_t>(DeviceType::cuda));

thread_local std::string t_last_error;

// Out-of-range enum values pass through unchanged: validation names them ("unknown dtype 9").
TensorView to_view(const flashattn_tensor& t) {
    TensorView v;
    v.data = t.data;
    v.dtype = static_cast<DType>(t.dtype);
    v.device = static_cast<DeviceType>(t.device_type);
    v.device_index = t.device_index;
    v.ndim = t.ndim;
    for (int d = 0; d < kMaxDims; ++d) {
        v.shape[d] = t.shape[d];
        v.stride[d] = t.stride[d];
    }
    return v;
}

AttentionOptions to_options(const flashattn_options& o) {
    AttentionOptions r;
    r.softmax_scale = o.softmax_scale;
    r.causal = o.causal != 0;
    r.window_left = o.window_left;
    r.window_right = o.window_right;
    r.softcap = o.softcap;
    r.alibi_slopes = to_view(o.alibi_slopes);
    r.dropout_p = o.dropout_p;
    r.seed = o.seed;
    r.offset = o.offset;
    r.deterministic = o.deterministic != 0;
    return r;
}

ExecutionContext to_context(const flashattn_context& c) {
    ExecutionContext r;
    r.stream = c.stream;
    r.workspace = c.workspace;
    r.workspace_bytes = c.workspace_bytes;
    return r;
}

ForwardArgs to_cpp(const flashattn_fwd_args& a) {
    ForwardArgs r;
    r.q = to_view(a.q);
    r.k = to_view(a.k);
    r.v = to_view(a.v);
    r.out = to_view(a.out);
    r.softmax_lse = to_view(a.softmax_lse);
    r.attn_probs = to_view(a.attn_probs);
    r.options = to_options(a.options);
    r.ctx = to_context(a.ctx);
    return r;
}

VarlenForwardArgs to_cpp(const flashattn_varlen_fwd_args& a) {
    VarlenForwardArgs r;
    r.q = to_view(a.q);
    r.k = to_view(a.k);
    r.v = to_view(a.v);
    r.cu_seqlens_q = to_view(a.cu_seqlens_q);
    r.cu_seqlens_k = to_view(a.cu_seqlens_k);
    r.seqused_k = to_view(a.seqused_k);
    r.max_seqlen_q = a.max_seqlen_q;
    r.max_seqlen_k = a.max_seqlen_k;
    r.out = to_view(a.out);
    r.softmax_lse = to_view(a.softmax_lse);
    r.attn_probs = to_view(a.attn_probs);
    r.options = to_options(a.options);
    r.ctx = to_context(a.ctx);
    return r;
}

BackwardArgs to_cpp(const flashattn_bwd_args& a) {
    BackwardArgs r;
    r.dout = to_view(a.dout);
    r.q = to_view(a.q);
    r.k = to_view(a.k);
    r.v = to_view(a.v);
    r.out = to_view(a.out);
    r.softmax_lse = to_view(a.softmax_lse);
    r.dq = to_view(a.dq);
    r.dk = to_view(a.dk);
    r.dv = to_view(a.dv);
    r.softmax_d = to_view(a.softmax_d);
    r.options = to_options(a.options);
    r.ctx = to_context(a.ctx);
    return r;
}

VarlenBackwardArgs to_cpp(const flashattn_varlen_bwd_args& a) {
    VarlenBackwardArgs r;
    r.dout = to_view(a.dout);
    r.q = to_view(a.q);
    r.k = to_view(a.k);
    r.v = to_view(a.v);
    r.out = to_view(a.out);
    r.softmax_lse = to_view(a.softmax_lse);
    r.cu_seqlens_q = to_view(a.cu_seqlens_q);
    r.cu_seqlens_k = to_view(a.cu_seqlens_k);
    r.seqused_k = to_view(a.seqused_k);
    r.max_seqlen_q = a.max_seqlen_q;
    r.max_seqlen_k = a.max_seqlen_k;
    r.dq = to_view(a.dq);
    r.dk = to_view(a.dk);
    r.dv = to_view(a.dv);
    r.softmax_d = to_view(a.softmax_d);
    r.options = to_options(a.options);
    r.ctx = to_context(a.ctx);
    return r;
}

KvCacheArgs to_cpp(const flashattn_kvcache_args& a) {
    KvCacheArgs r;
    r.q = to_view(a.q);
    r.k_cache = to_view(a.k_cache);
    r.v_cache = to_view(a.v_cache);
    r.k = to_view(a.k);
    r.v = to_view(a.v);
    r.rotary_cos = to_view(a.rotary_cos);
    r.rotary_sin = to_view(a.rotary_sin);
    r.rotary_interleaved = a.rotary_interleaved != 0;
    r.cache_seqlens = to_view(a.cache_seqlens);
    r.cache_seqlen = a.cache_seqlen;
    r.cache_batch_idx = to_view(a.cache_batch_idx);
    r.cache_leftpad = to_view(a.cache_leftpad);
    r.block_table = to_view(a.block_table);
    r.num_splits = a.num_splits;
    r.out = to_view(a.out);
    r.softmax_lse = to_view(a.softmax_lse);
    r.options = to_options(a.options);
    r.ctx = to_context(a.ctx);
    return r;
}

MergeArgs to_cpp(const flashattn_merge_args& a) {
    MergeArgs r;
    r.out_a = to_view(a.out_a);
    r.lse_a = to_view(a.lse_a);
    r.out_b = to_view(a.out_b);
    r.lse_b = to_view(a.lse_b);
    r.out = to_view(a.out);
    r.softmax_lse = to_view(a.softmax_lse);
    r.ctx = to_context(a.ctx);
    return r;
}

flashattn_status fail_with(flashattn_status status, std::string message) {
    t_last_error = std::move(message);
    return status;
}

// Runs fn; maps every exception to a status and this thread's last-error message.
template <class Fn>
flashattn_status guarded(Fn&& fn) noexcept {
    try {
        fn();
        t_last_error.clear();
        return FLASHATTN_STATUS_OK;
    } catch (const Error& e) {
        return fail_with(static_cast<flashattn_status>(e.status()), e.what());
    } catch (const std::bad_alloc&) {
        return fail_with(FLASHATTN_STATUS_INTERNAL, "out of host memory");
    } catch (const std::exception& e) {
        return fail_with(FLASHATTN_STATUS_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
        return fail_with(FLASHATTN_STATUS_INTERNAL, "internal error: an unknown exception");
    }
}

// The message for an argument struct whose struct_size is not this library's: the caller was built against another
// flashattn_c.h (or a binding's mirror of the struct is out of date).
std::string struct_size_message(const char* type_name, size_t expected, size_t got) {
    return std::string(type_name) + ".struct_size: expected " + std::to_string(expected) + " (this library's sizeof(" +
           type_name + "), ABI version " + std::to_string(FLASHATTN_ABI_VERSION) + "), got " + std::to_string(got) +
           ": the caller was built against another flashattn_c.h; rebuild it against this library's, and set the "
           "struct up with its _init function";
}

template <class CArgs, class Op>
flashattn_status run_op(const CArgs* args, const char* type_name, Op op) noexcept {
    if (!args)
        return fail_with(FLASHATTN_STATUS_INVALID_ARGUMENT,
                         std::string("args: expected a pointer to ") + type_name + ", got NULL");
    if (args->struct_size != sizeof(CArgs))
        return fail_with(FLASHATTN_STATUS_INVALID_ARGUMENT, struct_size_message(type_name, sizeof(CArgs),
                                                                                args->struct_size));
    return guarded([&] { op(to_cpp(*args)); });
}

template <class CArgs>
flashattn_status query_workspace(const CArgs* args, const char* type_name, size_t* bytes) noexcept {
    if (!bytes) return fail_with(FLASHATTN_STATUS_INVALID_ARGUMENT, "bytes: expected a pointer to a size_t, got NULL");
    return run_op(args, type_name, [&](const auto& cpp) { *bytes = workspace_size(cpp); });
}

// Zero everything (tensors absent, NULL stream and workspace), set struct_size, then the options' defaults (for
// structs that have options) and `more` defaults. A struct of another size gets its struct_size written (the first
// member of every version's struct) and nothing else.
template <class CArgs, class More>
flashattn_status init_args(CArgs* args, size_t struct_size, const char* type_name, More more) noexcept {
    if (!args)
        return fail_with(FLASHATTN_STATUS_INVALID_ARGUMENT,
                         std::string("a: expected a pointer to ") + type_name + ", got NULL");
    if (struct_size != sizeof(CArgs)) {
        if (struct_size >= sizeof(size_t)) std::memcpy(args, &struct_size, sizeof(size_t));
        return fail_with(FLASHATTN_STATUS_INVALID_ARGUMENT, struct_size_message(type_name, sizeof(CArgs), struct_size));
    }
    std::memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    if constexpr (requires { args->options; }) flashattn_options_init(&args->options);
    more(*args);
    t_last_error.clear();
    return FLASHATTN_STATUS_OK;
}
constexpr auto kNoMoreDefaults = [](auto&) {};

}  // namespace

extern "C" {

void flashattn_tensor_init(flashattn_tensor* t) {
    if (t) std::memset(t, 0, sizeof *t);
}

void flashattn_options_init(flashattn_options* o) {
    if (!o) return;
    std::memset(o, 0, sizeof *o);
    const AttentionOptions defaults;
    o->softmax_scale = defaults.softmax_scale;
    o->causal = defaults.causal ? 1 : 0;
    o->window_left = defaults.window_left;
    o->window_right = defaults.window_right;
    o->softcap = defaults.softcap;
    o->dropout_p = defaults.dropout_p;
    o->seed = defaults.seed;
    o->offset = defaults.offset;
    o->deterministic = defaults.deterministic ? 1 : 0;
}

void flashattn_context_init(flashattn_context* c) {
    if (c) std::memset(c, 0, sizeof *c);
}

flashattn_status flashattn_fwd_args_init_sized(flashattn_fwd_args* a, size_t struct_size) {
    return init_args(a, struct_size, "flashattn_fwd_args", kNoMoreDefaults);
}
flashattn_status flashattn_varlen_fwd_args_init_sized(flashattn_varlen_fwd_args* a, size_t struct_size) {
    return init_args(a, struct_size, "flashattn_varlen_fwd_args", kNoMoreDefaults);
}
flashattn_status flashattn_bwd_args_init_sized(flashattn_bwd_args* a, size_t struct_size) {
    return init_args(a, struct_size, "flashattn_bwd_args", kNoMoreDefaults);
}
flashattn_status flashattn_varlen_bwd_args_init_sized(flashattn_varlen_bwd_args* a, size_t struct_size) {
    return init_args(a, struct_size, "flashattn_varlen_bwd_args", kNoMoreDefaults);
}
flashattn_status flashattn_merge_args_init_sized(flashattn_merge_args* a, size_t struct_size) {
    return init_args(a, struct_size, "flashattn_merge_args", kNoMoreDefaults);  // every tensor absent, no stream
}
flashattn_status flashattn_kvcache_args_init_sized(flashattn_kvcache_args* a, size_t struct_size) {
    return init_args(a, struct_size, "flashattn_kvcache_args", [](flashattn_kvcache_args& k) {
        const KvCacheArgs defaults;
        k.rotary_interleaved = defaults.rotary_interleaved ? 1 : 0;
        k.cache_seqlen = defaults.cache_seqlen;
        k.num_splits = defaults.num_splits;
    });
}

flashattn_status flashattn_tensor_contiguous(flashattn_tensor* t, void* data, int32_t dtype, int32_t ndim,
                                             const int64_t* shape, int32_t device_type, int32_t device_index) {
    if (!t) return fail_with(FLASHATTN_STATUS_INVALID_ARGUMENT, "t: expected a pointer to flashattn_tensor, got NULL");
    if (ndim < 1 || ndim > FLASHATTN_MAX_DIMS)
        return fail_with(FLASHATTN_STATUS_INVALID_ARGUMENT,
                         "ndim: expected 1.." + std::to_string(FLASHATTN_MAX_DIMS) + ", got " + std::to_string(ndim));
    if (!shape) return fail_with(FLASHATTN_STATUS_INVALID_ARGUMENT, "shape: expected an array of ndim sizes, got NULL");
    flashattn_tensor_init(t);
    t->data = data;
    t->dtype = dtype;
    t->device_type = device_type;
    t->device_index = device_index;
    t->ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        t->shape[d] = shape[d];
        t->stride[d] = stride;
        stride *= shape[d];
    }
    t_last_error.clear();
    return FLASHATTN_STATUS_OK;
}

flashattn_status flashattn_forward(const flashattn_fwd_args* a) {
    return run_op(a, "flashattn_fwd_args", [](const ForwardArgs& c) { flashattn::forward(c); });
}
flashattn_status flashattn_varlen_forward(const flashattn_varlen_fwd_args* a) {
    return run_op(a, "flashattn_varlen_fwd_args", [](const VarlenForwardArgs& c) { flashattn::varlen_forward(c); });
}
flashattn_status flashattn_backward(const flashattn_bwd_args* a) {
    return run_op(a, "flashattn_bwd_args", [](const BackwardArgs& c) { flashattn::backward(c); });
}
flashattn_status flashattn_varlen_backward(const flashattn_varlen_bwd_args* a) {
    return run_op(a, "flashattn_varlen_bwd_args", [](const VarlenBackwardArgs& c) { flashattn::varlen_backward(c); });
}
flashattn_status flashattn_kvcache_forward(const flashattn_kvcache_args* a) {
    return run_op(a, "flashattn_kvcache_args", [](const KvCacheArgs& c) { flashattn::kvcache_forward(c); });
}

flashattn_status flashattn_merge_attention(const flashattn_merge_args* a) {
    return run_op(a, "flashattn_merge_args", [](const MergeArgs& c) { flashattn::merge_attention(c); });
}

flashattn_status flashattn_forward_workspace_size(const flashattn_fwd_args* a, size_t* bytes) {
    return query_workspace(a, "flashattn_fwd_args", bytes);
}
flashattn_status flashattn_varlen_forward_workspace_size(const flashattn_varlen_fwd_args* a, size_t* bytes) {
    return query_workspace(a, "flashattn_varlen_fwd_args", bytes);
}
flashattn_status flashattn_backward_workspace_size(const flashattn_bwd_args* a, size_t* bytes) {
    return query_workspace(a, "flashattn_bwd_args", bytes);
}
flashattn_status flashattn_varlen_backward_workspace_size(const flashattn_varlen_bwd_args* a, size_t* bytes) {
    return query_workspace(a, "flashattn_varlen_bwd_args", bytes);
}
flashattn_status flashattn_kvcache_workspace_size(const flashattn_kvcache_args* a, size_t* bytes) {
    return query_workspace(a, "flashattn_kvcache_args", bytes);
}

const char* flashattn_last_error(void) { return t_last_error.c_str(); }

const char* flashattn_status_name(flashattn_status status) {
    switch (status) {
        case FLASHATTN_STATUS_OK: return "ok";
        case FLASHATTN_STATUS_INVALID_ARGUMENT: return "invalid_argument";
        case FLASHATTN_STATUS_UNSUPPORTED: return "unsupported";
        case FLASHATTN_STATUS_CUDA_ERROR: return "cuda_error";
        case FLASHATTN_STATUS_INTERNAL: return "internal";
        default: return "unknown";
    }
}

const char* flashattn_version(void) { return flashattn::version(); }
int32_t flashattn_abi_version(void) { return FLASHATTN_ABI_VERSION; }

size_t flashattn_doctor_report(char* buf, size_t len) {
    std::string report;
    try {
        report = flashattn::doctor_report();
    } catch (...) {
        return 0;
    }
    if (buf && len > 0) {
        const size_t n = report.size() < len - 1 ? report.size() : len - 1;
        std::memcpy(buf, report.data(), n);
        buf[n] = '\0';
    }
    return report.size();
}

}  // extern "C"
