// Reading and writing rows of tensors of any params dtype from the CPU reference.
//
// The reference converts whole rows (one head's head_dim values, contiguous in memory) between the storage type
// and the accumulator type: the dtype switch happens once per row, not once per element.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/numeric.h"
#include "common/params.h"

namespace flashattn::reference {

inline int64_t elem_bytes(ElemType t) {
    switch (t) {
        case ElemType::f16:
        case ElemType::bf16: return sizeof(uint16_t);
        case ElemType::f32: return sizeof(float);
        case ElemType::f64: return sizeof(double);
    }
    return 0;
}

// n consecutive elements of type t starting at element offset `off` of `base`, converted to Acc.
template <class Acc>
void read_row(ElemType t, const void* base, int64_t off, int64_t n, Acc* dst) {
    const unsigned char* src = static_cast<const unsigned char*>(base) + off * elem_bytes(t);
    switch (t) {
        case ElemType::f16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + i * sizeof h, sizeof h);
                dst[i] = static_cast<Acc>(half_to_float(h));
            }
            break;
        case ElemType::bf16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + i * sizeof h, sizeof h);
                dst[i] = static_cast<Acc>(bf16_to_float(h));
            }
            break;
        case ElemType::f32:
            for (int64_t i = 0; i < n; ++i) {
                float f;
                std::memcpy(&f, src + i * sizeof f, sizeof f);
                dst[i] = static_cast<Acc>(f);
            }
            break;
        case ElemType::f64:
            for (int64_t i = 0; i < n; ++i) {
                double d;
                std::memcpy(&d, src + i * sizeof d, sizeof d);
                dst[i] = static_cast<Acc>(d);
            }
            break;
    }
}

// n values written as type t (rounded to nearest even) at element offset `off` of `base`.
template <class Acc>
void write_row(ElemType t, void* base, int64_t off, int64_t n, const Acc* src) {
    unsigned char* dst = static_cast<unsigned char*>(base) + off * elem_bytes(t);
    switch (t) {
        case ElemType::f16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = float_to_half(static_cast<float>(src[i]));
                std::memcpy(dst + i * sizeof h, &h, sizeof h);
            }
            break;
        case ElemType::bf16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = float_to_bf16(static_cast<float>(src[i]));
                std::memcpy(dst + i * sizeof h, &h, sizeof h);
            }
            break;
        case ElemType::f32:
            for (int64_t i = 0; i < n; ++i) {
                const float f = static_cast<float>(src[i]);
                std::memcpy(dst + i * sizeof f, &f, sizeof f);
            }
            break;
        case ElemType::f64:
            for (int64_t i = 0; i < n; ++i) {
                const double d = static_cast<double>(src[i]);
                std::memcpy(dst + i * sizeof d, &d, sizeof d);
            }
            break;
    }
}

// v as it reads back after being stored as type t: what a kernel sees when it reuses a value it wrote.
inline double round_to(ElemType t, double v) {
    switch (t) {
        case ElemType::f16: return half_to_float(float_to_half(static_cast<float>(v)));
        case ElemType::bf16: return bf16_to_float(float_to_bf16(static_cast<float>(v)));
        case ElemType::f32: return static_cast<float>(v);
        case ElemType::f64: return v;
    }
    return v;
}

}  // namespace flashattn::reference
