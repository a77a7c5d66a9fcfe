// The backward's dQ accumulator layout (host code, no GPU needed): every sequence's rows, then its padding, so that
// the kernel's unguarded query tiles stay inside their own sequence's rows and the passes find every row.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "kernels/sm80/bwd_plan.h"

namespace flashattn::kernels {
namespace {

constexpr int kLargestBlockM = 128;  // the largest backward query tile (bwd_launch.cuh)

// Checks, for every sequence b of p with `lengths[b]` rows starting at q row `starts[b]`: each of its rows maps to
// accum_row0 + its index; a query tile that starts inside the sequence ends before the next sequence's first row and
// inside the accumulator; no two q rows share an accumulator row.
void check_layout(const AttnParams& p, const std::vector<int64_t>& starts, const std::vector<int64_t>& lengths) {
    std::set<int64_t> seen;
    for (size_t b = 0; b < lengths.size(); ++b) {
        const int64_t row0 = accum_row0(p, int64_t(b), starts[b]);
        for (int64_t i = 0; i < lengths[b]; ++i) {
            EXPECT_EQ(accum_row_of(p, starts[b] + i), row0 + i) << "sequence " << b << " row " << i;
            EXPECT_TRUE(seen.insert(row0 + i).second);
        }
        if (lengths[b] == 0) continue;
        const int64_t last_tile = (lengths[b] - 1) / kLargestBlockM * kLargestBlockM;
        const int64_t last_row_written = row0 + last_tile + kLargestBlockM - 1;
        EXPECT_LT(last_row_written, accum_rows(p)) << "sequence " << b;
        if (b + 1 < lengths.size()) {
            EXPECT_LT(last_row_written, accum_row0(p, int64_t(b) + 1, starts[b + 1])) << "sequence " << b;
        }
    }
}

TEST(BwdPlan, PaddedBatchKeepsEachSequenceInItsRows) {
    for (int seqlen : {1, 17, 128, 129, 1000}) {
        AttnParams p;
        p.batch = 3;
        p.seqlen_q = seqlen;
        std::vector<int64_t> starts, lengths;
        for (int b = 0; b < p.batch; ++b) {
            starts.push_back(int64_t(b) * seqlen);
            lengths.push_back(seqlen);
        }
        check_layout(p, starts, lengths);
    }
}

TEST(BwdPlan, VarlenKeepsEachSequenceInItsRowsAndSkipsEmptyOnes) {
    const std::vector<int32_t> cu = {0, 5, 5, 140, 141, 141, 397};
    AttnParams p;
    p.is_varlen = true;
    p.batch = static_cast<int>(cu.size()) - 1;
    p.total_q = cu.back();
    p.cu_seqlens_q = cu.data();
    std::vector<int64_t> starts, lengths;
    for (int b = 0; b < p.batch; ++b) {
        starts.push_back(cu[b]);
        lengths.push_back(cu[b + 1] - cu[b]);
    }
    check_layout(p, starts, lengths);
}

// The query tiles a key tile visits: every one starts inside the sequence (so its rows stay in the sequence's rows
// and padding), and together they hold every row that sees a key of the tile. Key tiles past seqlen_k (seqused_k)
// and windows that leave a key tile unseen visit none.
TEST(BwdPlan, QueryBlocksStartInsideTheSequenceAndCoverEveryRowThatSeesTheKeys) {
    struct Shape {
        int64_t seqlen_q, seqlen_k, k_rows;  // k_rows > seqlen_k: key tiles past seqused_k
        int32_t window_left, window_right;
    };
    const Shape shapes[] = {
        {100, 99, 1000, -1, 0},   // causal, seqused_k 99 of 1000 keys
        {100, 99, 1000, -1, -1},  // no mask
        {17, 113, 300, 8, 0},     // sliding window, causal
        {113, 17, 200, 3, 5},     // local window, seqlen_q > seqlen_k
        {1, 1000, 1000, -1, 0},   // one query row
        {1000, 1000, 1000, 0, 0}, // the diagonal alone
        {513, 640, 700, 200, -1},
    };
    for (const Shape& sh : shapes)
        for (int block_m : {64, 128})
            for (int block_n : {64, 128})
                for (int64_t n0 = 0; n0 < sh.k_rows; n0 += block_n) {
                    const QueryBlocks blocks = query_blocks_for_keys(n0, block_n, block_m, sh.seqlen_q, sh.seqlen_k,
                                                                     sh.window_left, sh.window_right);
                    ASSERT_LE(blocks.begin, blocks.end);
                    if (blocks.end > blocks.begin) {
                        EXPECT_GE(blocks.begin, 0);
                        EXPECT_LT(int64_t(blocks.end - 1) * block_m, sh.seqlen_q)
                            << "n0 " << n0 << " seqlen_q " << sh.seqlen_q << " seqlen_k " << sh.seqlen_k;
                    }
                    for (int64_t row = 0; row < sh.seqlen_q; ++row) {
                        const KeyRange keys = visible_keys(row, sh.seqlen_q, sh.seqlen_k, sh.window_left,
                                                           sh.window_right);
                        const bool sees = keys.begin < keys.end && keys.begin < n0 + block_n && keys.end > n0;
                        if (sees) {
                            EXPECT_GE(row, int64_t(blocks.begin) * block_m) << "n0 " << n0 << " row " << row;
                            EXPECT_LT(row, int64_t(blocks.end) * block_m) << "n0 " << n0 << " row " << row;
                        }
                    }
                }
}

// The column order within a group: a permutation, and lane t's four floats (columns 2t, 2t + 1, 8 + 2t, 9 + 2t of its
// two n8 tiles) are positions 4t ... 4t + 3.
TEST(BwdPlan, AccumColumnGroupIsAPermutationWithEachLanesFloatsTogether) {
    std::vector<int> seen(kDqAccumColGroup, 0);
    for (int w = 0; w < kDqAccumColGroup; ++w) {
        const int pos = accum_col_in_group(w);
        ASSERT_GE(pos, 0);
        ASSERT_LT(pos, kDqAccumColGroup);
        ++seen[pos];
    }
    for (int pos = 0; pos < kDqAccumColGroup; ++pos) EXPECT_EQ(seen[pos], 1) << "position " << pos;
    for (int t = 0; t < 4; ++t) {
        EXPECT_EQ(accum_col_in_group(2 * t), 4 * t);
        EXPECT_EQ(accum_col_in_group(2 * t + 1), 4 * t + 1);
        EXPECT_EQ(accum_col_in_group(8 + 2 * t), 4 * t + 2);
        EXPECT_EQ(accum_col_in_group(9 + 2 * t), 4 * t + 3);
    }
}

}  // namespace
}  // namespace flashattn::kernels
