// The dropout RNG, shared bit for bit by the CPU reference and every GPU kernel.
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) is counter based: the 128
// random bits for a counter depend on nothing else, so any thread can draw the bits for any element directly.
//
// The mask of element (batch b, query head h, row i, key column j) is a pure function of (seed, offset, b, h, i, j):
//   counter = { j / 8, i, b * nheads + h, low 32 bits of offset }
//   key     = { low 32 bits of seed, high 32 bits of seed ^ high 32 bits of offset }
// One Philox call gives 8 random 16-bit values, one for each of 8 consecutive columns; column j uses value j % 8.
// Element kept iff value < keep_threshold, where keep_threshold = round((1 - p) * 65536): the keep probability
// is quantised to 1/65536. Rows and columns are positions within the sequence (varlen: relative to its start).
#pragma once

#include <cstdint>

#include "host_device.h"

namespace flashattn {

struct Philox4 {
    uint32_t x, y, z, w;
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // round multipliers
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // key schedule (golden ratio, sqrt(3) - 1)
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;
constexpr int kDropoutColsPerDraw = 8;         // 128 bits = 8 x 16-bit values
constexpr uint32_t kDropoutThresholdOne = 65536u;  // keep everything

FLASHATTN_HD uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

FLASHATTN_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int round = 0; round < kPhiloxRounds; ++round) {
        const uint32_t hi0 = philox_mulhi(kPhiloxM0, ctr.x);
        const uint32_t lo0 = kPhiloxM0 * ctr.x;
        const uint32_t hi1 = philox_mulhi(kPhiloxM1, ctr.z);
        const uint32_t lo1 = kPhiloxM1 * ctr.z;
        ctr = Philox4{hi1 ^ ctr.y ^ key0, lo1, hi0 ^ ctr.w ^ key1, lo0};
        key0 += kPhiloxW0;
        key1 += kPhiloxW1;
    }
    return ctr;
}

// The 128 random bits that cover columns [8 * (j / 8), 8 * (j / 8) + 8) of row i.
FLASHATTN_HD Philox4 dropout_bits(uint64_t seed, uint64_t offset, uint32_t batch_head, uint32_t row,
                                  uint32_t col_block) {
    const Philox4 ctr{col_block, row, batch_head, static_cast<uint32_t>(offset)};
    const uint32_t key0 = static_cast<uint32_t>(seed);
    const uint32_t key1 = static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(offset >> 32);
    return philox4x32_10(ctr, key0, key1);
}

// The 16-bit random value of column j (0..7 within its block of 8) from one draw.
FLASHATTN_HD uint32_t dropout_value(const Philox4& bits, int col_in_block) {
    const uint32_t word = (col_in_block < 4) ? ((col_in_block < 2) ? bits.x : bits.y)
                                             : ((col_in_block < 6) ? bits.z : bits.w);
    return (col_in_block & 1) ? (word >> 16) : (word & 0xFFFFu);
}

// batch_head = b * nheads + h (query head), wrapping at 32 bits.
FLASHATTN_HD bool dropout_keep(uint64_t seed, uint64_t offset, uint32_t batch_head, uint32_t row, uint32_t col,
                               uint32_t keep_threshold) {
    const Philox4 bits = dropout_bits(seed, offset, batch_head, row, col / kDropoutColsPerDraw);
    return dropout_value(bits, static_cast<int>(col % kDropoutColsPerDraw)) < keep_threshold;
}

// keep_threshold for drop probability p in [0, 1).
inline uint32_t dropout_keep_threshold(float p) {
    const double keep = (1.0 - static_cast<double>(p)) * kDropoutThresholdOne;
    const double rounded = keep < 0 ? 0 : static_cast<double>(static_cast<uint64_t>(keep + 0.5));
    return rounded > kDropoutThresholdOne ? kDropoutThresholdOne : static_cast<uint32_t>(rounded);
}

}  // namespace flashattn
