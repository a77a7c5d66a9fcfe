// fp16 and bf16 storage conversions for host code (round to nearest even; device code uses cuda_fp16/cuda_bf16),
// and the base-2 softmax constants host and device code share.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace flashattn {

// The softmax runs in base 2: e^x = 2^(x * kLog2e); a base-2 logarithm times kLn2 is a natural one.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t mant = h & 0x3FFu;
    if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
        const float mag = static_cast<float>(mant) * 0x1p-24f;
        return sign ? -mag : mag;
    }
    if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));  // inf / nan
    return bits_float(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
    const uint32_t x = float_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t mag = x & 0x7FFFFFFFu;
    if (mag >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (mag > 0x7F800000u ? 0x200u : 0u));
    if (mag >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
    if (mag < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal, units of 2^-24
        const float scaled = bits_float(mag) * 0x1p24f;  // exact: a power-of-two multiply
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
    }
    uint32_t h = ((((mag >> 23) - 127u + 15u)) << 10) | ((mag & 0x7FFFFFu) >> 13);
    const uint32_t rest = mag & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // ties to even; a carry into the exponent is right
    return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float f) {
    const uint32_t x = float_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
    return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace flashattn
