// Backend selection by device, and zero-filling of outputs the backends are not asked to write.
#include "api/dispatch.h"

#include <cstring>
#include <exception>
#include <string>

#include "reference/reference.h"

namespace flashattn::api {

namespace {

// float64 tensors are how callers ask for a high-precision oracle: they get fp64 accumulation too.
void run_reference(const AttnParams& p) {
    const reference::Accum acc = p.dtype == ElemType::f64 ? reference::Accum::f64 : reference::Accum::f32;
    switch (p.op) {
        case OpKind::forward: reference::forward(p, acc); return;
        case OpKind::backward: reference::backward(p, acc); return;
        case OpKind::kvcache: reference::kvcache_forward(p, acc); return;
        case OpKind::merge: reference::merge(p); return;
    }
    throw Error(Status::internal, "run_backend: unknown operation " + std::to_string(static_cast<int32_t>(p.op)));
}

}  // namespace

void run_backend(const AttnParams& p, Placement where) {
    try {
        if (where.on_cpu()) run_reference(p);
        else cuda_dispatch(p, where.index);
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        // The API promises flashattn::Error; anything else escaping a backend is a bug there.
        throw Error(Status::internal, std::string(where.on_cpu() ? "CPU reference" : "GPU backend") + " failed: " + e.what());
    }
}

size_t backend_workspace_bytes(const AttnParams& p, Placement where) {
    if (where.on_cpu()) return 0;  // the reference allocates what it needs itself
    return cuda_workspace_bytes(p, where.index);
}

void zero_fill(const TensorView& t, Placement where, void* stream) {
    if (!t.present() || t.numel() == 0) return;
    if (!where.on_cpu()) {
        cuda_zero_fill(t, where.index, stream);
        return;
    }
    // Row by row along the contiguous last dimension.
    const int last = t.ndim - 1;
    const size_t row_bytes = static_cast<size_t>(t.shape[last]) * dtype_size(t.dtype);
    int64_t index[kMaxDims] = {};
    const int64_t rows = t.numel() / t.shape[last];
    for (int64_t r = 0; r < rows; ++r) {
        int64_t offset = 0;
        for (int d = 0; d < last; ++d) offset += index[d] * t.stride[d];
        std::memset(static_cast<unsigned char*>(t.data) + offset * static_cast<int64_t>(dtype_size(t.dtype)), 0, row_bytes);
        for (int d = last - 1; d >= 0; --d) {
            if (++index[d] < t.shape[d]) break;
            index[d] = 0;
        }
    }
}

}  // namespace flashattn::api
