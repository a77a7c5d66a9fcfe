// Turning CUDA runtime errors into flashattn::Error.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "flashattn/flashattn.h"

namespace flashattn::kernels {

inline void check_cuda(cudaError_t err, const char* what) {
    if (err != cudaSuccess)
        throw Error(Status::cuda_error, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                                            cudaGetErrorString(err) + ")");
}

}  // namespace flashattn::kernels
