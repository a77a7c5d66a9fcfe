// Values shared by the GPU test case lists.
//
// Cost: the GPU work is small; the CPU side (fp32 oracle and lowp baseline, both O(N^2)) dominates. Over the whole
// suite it is about 115 GFLOP of forward attention (2 x pairs x (head_dim + head_dim_v)), about 415 GFLOP in all
// with both CPU implementations and the backwards: roughly half a minute on 16 cores. Keep new cases within that.
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::testing {

constexpr DType kF16 = DType::f16;
constexpr DType kBF16 = DType::bf16;
constexpr DType kDtypes[] = {kF16, kBF16};

// Every head dim the kernels must handle (40 and 72: not multiples of 32; 200: not a power of two).
constexpr int64_t kHeadDims[] = {40, 64, 72, 128, 200, 256};

// Above this many (row, key) pairs per head a case runs on one sequence of kLargeHeads heads: the CPU oracle's
// cost grows as batch x heads x seqlen_q x seqlen_k x head_dim.
constexpr int64_t kLargePairs = 1000 * 1000;
constexpr int64_t kLargeHeads = 8;

// Dropout RNG inputs whose high 32 bits matter (philox.h mixes them into the key).
constexpr uint64_t kBigSeed = 0xDEADBEEFCAFEF00Dull;
constexpr uint64_t kBigOffset = (uint64_t{1} << 32) + 12345;

// Varlen batches. Ragged: lengths 0 and 1 on both sides, a sequence whose keys are all absent (q 17, k 0), and
// both seqlen_q < seqlen_k and seqlen_q > seqlen_k.
inline const std::vector<int32_t> kRaggedQ = {0, 1, 17, 113, 300, 64, 17};
inline const std::vector<int32_t> kRaggedK = {5, 1, 0, 200, 513, 64, 1};
// With seqused_k: only the first seqused_k[b] keys count (one sequence uses none of its keys).
inline const std::vector<int32_t> kUsedQ = {17, 113, 5, 300, 1};
inline const std::vector<int32_t> kUsedK = {64, 200, 9, 513, 17};
inline const std::vector<int32_t> kUsedUsed = {10, 200, 0, 100, 17};
// Long sequences, so that every sequence spans several blocks of rows and keys.
inline const std::vector<int32_t> kLongQ = {1000, 2049, 17};
inline const std::vector<int32_t> kLongK = {2049, 1000, 1};

}  // namespace flashattn::testing
