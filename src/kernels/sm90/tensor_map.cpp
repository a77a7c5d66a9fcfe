// Tensor maps for the copy engine (tensor_map.h).
#include "kernels/sm90/tensor_map.h"

#include <cuda_runtime_api.h>

#include <string>

#include "flashattn/flashattn.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/driver_entry.h"

namespace flashattn::kernels {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
constexpr unsigned kEncoderAbiVersion = 12000;  // cuTensorMapEncodeTiled's signature since CUDA 12.0
constexpr uint32_t kSwizzleBytes = 128;
constexpr int kRank = 2;

EncodeTiled encoder() {
    static const EncodeTiled fn = [] {
        const DriverEntry entry = driver_entry_point("cuTensorMapEncodeTiled", kEncoderAbiVersion);
        check_cuda(entry.error, "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
        if (!entry.function)
            throw Error(Status::unsupported,
                        "the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12 or newer)");
        return driver_function<EncodeTiled>(entry);
    }();
    return fn;
}

}  // namespace

namespace {

CUtensorMap encode_sw128(const void* base, ElemType dtype, cuuint32_t rank, const cuuint64_t* dims,
                         const cuuint64_t* byte_strides, const cuuint32_t* box) {
    if (dtype != ElemType::f16 && dtype != ElemType::bf16)
        throw Error(Status::internal, "tensor map: a 16-bit dtype expected");
    constexpr uint64_t kElemBytes = 2;
    if (box[0] * kElemBytes > kSwizzleBytes)
        throw Error(Status::internal, "tensor map: box rows wider than the 128-byte swizzle");
    const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    CUtensorMap map{};
    const CUresult r = encoder()(&map,
                                 dtype == ElemType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                 rank, const_cast<void*>(base), dims, byte_strides, box, element_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        throw Error(Status::cuda_error, "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r)));
    return map;
}

}  // namespace

CUtensorMap make_tensor_map_4d_sw128(const void* base, ElemType dtype, const uint64_t (&dims)[4],
                                     const uint64_t (&strides_elems)[3], uint32_t box_cols, uint32_t box_rows,
                                     uint32_t box_heads) {
    constexpr uint64_t kElemBytes = 2;
    const cuuint64_t d[4] = {dims[0], dims[1], dims[2], dims[3]};
    const cuuint64_t strides[3] = {strides_elems[0] * kElemBytes, strides_elems[1] * kElemBytes,
                                   strides_elems[2] * kElemBytes};
    const cuuint32_t box[4] = {box_cols, box_rows, box_heads, 1};
    return encode_sw128(base, dtype, 4, d, strides, box);
}

CUtensorMap make_tensor_map_5d_sw128(const void* base, ElemType dtype, const uint64_t (&dims)[5],
                                     const uint64_t (&strides_elems)[4], const uint32_t (&box)[5]) {
    constexpr uint64_t kElemBytes = 2;
    const cuuint64_t d[5] = {dims[0], dims[1], dims[2], dims[3], dims[4]};
    const cuuint64_t strides[4] = {strides_elems[0] * kElemBytes, strides_elems[1] * kElemBytes,
                                   strides_elems[2] * kElemBytes, strides_elems[3] * kElemBytes};
    const cuuint32_t b[5] = {box[0], box[1], box[2], box[3], box[4]};
    return encode_sw128(base, dtype, 5, d, strides, b);
}

CUtensorMap make_tensor_map_2d_sw128(const void* base, ElemType dtype, uint64_t cols, uint64_t rows,
                                     uint64_t row_stride_elems, uint32_t box_cols, uint32_t box_rows) {
    constexpr uint64_t kElemBytes = 2;
    const cuuint64_t dims[kRank] = {cols, rows};
    const cuuint64_t strides[kRank - 1] = {row_stride_elems * kElemBytes};  // bytes; the innermost is implicit
    const cuuint32_t box[kRank] = {box_cols, box_rows};
    return encode_sw128(base, dtype, kRank, dims, strides, box);
}

}  // namespace flashattn::kernels
