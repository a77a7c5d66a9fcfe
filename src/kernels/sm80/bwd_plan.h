// How the backward uses its workspace: the fp32 dQ accumulator (one copy per split in deterministic mode) and,
// when the caller did not ask for softmax_d, the D = rowsum(dO * O) buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"
#include "common/mask.h"
#include "common/params.h"

namespace flashattn::kernels {

// The smallest key tile of any backward shape (bwd_launch.cuh): bounds the useful number of splits.
constexpr int kBwdMinBlockN = 64;

struct BwdPlan {
    int n_splits = 1;          // copies of the dQ accumulator
    int64_t split_stride = 0;  // floats between copies
    float* dq_accum = nullptr;
    float* softmax_d = nullptr;
    size_t workspace_bytes = 0;
};

// Rows of q: batch * seqlen_q, or total_q for varlen.
FLASHATTN_HD int64_t q_rows(const AttnParams& p) { return p.is_varlen ? p.total_q : int64_t(p.batch) * p.seqlen_q; }

// The dQ accumulator's (row, head, dim) layout holds each sequence's query rows (of nheads x head-dim bucket floats
// each) followed by kDqAccumPadRows rows that no pass reads. The padding lets the backward kernel add a whole query
// tile without a per-row guard (straight-line reductions the compiler can schedule among the next products): the rows
// of a sequence's last tile past its end land in its own padding, so whatever they hold (zeros for finite K and V:
// their Q and dO rows are zero-filled, LSE +inf, D 0) never reaches another sequence.
constexpr int kDqAccumPadRows = 128;  // at least every backward kBlockM (bwd_launch.cuh checks)
FLASHATTN_HD int64_t accum_rows(const AttnParams& p) { return q_rows(p) + int64_t(p.batch) * kDqAccumPadRows; }

// Within a row, the accumulator holds the head-dim columns permuted in groups of 16: the backward kernel's lane t
// (of 4 in an mma.sync quad) holds columns 2t, 2t + 1 and 8 + 2t, 9 + 2t of a group (its two n8 tiles), and adds them as
// the four consecutive floats 4t ... 4t + 3. Column w of a group sits at position accum_col_in_group(w).
constexpr int kDqAccumColGroup = 16;
FLASHATTN_HD constexpr int accum_col_in_group(int w) { return 4 * (w % 8 / 2) + w % 2 + 2 * (w / 8); }

// The accumulator row of sequence b's first query row, q_row0 (cu_seqlens_q[b] for varlen, else unused).
FLASHATTN_HD int64_t accum_row0(const AttnParams& p, int64_t b, int64_t q_row0) {
    return p.is_varlen ? q_row0 + b * kDqAccumPadRows : b * (int64_t(p.seqlen_q) + kDqAccumPadRows);
}

// The query tiles (m-blocks of block_m rows) that the backward visits for key tile [n0, n0 + block_n) of a sequence:
// [begin, end), none when no row sees a key of it. An empty row range can start anywhere, past seqlen_q too (key tiles
// past seqused_k, with a causal or right window), and rounding it up to whole blocks would visit a block of rows
// beyond the sequence and its padding.
struct QueryBlocks {
    int begin = 0, end = 0;
};
FLASHATTN_HD QueryBlocks query_blocks_for_keys(int64_t n0, int block_n, int block_m, int64_t seqlen_q, int64_t seqlen_k,
                                               int32_t window_left, int32_t window_right) {
    const KeyRange rows = rows_seeing_keys(n0, n0 + block_n, seqlen_q, seqlen_k, window_left, window_right);
    if (rows.end <= rows.begin) return {};
    return {static_cast<int>(rows.begin / block_m), static_cast<int>((rows.end + block_m - 1) / block_m)};
}

// The accumulator row of query row r (0 <= r < q_rows(p); varlen rows absolute): r plus the padding of the sequences
// before its own, found by a binary search of cu_seqlens_q for varlen (the last b with cu_seqlens_q[b] <= r, which
// skips empty sequences).
FLASHATTN_HD int64_t accum_row_of(const AttnParams& p, int64_t r) {
    int64_t b;
    if (p.is_varlen) {
        int lo = 0, hi = p.batch;  // cu_seqlens_q[lo] <= r < cu_seqlens_q[hi]
        while (hi - lo > 1) {
            const int mid = (lo + hi) / 2;
            if (p.cu_seqlens_q[mid] <= r)
                lo = mid;
            else
                hi = mid;
        }
        b = lo;
    } else {
        b = r / p.seqlen_q;
    }
    return r + b * kDqAccumPadRows;
}

// The plan for p on a device with `sm_count` multiprocessors; pointers are set when p.workspace is.
BwdPlan make_bwd_plan(const AttnParams& p, int sm_count);

}  // namespace flashattn::kernels
