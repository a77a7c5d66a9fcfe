// Which keys a query row may see: the one definition of causal, sliding-window and length masks, and of the ALiBi
// bias, for the CPU reference and every kernel.
//
// Coordinates are within one sequence: row i in [0, seqlen_q), key column j in [0, seqlen_k). The diagonal is
// aligned to the bottom-right corner (FlashAttention >= 2.1): row i "sits at" key position i + seqlen_k - seqlen_q.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace flashattn {

// Keys [begin, end) visible to row i. Empty (begin >= end) when the row sees nothing.
struct KeyRange {
    int64_t begin, end;
};

FLASHATTN_HD KeyRange visible_keys(int64_t row, int64_t seqlen_q, int64_t seqlen_k, int32_t window_left,
                                   int32_t window_right) {
    const int64_t diag = row + seqlen_k - seqlen_q;
    int64_t begin = 0, end = seqlen_k;
    if (window_left >= 0 && diag - window_left > begin) begin = diag - window_left;
    if (window_right >= 0 && diag + window_right + 1 < end) end = diag + window_right + 1;
    if (end < begin) end = begin;
    return KeyRange{begin, end};
}

// Query rows [begin, end) that see at least one key of [col_begin, col_end) (the backward walks these rows for
// one key tile). Visible ranges only move right as the row grows, so the rows form one interval.
FLASHATTN_HD KeyRange rows_seeing_keys(int64_t col_begin, int64_t col_end, int64_t seqlen_q, int64_t seqlen_k,
                                       int32_t window_left, int32_t window_right) {
    const int64_t shift = seqlen_k - seqlen_q;  // row i sits at key position i + shift
    int64_t begin = 0, end = seqlen_q;
    // visible end of row i is i + shift + window_right + 1 > col_begin
    if (window_right >= 0 && col_begin - shift - window_right > begin) begin = col_begin - shift - window_right;
    // visible begin of row i is i + shift - window_left < col_end
    if (window_left >= 0 && col_end - shift + window_left < end) end = col_end - shift + window_left;
    if (col_begin >= seqlen_k || col_end <= col_begin || end < begin) end = begin;
    return KeyRange{begin, end};
}

// ALiBi bias added to the (scaled, soft-capped) score of (row, col): -slope * |row + seqlen_k - seqlen_q - col|.
FLASHATTN_HD float alibi_bias(float slope, int64_t row, int64_t col, int64_t seqlen_q, int64_t seqlen_k) {
    const int64_t dist = row + seqlen_k - seqlen_q - col;
    return -slope * static_cast<float>(dist < 0 ? -dist : dist);
}
// The same from the distance row + seqlen_k - seqlen_q - col itself, in 32 bits where the caller knows it fits.
FLASHATTN_HD float alibi_bias_at(float slope, int dist) { return -slope * static_cast<float>(dist < 0 ? -dist : dist); }
// The same from the distance as a float (exact while its magnitude is below 2^24), for callers that derive each
// score's distance from a tile's by a float subtraction.
FLASHATTN_HD float alibi_bias_at(float slope, float dist) { return -slope * fabsf(dist); }

}  // namespace flashattn
