// Validation pieces shared by every operation.
#include <cmath>
#include <string>

#include "api/overlap.h"
#include "api/validate.h"

namespace flashattn::api {

namespace {

bool valid_device_type(DeviceType d) { return d == DeviceType::cpu || d == DeviceType::cuda; }

std::string dtype_str(DType d) {
    const int32_t v = static_cast<int32_t>(d);
    if (v < 0 || v > static_cast<int32_t>(DType::i32)) return "unknown dtype " + std::to_string(v);
    return dtype_name(d);
}

std::string value_str(float v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    std::string s = std::to_string(v);
    // std::to_string prints 6 decimals: trim the trailing zeros for readable messages.
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

}  // namespace

Placement check_devices(std::initializer_list<NamedView> tensors) {
    Placement where;
    const char* first = nullptr;
    for (const NamedView& t : tensors) {
        if (t.view->ndim < 0 || t.view->ndim > kMaxDims)
            fail(std::string(t.name) + ": expected 0 (absent) to " + std::to_string(kMaxDims) + " dimensions, got " +
                 std::to_string(t.view->ndim));
        if (!t.view->present()) continue;
        if (!valid_device_type(t.view->device))
            fail(std::string(t.name) + ": expected device type cpu (0) or cuda (1), got " +
                 std::to_string(static_cast<int32_t>(t.view->device)));
        if (t.view->device == DeviceType::cuda && t.view->device_index < 0)
            fail(std::string(t.name) + ": expected a CUDA device index >= 0, got " +
                 std::to_string(t.view->device_index));
        // The index of a CPU tensor means nothing: CPU tensors are all on the one host.
        const int32_t index = t.view->device == DeviceType::cuda ? t.view->device_index : 0;
        if (!first) {
            first = t.name;
            where = Placement{t.view->device, index};
            continue;
        }
        if (t.view->device != where.device || index != where.index)
            fail(std::string(t.name) + ": expected device " + device_str(where.device, where.index) +
                 " (the device of " + first + "): all tensors of a call must be on one device, got " +
                 device_str(t.view->device, index));
    }
    return where;
}

DType check_data_dtype(const TensorView& q, const char* name, Placement where) {
    const DType d = q.dtype;
    if (d == DType::f16 || d == DType::bf16) return d;
    if ((d == DType::f32 || d == DType::f64) && where.on_cpu()) return d;
    const bool float_on_gpu = d == DType::f32 || d == DType::f64;
    fail(std::string(name) + ": expected dtype float16 or bfloat16 (float32/float64 only for CPU tensors), got " +
         dtype_str(d) + (float_on_gpu ? " on " + device_str(where.device, where.index) : std::string()));
}

void check_data_tensor(const TensorView& t, const char* name, DType dtype, Placement where) {
    if (t.dtype != dtype)
        fail(std::string(name) + ": expected dtype " + dtype_name(dtype) + " (the dtype of q), got " + dtype_str(t.dtype));
    expect_layout(t, name, Layout::rows);
    if (!where.on_cpu()) expect_cuda_alignment(t, name);
}

void check_stat_tensor(const TensorView& t, const char* name) {
    expect_dtype(t, name, DType::f32);
    expect_layout(t, name, Layout::contiguous);
}

void check_index_tensor(const TensorView& t, const char* name, Layout layout) {
    expect_dtype(t, name, DType::i32);
    expect_layout(t, name, layout);
}

void check_head_dim(int64_t value, const char* tensor, const char* dim_name) {
    if (value < kMinHeadDim || value > kMaxHeadDim || value % kHeadDimMultiple != 0)
        fail(std::string(tensor) + ": expected " + dim_name + " a multiple of " + std::to_string(kHeadDimMultiple) +
             " in [" + std::to_string(kMinHeadDim) + ", " + std::to_string(kMaxHeadDim) + "], got " +
             std::to_string(value));
}

void check_head_groups(int64_t nheads, int64_t nheads_k, const char* k_name) {
    if (nheads_k == 0 ? nheads != 0 : nheads % nheads_k != 0)
        fail(std::string(k_name) + ": expected nheads_k dividing nheads = " + std::to_string(nheads) +
             " (each key/value head serves nheads / nheads_k query heads), got nheads_k = " + std::to_string(nheads_k));
}

void check_options(const AttentionOptions& o, const AttnDims& dims, bool allow_dropout) {
    // Negative scales are refused: the kernels' online softmax takes its running maximum over unscaled scores.
    if (!std::isnan(o.softmax_scale) && !(std::isfinite(o.softmax_scale) && o.softmax_scale >= 0.0f))
        fail("options.softmax_scale: expected a finite value >= 0, or NaN for 1/sqrt(head_dim), got " +
             value_str(o.softmax_scale));
    if (o.window_left < -1)
        fail("options.window_left: expected a window size >= 0 (use -1 for unbounded), got " +
             std::to_string(o.window_left));
    if (o.window_right < -1)
        fail("options.window_right: expected a window size >= 0 (use -1 for unbounded), got " +
             std::to_string(o.window_right));
    if (!(std::isfinite(o.softcap) && o.softcap >= 0.0f))
        fail("options.softcap: expected a finite value >= 0 (0 turns it off), got " + value_str(o.softcap));
    if (!(o.dropout_p >= 0.0f && o.dropout_p < 1.0f))
        fail("options.dropout_p: expected a probability in [0, 1), got " + value_str(o.dropout_p));
    if (!allow_dropout && o.dropout_p != 0.0f)
        fail("options.dropout_p: expected 0 (the kv-cache forward is for inference and has no dropout), got " +
             value_str(o.dropout_p));
    const TensorView& alibi = o.alibi_slopes;
    if (alibi.present()) {
        const char* name = "options.alibi_slopes";
        const bool per_head = alibi.ndim == 1 && alibi.shape[0] == dims.nheads;
        const bool per_batch_head = alibi.ndim == 2 && alibi.shape[0] == dims.batch && alibi.shape[1] == dims.nheads;
        if (!per_head && !per_batch_head)
            fail(std::string(name) + ": expected shape " + dims_str({{"nheads", dims.nheads}}) + " or " +
                 dims_str({{"batch", dims.batch}, {"nheads", dims.nheads}}) + ", got " + shape_str(alibi));
        expect_dtype(alibi, name, DType::f32);
        expect_layout(alibi, name, Layout::last_dim);
    }
}

void check_no_aliasing(std::initializer_list<NamedView> outputs, std::initializer_list<NamedView> inputs) {
    for (const NamedView* o = outputs.begin(); o != outputs.end(); ++o) {
        if (!o->view->present()) continue;
        if (self_overlaps(*o->view))
            fail(std::string(o->name) +
                 ": expected every element at its own address (an output can't be broadcast or self-overlapping), "
                 "got shape " + shape_str(*o->view) + " with overlapping strides");
        for (const NamedView& i : inputs)
            if (i.view->present() && may_overlap(*o->view, *i.view))
                fail(std::string(o->name) + ": expected an output that does not overlap the input " + i.name +
                     ", got overlapping memory");
        for (const NamedView* p = outputs.begin(); p != o; ++p)
            if (p->view->present() && may_overlap(*o->view, *p->view))
                fail(std::string(o->name) + ": expected an output that does not overlap the output " + p->name +
                     ", got overlapping memory");
    }
}

void check_host_cu_seqlens(const TensorView& cu, const char* name, int64_t total_rows, const char* total_name,
                           int64_t max_seqlen, const char* max_name) {
    const std::vector<int32_t> v = host_values(cu);
    const std::string arg(name);
    if (v[0] != 0) fail(arg + ": expected cu_seqlens[0] = 0, got " + std::to_string(v[0]));
    for (size_t b = 0; b + 1 < v.size(); ++b) {
        const int64_t len = int64_t(v[b + 1]) - v[b];
        if (len < 0)
            fail(arg + ": expected non-decreasing offsets, got cu_seqlens[" + std::to_string(b + 1) + "] = " +
                 std::to_string(v[b + 1]) + " < cu_seqlens[" + std::to_string(b) + "] = " + std::to_string(v[b]));
        if (len > max_seqlen)
            fail(arg + ": expected every sequence length <= " + max_name + " = " + std::to_string(max_seqlen) +
                 ", got length " + std::to_string(len) + " for sequence " + std::to_string(b));
    }
    if (v.back() != total_rows)
        fail(arg + ": expected the last offset to equal " + total_name + " = " + std::to_string(total_rows) +
             ", got cu_seqlens[" + std::to_string(v.size() - 1) + "] = " + std::to_string(v.back()));
}

}  // namespace flashattn::api
