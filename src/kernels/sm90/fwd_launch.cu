// Launching the Hopper forward: tensor maps for Q, K and V, the grid, the shared memory. Instances: float16,
// bfloat16 x head dims 64, 128 x one or two warpgroups a block; head dims below a bucket are zero-filled by the
// copy engine. One warpgroup a block by default (faster on an H100 at every swept shape but two, bench/NOTES_sm90.md);
// FLASHATTN_SM90_WARPGROUPS=2 picks the two-warpgroup blocks, FLASHATTN_SM90_OVERLAP=1 the one-warpgroup kernel that
// overlaps each softmax with the previous P V product (not yet measured).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/common/cuda_check.h"
#include "kernels/common/elem_type.cuh"
#include "kernels/sm90/fwd_kernel.cuh"
#include "kernels/sm90/fwd_sm90.h"
#include "kernels/sm90/tensor_map.h"

namespace flashattn::kernels {

namespace {

constexpr int kSmallBucket = 64, kLargeBucket = 128;
constexpr int64_t kTmaStrideElems = 8;    // the copy engine's strides are multiples of 16 bytes
constexpr uintptr_t kTmaBaseAlign = 16;
std::atomic<int64_t> g_launches{0};

bool tma_addressable(const void* base, int64_t row, int64_t head, int64_t batch, int heads, int batches) {
    auto fits = [](int64_t stride, int extent) { return extent == 1 || (stride > 0 && stride % kTmaStrideElems == 0); };
    return reinterpret_cast<uintptr_t>(base) % kTmaBaseAlign == 0 && row > 0 && row % kTmaStrideElems == 0 &&
           fits(head, heads) && fits(batch, batches);
}

// A size-1 dimension's stride is never stepped; the encoder still wants a valid one.
uint64_t usable_stride(int64_t stride, int extent, int64_t fallback) {
    return extent == 1 ? static_cast<uint64_t>(fallback) : static_cast<uint64_t>(stride);
}

CUtensorMap attention_map(const void* base, ElemType dtype, int head_dim, int rows, int heads, int batch,
                          int64_t row_stride, int64_t head_stride, int64_t batch_stride, uint32_t box_cols,
                          uint32_t box_rows) {
    const uint64_t dims[4] = {uint64_t(head_dim), uint64_t(rows), uint64_t(heads), uint64_t(batch)};
    const uint64_t strides[3] = {uint64_t(row_stride), usable_stride(head_stride, heads, row_stride),
                                 usable_stride(batch_stride, batch, row_stride)};
    return make_tensor_map_4d_sw128(base, dtype, dims, strides, box_cols, box_rows);
}

template <typename Elem, int kHeadDim, int kWarpgroups, bool kOverlap>
void launch(const AttnParams& p) {
    using T = Sm90FwdTraits<Elem, kHeadDim, kWarpgroups, kOverlap>;
    const CUtensorMap map_q = attention_map(p.q, p.dtype, p.head_dim, p.seqlen_q, p.nheads, p.batch, p.q_row_stride,
                                            p.q_head_stride, p.q_batch_stride, T::kBoxCols, T::kBlockM);
    const CUtensorMap map_k = attention_map(p.k, p.dtype, p.head_dim, p.seqlen_k, p.nheads_k, p.batch,
                                            p.k_row_stride, p.k_head_stride, p.k_batch_stride, T::kBoxCols, T::kBlockN);
    const CUtensorMap map_v = attention_map(p.v, p.dtype, p.head_dim_v, p.seqlen_k, p.nheads_k, p.batch,
                                            p.v_row_stride, p.v_head_stride, p.v_batch_stride, T::kBoxCols, T::kBlockN);
    const auto kernel = [] {
        if constexpr (kOverlap)
            return fwd_sm90_overlap_kernel<T>;
        else
            return fwd_sm90_kernel<T>;
    }();
    constexpr int kSmem = sm90_fwd_smem_bytes<T>();
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
               "cudaFuncSetAttribute(Hopper forward shared memory)");
    const dim3 grid((p.seqlen_q + T::kBlockM - 1) / T::kBlockM, p.batch, p.nheads);
    kernel<<<grid, T::kThreads, kSmem, static_cast<cudaStream_t>(p.stream)>>>(map_q, map_k, map_v, p);
    check_cuda(cudaGetLastError(), "Hopper forward kernel launch");
    g_launches.fetch_add(1, std::memory_order_relaxed);
}

bool env_is(const char* name, const char* value) {
    const char* choice = std::getenv(name);
    return choice && std::strcmp(choice, value) == 0;
}

template <ElemType kElem, int kWarpgroups, bool kOverlap>
void launch_shape(const AttnParams& p) {
    if (p.head_dim <= kSmallBucket)
        launch<ElemOf<kElem>, kSmallBucket, kWarpgroups, kOverlap>(p);
    else
        launch<ElemOf<kElem>, kLargeBucket, kWarpgroups, kOverlap>(p);
}

template <ElemType kElem>
void launch_dtype(const AttnParams& p) {
    if (env_is("FLASHATTN_SM90_OVERLAP", "1"))
        launch_shape<kElem, 1, true>(p);
    else if (env_is("FLASHATTN_SM90_WARPGROUPS", "2"))
        launch_shape<kElem, 2, false>(p);
    else
        launch_shape<kElem, 1, false>(p);
}

}  // namespace

bool sm90_forward_handles(const AttnParams& p) {
    if (p.op != OpKind::forward || p.is_varlen) return false;
    if (p.dtype != ElemType::f16 && p.dtype != ElemType::bf16) return false;
    if (p.dropout_p > 0.f || p.softcap > 0.f || p.alibi_slopes || p.attn_probs) return false;
    if (p.head_dim != p.head_dim_v || p.head_dim > kLargeBucket || p.head_dim % 8 != 0) return false;
    if (p.batch <= 0 || p.seqlen_q <= 0 || p.seqlen_k <= 0) return false;
    // The output is written 4 bytes (two elements) at a time.
    if (reinterpret_cast<uintptr_t>(p.out) % 4 != 0 || p.out_row_stride % 2 != 0 ||
        (p.nheads > 1 && p.out_head_stride % 2 != 0) || (p.batch > 1 && p.out_batch_stride % 2 != 0))
        return false;
    return tma_addressable(p.q, p.q_row_stride, p.q_head_stride, p.q_batch_stride, p.nheads, p.batch) &&
           tma_addressable(p.k, p.k_row_stride, p.k_head_stride, p.k_batch_stride, p.nheads_k, p.batch) &&
           tma_addressable(p.v, p.v_row_stride, p.v_head_stride, p.v_batch_stride, p.nheads_k, p.batch);
}

void launch_fwd_sm90(const AttnParams& p) {
    if (p.dtype == ElemType::bf16)
        launch_dtype<ElemType::bf16>(p);
    else
        launch_dtype<ElemType::f16>(p);
}

int64_t sm90_forward_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace flashattn::kernels
