// The CUDA element type of a params dtype.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/params.h"

namespace flashattn::kernels {

template <ElemType kElem> struct ElemOfT;
template <> struct ElemOfT<ElemType::f16> { using type = __half; };
template <> struct ElemOfT<ElemType::bf16> { using type = __nv_bfloat16; };
template <ElemType kElem> using ElemOf = typename ElemOfT<kElem>::type;

}  // namespace flashattn::kernels
