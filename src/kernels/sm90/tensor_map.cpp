// Tensor maps for the copy engine (tensor_map.h).
#include "kernels/sm90/tensor_map.h"

#include <cuda_runtime_api.h>

#include <string>

#include "flashattn/flashattn.h"
#include "kernels/common/cuda_check.h"

namespace flashattn::kernels {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
constexpr unsigned kEncoderAbiVersion = 12000;  // cuTensorMapEncodeTiled's signature since CUDA 12.0
constexpr uint32_t kSwizzleBytes = 128;
constexpr int kRank = 2;

EncodeTiled encoder() {
    static EncodeTiled fn = [] {
        void* ptr = nullptr;
        cudaDriverEntryPointQueryResult found{};
        check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, kEncoderAbiVersion,
                                                    cudaEnableDefault, &found),
                   "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
        if (found != cudaDriverEntryPointSuccess || !ptr)
            throw Error(Status::unsupported, "the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12 or newer)");
        return reinterpret_cast<EncodeTiled>(ptr);
    }();
    return fn;
}

}  // namespace

CUtensorMap make_tensor_map_2d_sw128(const void* base, ElemType dtype, uint64_t cols, uint64_t rows,
                                     uint64_t row_stride_elems, uint32_t box_cols, uint32_t box_rows) {
    constexpr uint64_t kElemBytes = 2;
    if (dtype != ElemType::f16 && dtype != ElemType::bf16)
        throw Error(Status::internal, "make_tensor_map_2d_sw128: a 16-bit dtype expected");
    if (box_cols * kElemBytes > kSwizzleBytes)
        throw Error(Status::internal, "make_tensor_map_2d_sw128: box rows wider than the 128-byte swizzle");
    CUtensorMap map{};
    const cuuint64_t dims[kRank] = {cols, rows};
    const cuuint64_t strides[kRank - 1] = {row_stride_elems * kElemBytes};  // bytes; the innermost is implicit
    const cuuint32_t box[kRank] = {box_cols, box_rows};
    const cuuint32_t element_strides[kRank] = {1, 1};
    const CUresult r = encoder()(&map,
                                 dtype == ElemType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                 kRank, const_cast<void*>(base), dims, strides, box, element_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        throw Error(Status::cuda_error, "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r)));
    return map;
}

}  // namespace flashattn::kernels
