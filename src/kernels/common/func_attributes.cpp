// Kernel function attributes, set once per kernel and context (func_attributes.h).
#include "kernels/common/func_attributes.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/common/cuda_check.h"
#include "kernels/common/driver_entry.h"

namespace flashattn::kernels {

namespace {

using CtxGetCurrent = CUresult (*)(CUcontext*);
using CtxGetId = CUresult (*)(CUcontext, unsigned long long*);
constexpr unsigned kCtxGetIdVersion = 12000;  // cuCtxGetId came with CUDA 12.0

// The driver's entry points (driver_entry.h); null where the driver lacks one, which only turns the cache off.
struct ContextQueries {
    CtxGetCurrent get_current = nullptr;
    CtxGetId get_id = nullptr;
};

// A failed lookup only turns the cache off; its error is cleared, so that a caller's next check does not take it for
// its own.
template <class Fn>
Fn context_query(const char* name) {
    const DriverEntry entry = driver_entry_point(name, kCtxGetIdVersion);
    if (entry.error != cudaSuccess) (void)cudaGetLastError();
    return driver_function<Fn>(entry);
}

const ContextQueries& context_queries() {
    static const ContextQueries q{context_query<CtxGetCurrent>("cuCtxGetCurrent"),
                                  context_query<CtxGetId>("cuCtxGetId")};
    return q;
}

// The current context's id; 0 where there is none yet (the runtime makes the primary context on its first call that
// needs one) or it cannot be asked.
unsigned long long current_context_id() {
    const ContextQueries& q = context_queries();
    if (!q.get_current || !q.get_id) return 0;
    CUcontext ctx = nullptr;
    unsigned long long id = 0;
    if (q.get_current(&ctx) != CUDA_SUCCESS || !ctx || q.get_id(ctx, &id) != CUDA_SUCCESS) return 0;
    return id;
}

struct SetAttributes {
    int dynamic_smem_bytes = 0;
    bool non_portable_clusters = false;
};

// FLASHATTN_FUNC_ATTRIBUTES_EVERY_CALL=1: set before every launch, nothing remembered (for measurements:
// bench/host_path.cu runs both ways). Read once a process.
bool every_call() {
    static const bool on = [] {
        const char* v = std::getenv("FLASHATTN_FUNC_ATTRIBUTES_EVERY_CALL");
        return v && std::strcmp(v, "1") == 0;
    }();
    return on;
}

// One attribute; the error's message is built only on an error.
void set_attribute(const void* kernel, cudaFuncAttribute attribute, int value, const char* what, const char* which) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, attribute, value);
    if (err != cudaSuccess) check_cuda(err, (std::string("cudaFuncSetAttribute(") + what + " " + which + ")").c_str());
}

std::mutex g_mutex;
std::map<std::pair<const void*, unsigned long long>, SetAttributes> g_set;  // by (kernel, context id)

}  // namespace

void ensure_func_attributes(const void* kernel, int dynamic_smem_bytes, bool non_portable_clusters, const char* what) {
    const unsigned long long ctx = every_call() ? 0 : current_context_id();
    if (ctx == 0) {
        set_attribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_smem_bytes, what, "shared memory");
        if (non_portable_clusters)
            set_attribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1, what, "cluster size");
        return;
    }
    // Looked up, set and recorded under one lock, so that the record is what the driver holds: a limit is only ever
    // raised (a smaller request is met by the larger one set before).
    const std::lock_guard<std::mutex> lock(g_mutex);
    SetAttributes& set = g_set[std::make_pair(kernel, ctx)];
    if (set.dynamic_smem_bytes < dynamic_smem_bytes) {
        set_attribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_smem_bytes, what, "shared memory");
        set.dynamic_smem_bytes = dynamic_smem_bytes;
    }
    if (non_portable_clusters && !set.non_portable_clusters) {
        set_attribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1, what, "cluster size");
        set.non_portable_clusters = true;
    }
}

}  // namespace flashattn::kernels
