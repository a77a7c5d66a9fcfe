// wgmma's shared-memory descriptors (src/kernels/common/smem_desc.h), on the CPU. The Hopper kernels build a tile's
// descriptor once and reach each k16 step, box and stage by smem_desc_advance; that is only right while adding the
// offset to the descriptor equals building the descriptor of the offset address, which these cases check over every
// 16-byte aligned shared-memory address an H100 block can have.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/common/smem_desc.h"

namespace flashattn::ptx {
namespace {

constexpr uint32_t kAlign = 16;                  // descriptors address 16-byte units
constexpr uint32_t kSharedWindow = 1u << 18;     // the start-address field's reach (14 bits of address >> 4)
constexpr uint32_t kSmemPerBlock = 228 * 1024;   // compute capability 9.0's shared memory an SM, the most a block sees
constexpr uint32_t kOffsetStride = 5 * kAlign;   // offsets sampled (every one would be 10^8 pairs)

TEST(SmemDesc, FieldsOfAnAddress) {
    const uint64_t d = smem_desc_sw128(0x1f3a0);
    EXPECT_EQ(d & 0x3FFF, 0x1f3a0u >> 4);                      // start address >> 4
    EXPECT_EQ((d >> 16) & 0x3FFF, 1u);                         // leading byte offset >> 4 (unused: 16 bytes)
    EXPECT_EQ((d >> 32) & 0x3FFF, kSwizzleRowGroupBytes >> 4);  // stride between 8-row groups
    EXPECT_EQ(d >> 62, kDescSwizzle128B);                      // 128-byte swizzle
    const uint64_t n = smem_desc_sw128_n_major(0x8000, 176 * 128);
    EXPECT_EQ((n >> 16) & 0x3FFF, (176u * 128) >> 4);          // the boxes' stride of an N-major tile
    const uint64_t g = smem_desc_sw128_groups(0x4400, 2048);    // folded K pieces: groups 2 KB apart
    EXPECT_EQ(g & 0x3FFF, 0x4400u >> 4);
    EXPECT_EQ((g >> 16) & 0x3FFF, 1u);
    EXPECT_EQ((g >> 32) & 0x3FFF, 2048u >> 4);
    EXPECT_EQ(g >> 62, kDescSwizzle128B);
    EXPECT_EQ(smem_desc_sw128_groups(0x4400, kSwizzleRowGroupBytes), smem_desc_sw128(0x4400));
}

TEST(SmemDesc, AdvanceIsTheDescriptorOfTheOffsetAddress) {
    for (uint32_t box_bytes : {16u, 64u * 128, 176u * 128}) {
        for (uint32_t addr = 0; addr < kSmemPerBlock; addr += kAlign) {
            const uint64_t base = smem_desc_sw128_n_major(addr, box_bytes);
            for (uint32_t off = 0; addr + off < kSmemPerBlock; off += kOffsetStride) {
                if (smem_desc_advance(base, off) != smem_desc_sw128_n_major(addr + off, box_bytes)) {
                    ADD_FAILURE() << "address " << addr << " + " << off << " (box bytes " << box_bytes << ")";
                    return;
                }
            }
        }
    }
}

TEST(SmemDesc, AdvanceStopsAtTheFieldsReach) {
    // Past 2^18 the address would carry out of its 14-bit field: no H100 block reaches there.
    static_assert(kSmemPerBlock <= kSharedWindow, "a block's shared memory fits the start-address field");
    const uint64_t last = smem_desc_sw128(kSharedWindow - kAlign);
    EXPECT_NE(smem_desc_advance(last, kAlign), smem_desc_sw128(0));  // the wrapped address differs: a carry
}

}  // namespace
}  // namespace flashattn::ptx
