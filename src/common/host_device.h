// FLASHATTN_HD marks small functions compiled for both the host (CPU reference, API) and the device (kernels).
#pragma once

#if defined(__CUDACC__)
#define FLASHATTN_HD __host__ __device__ __forceinline__
#else
#define FLASHATTN_HD inline
#endif
