// wgmma's shared-memory matrix descriptors: plain arithmetic on addresses, compiled for the host too so that the
// identities the kernels rely on are checked on the CPU (tests/kernels/test_smem_desc.cpp).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn::ptx {

// A shared-memory matrix descriptor for a K-major tile of 128-byte rows (64 16-bit elements) in the 128-byte swizzle
// the copy engine writes with CU_TENSOR_MAP_SWIZZLE_128B: rows grouped by 8 (1024 bytes, the stride between groups),
// the tile 1024-byte aligned. Advancing k by 16 elements inside the row adds 32 bytes to the start address.
//   bits 0-13 start address >> 4 | 16-29 leading byte offset >> 4 (unused with this swizzle: 1)
//   | 32-45 stride byte offset >> 4 | 62-63 swizzle mode (1: 128-byte)
constexpr uint64_t kDescSwizzle128B = 1;
constexpr uint32_t kSwizzleRowGroupBytes = 1024;
FLASHATTN_HD constexpr uint64_t smem_desc_sw128(uint32_t smem_byte_addr, uint32_t leading_bytes = 16,
                                                uint32_t group_bytes = kSwizzleRowGroupBytes) {
    uint64_t desc = 0;
    desc |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
    desc |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
    desc |= static_cast<uint64_t>((group_bytes >> 4) & 0x3FFF) << 32;
    desc |= kDescSwizzle128B << 62;
    return desc;
}
// The same for a K-major tile whose 8-row groups lie group_bytes apart (a multiple of 1024) instead of one after the
// other: another tile's groups can sit between them, each group still a whole 1024-byte swizzle block. The kv-cache
// kernel's folded K pieces (KvcPlan::k_fold) interleave a tile's two 64-column halves by group that way.
FLASHATTN_HD constexpr uint64_t smem_desc_sw128_groups(uint32_t smem_byte_addr, uint32_t group_bytes) {
    return smem_desc_sw128(smem_byte_addr, 16, group_bytes);
}
// The descriptor of the tile offset_bytes (a multiple of 16) further on than desc's: its start address field plus
// offset_bytes >> 4. Shared-memory addresses stay below 2^18, so that 14-bit field never carries into the next, and
// a kernel can build a tile's descriptor once and reach each k16 step's with one add.
FLASHATTN_HD constexpr uint64_t smem_desc_advance(uint64_t desc, uint32_t offset_bytes) {
    return desc + (offset_bytes >> 4);
}
// The same for an N-major B operand wider than one 128-byte row (64 16-bit columns): its 64-column boxes lie
// box_bytes apart, the leading byte offset of the N-major 128-byte-swizzle layout (at most 256 KB - 16).
FLASHATTN_HD constexpr uint64_t smem_desc_sw128_n_major(uint32_t smem_byte_addr, uint32_t box_bytes) {
    return smem_desc_sw128(smem_byte_addr, box_bytes);
}

}  // namespace flashattn::ptx
