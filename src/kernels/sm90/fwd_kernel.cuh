// The Hopper forward kernel, first version (sm_90a: TMA, mbarriers, wgmma).
//
// One thread block is kWarpgroups warpgroups (4 warps, 128 threads each), each computing 64 query rows of one
// (sequence, head) against the same K and V tiles:
//   the copy engine (TMA) brings the Q tile once and K and V tiles of 64 keys through a two-stage ring, each tile
//   completing on its own mbarrier, in the 128-byte swizzle wgmma reads (head dims split in 64-column boxes);
//   S = Q K^T is one chain of wgmma (A and B from shared memory), 32 fp32 accumulators a thread in the mma.sync C
//   layout, so the masks and the online softmax are the Ampere kernel's (sm80/warp_tiles.cuh) unchanged;
//   O += P V takes P from those registers (wgmma's register A operand) and V from shared memory as an N-major B.
// Thread 0 issues the copies; a stage is refilled after the block's barrier at the end of the tile that used it.
// fwd_specialised_kernel.cuh, the default above head dim 64 and for long rows at 64, adds a producer warpgroup and
// two (three at head dim 64) consumer warpgroups that overlap each tile's softmax with the previous tile's P V
// product. Features: causal and window
// masks, softcap, ALiBi, GQA, varlen, any lengths; the dispatch sends dropout and attention probabilities to the
// Ampere kernel.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>

#include "common/mask.h"
#include "common/numeric.h"
#include "common/params.h"
#include "kernels/common/ptx_sm90.cuh"
#include "kernels/common/seq_slice.cuh"
#include "kernels/common/wgmma_ops.cuh"
#include "kernels/sm80/warp_tiles.cuh"
#include "kernels/sm90/timeline.cuh"

namespace flashattn::kernels {

constexpr int kSm90SmemAlign = 1024;  // the 128-byte swizzle repeats every 8 rows: tiles start on 1 KB boundaries

// The schedules a block can run (fwd_launch.cu picks one):
//   serial:      every warpgroup waits for each product at once; thread 0 issues the copies
//   specialised: a producer warpgroup issues the copies, consumer warpgroups compute with S(j) in flight beside
//                P(j-1) V(j-1), and stages go back to the producer on "empty" mbarriers instead of block barriers
enum class Sm90Schedule { serial, specialised };

template <typename Elem_, int kHeadDim_, int kWarpgroups_, Sm90Schedule kSchedule_ = Sm90Schedule::serial,
          int kBlockN_ = 64, int kHeadDimV_ = kHeadDim_>
struct Sm90FwdTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;    // of q and k
    static constexpr int kHeadDimV = kHeadDimV_;  // of v and the output
    static constexpr int kWarpgroups = kWarpgroups_;  // the warpgroups that compute (consumers)
    static constexpr Sm90Schedule kSchedule = kSchedule_;
    static constexpr bool kProducer = kSchedule == Sm90Schedule::specialised;
    static constexpr int kRowsPerWarpgroup = 64;  // wgmma's M
    static constexpr int kBlockM = kRowsPerWarpgroup * kWarpgroups;
    static constexpr int kBlockN = kBlockN_;  // keys per tile: S is m64 x kBlockN, kBlockN / 2 accumulators a thread
    static constexpr int kThreads = 128 * (kWarpgroups + (kProducer ? 1 : 0));
    // Stages of the K and V rings. With a producer, the empty barriers hand each stage back as soon as it is read.
    static constexpr int kKStages = 2;
    static constexpr int kVStages = 2;
    static constexpr int kBoxCols = 64;  // 16-bit columns in one 128-byte swizzled row
    static constexpr int kBoxes = kHeadDim / kBoxCols;    // of a Q or K tile
    static constexpr int kBoxesV = kHeadDimV / kBoxCols;  // of a V tile
    static constexpr int kQBoxElems = kBlockM * kBoxCols;
    static constexpr int kKvBoxElems = kBlockN * kBoxCols;
    static constexpr uint32_t kQTileBytes = kBoxes * kQBoxElems * 2;
    static constexpr uint32_t kKTileBytes = kBoxes * kKvBoxElems * 2;
    static constexpr uint32_t kVTileBytes = kBoxesV * kKvBoxElems * 2;
    static constexpr int kKStepsPerBox = kBoxCols / 16;
    static constexpr int kRowBytes = kBoxCols * 2;
    // The per-warp view warp_tiles.cuh works on: one m16 tile of rows, n8 tiles of S and of O.
    static constexpr int kMTiles = 1;
    static constexpr int kNTiles = kBlockN / 8;
    static constexpr int kDTiles = kHeadDimV / 8;
    static constexpr int kQkSteps = kHeadDim / 16;
    static constexpr int kPvSteps = kBlockN / 16;
    // Registers a thread may hold after the producer warpgroup hands its own to the consumers (setmaxnreg). The pool
    // is what the block was launched with: __launch_bounds__(kThreads, 1) caps every thread at the register file
    // over the block's threads (168 for three warpgroups); a consumer's setmaxnreg.inc waits until the producer's
    // .dec has freed enough, so the budgets must fit that pool exactly or the block hangs.
    // Two consumer warpgroups: 240 each (the 168 a thread of three warpgroups launches with, moved from the
    // producer); three: 160 (128 at launch with four warpgroups).
    static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = kWarpgroups >= 3 ? 160 : 240;
    static_assert(kHeadDim % kBoxCols == 0 && kHeadDimV % kBoxCols == 0, "whole 64-column boxes");
    static_assert(kHeadDimV <= kHeadDim, "the output is staged in the Q tile");
    static_assert(kBlockN % 16 == 0, "whole k16 steps of the P V product (wgmma_ops.cuh has S's widths)");
    static_assert(kBlockM <= 256 && kBlockN <= 256, "one copy-engine box holds a tile's rows");
    static_assert(kWarpgroups <= 3, "named barriers are laid out for three consumer warpgroups at most");
    static_assert(!kProducer || kProducerRegs + kWarpgroups * kConsumerRegs <= (kWarpgroups + 1) * kLaunchRegs,
                  "the producer's and consumers' budgets fit the registers the block was launched with");
};

// A work tile's place without the thread's own coordinates (Sm90Place's tile half). The persistent kernel's producer
// works it out ahead of the consumers and leaves it in the slot of the tile's Q buffer; the consumers read it there
// rather than working it out again between two work tiles, where its chain of scalar arithmetic (integer divisions,
// the key range in 64 bits: ~235 instructions) stood between one tile's output and the next tile's first product.
struct alignas(16) Sm90TileInfo {
    int b, h, hk, m0, rows;
    int seqlen_q, seqlen_k;  // this sequence's (varlen: from cu_seqlens and seqused_k)
    int q_row0, k_row0;      // its first rows in q/out and k/v (varlen; 0 otherwise)
    int map_batch;           // the batch coordinate of the tensor maps (varlen: 0, the maps span the packed rows)
    // Keys every row of the block sees: [last row's begin, first row's end). A tile inside needs no mask.
    int all_see_begin, all_see_end;
    int n_tile_begin, n_tile_end;
    float alibi_slope;  // 0 without ALiBi
    int unused;

    // Into dst, a field at a time (the stores are ordered, so each field's register frees once it is stored: the
    // producer thread has kProducerRegs registers, and a whole Sm90TileInfo held at once spilled).
    __device__ __forceinline__ void publish(Sm90TileInfo* dst) const {
        const uint32_t a = ptx::smem_addr(dst);
        const int fields[] = {b,        h,         hk,           m0,          rows,         seqlen_q,  seqlen_k,
                              q_row0,   k_row0,    map_batch,    all_see_begin, all_see_end, n_tile_begin, n_tile_end,
                              __float_as_int(alibi_slope)};
        static_assert(sizeof(fields) == sizeof(Sm90TileInfo) - sizeof(unused), "every field but the padding");
#pragma unroll
        for (int i = 0; i < int(sizeof(fields) / sizeof(int)); ++i)
            ptx::st_shared_32(a + 4 * i, static_cast<uint32_t>(fields[i]));
    }
};

// kQBuffers: Q tiles. The persistent kernel keeps two, so that the next work tile's Q arrives while the current one
// computes and its output, staged in the current Q tile, is stored by the copy engine.
template <class T, int kQBuffers = 1>
struct Sm90FwdSmem {
    using Elem = typename T::Elem;
    alignas(kSm90SmemAlign) Elem q[kQBuffers][T::kBoxes][T::kQBoxElems];
    alignas(kSm90SmemAlign) Elem k[T::kKStages][T::kBoxes][T::kKvBoxElems];
    alignas(kSm90SmemAlign) Elem v[T::kVStages][T::kBoxesV][T::kKvBoxElems];
    uint64_t q_full[kQBuffers];
    uint64_t k_full[T::kKStages];
    uint64_t v_full[T::kVStages];
    uint64_t k_empty[T::kKStages];  // with a producer: the consumers' warps have finished reading the stage
    uint64_t v_empty[T::kVStages];
    uint64_t q_empty[kQBuffers];  // with a producer: the consumers are done with the Q tile and the output staged in it
    Sm90TileInfo tile_info[kQBuffers];  // the persistent kernel: each Q tile's work tile, from the producer
    uint64_t info_full[kQBuffers];      // ... written (one arrival, the producer's)
    uint64_t pin;  // nobody waits on it: an arrival that orders a consumer's instructions (speculative softmax)
};

template <class T, int kQBuffers = 1>
constexpr int sm90_fwd_smem_bytes() {
    return static_cast<int>(sizeof(Sm90FwdSmem<T, kQBuffers>)) + kSm90SmemAlign;  // room to align the dynamic base
}

// ----- the steps both kernels are made of -------------------------------------------------------------------------

// This thread's place: its block's query rows and the key tiles they can see; its warp's rows and fragment slot.
template <class T>
struct Sm90Place : Sm90TileInfo {
    int wg;         // this thread's (consumer) warpgroup
    int warp_row0;  // first row of this thread's warp in the block (64 per warpgroup, 16 per warp)
    int group, tig;  // mma fragment coordinates
    uint32_t q_rows_offset;  // bytes from a Q box to this warpgroup's rows

    // tid: the thread's index among the block's computing (consumer) threads. The work tile from the block's
    // coordinates (a grid of (row blocks, batch, heads)); causal blocks further down see more keys, so the heaviest
    // start first (as in the Ampere forward).
    __device__ __forceinline__ Sm90Place(const AttnParams& p, int tid)
        : Sm90Place(p, tid,
                    p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x),
                    static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)) {}

    __device__ __forceinline__ Sm90Place(const AttnParams& p, int tid, int m_block, int b_, int h_) {
        b = b_, h = h_;
        hk = h / (p.nheads / p.nheads_k);
        const SeqSlice seq = seq_slice(p, b);
        seqlen_q = seq.seqlen_q, seqlen_k = seq.seqlen_k;
        q_row0 = static_cast<int>(seq.q_row0), k_row0 = static_cast<int>(seq.k_row0);
        map_batch = p.is_varlen ? 0 : b;
        alibi_slope = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
        set_thread(tid);
        m0 = m_block * T::kBlockM;
        rows = min(T::kBlockM, seqlen_q - m0);  // <= 0: a varlen block past its sequence, nothing to do
        const KeyRange first = visible_keys(m0, seqlen_q, seqlen_k, p.window_left, p.window_right);
        const KeyRange last = visible_keys(m0 + rows - 1, seqlen_q, seqlen_k, p.window_left, p.window_right);
        all_see_begin = static_cast<int>(last.begin);
        all_see_end = static_cast<int>(first.end);
        n_tile_begin = static_cast<int>(first.begin / T::kBlockN);
        n_tile_end = last.end > first.begin ? static_cast<int>((last.end + T::kBlockN - 1) / T::kBlockN)
                                            : n_tile_begin;
    }

    // From a place the producer worked out (the persistent kernel).
    __device__ __forceinline__ Sm90Place(const Sm90TileInfo& t, int tid) : Sm90TileInfo(t) { set_thread(tid); }

  private:
    __device__ __forceinline__ void set_thread(int tid) {
        const int lane = tid % 32;
        group = lane / 4, tig = lane % 4;
        wg = tid / 128;
        warp_row0 = (tid / 32) * 16;
        q_rows_offset = (tid / 128) * T::kRowsPerWarpgroup * T::kRowBytes;
    }
};

// Work tile t of a block that loops over tiles (the specialised kernel): (row block, batch, head). Causal: the
// heaviest row blocks of every (batch, head) first, then the next lighter, so that the last tiles handed out are the
// shortest. Otherwise the row blocks of one (batch, head) are consecutive: blocks working at the same time share
// their K and V in L2.
struct Sm90Tile {
    int m_block, b, h;
};
__device__ __forceinline__ Sm90Tile sm90_tile(const AttnParams& p, int t, int m_blocks) {
    const int bh = t / m_blocks, m = t % m_blocks;
    return {p.causal ? m_blocks - 1 - m : m, bh / p.nheads, bh % p.nheads};
}
// The j-th work tile of this block, where blocks loop over the tiles (the persistent kernel; a grid of one block a tile
// takes tile blockIdx.x at j = 0 and stops): rounds of gridDim.x tiles, taken forwards and backwards in turn (block
// b: b, 2G - 1 - b, 2G + b, ...), so that a block that had one of the heaviest causal row blocks of a round gets one
// of the lightest of the next. Plain strides gave a block the same row block of every (batch, head) whenever the grid
// was a multiple of their count (132 SMs, 4 row blocks at seqlen 512): causal 512 at 0.82x the one-tile kernel.
// Either way a round covers the same tiles, so the blocks running together still share their K and V in L2.
__device__ __forceinline__ int64_t block_work_tile(int j) {
    const int64_t g = gridDim.x, b = blockIdx.x;
    return j % 2 == 0 ? j * g + b : (j + 1) * g - 1 - b;
}
// f(t) for each of this block's work tiles t < total, in block_work_tile's order: the producer and the consumers walk
// the same sequence.
template <class F>
__device__ __forceinline__ void for_each_block_work_tile(int64_t total, F&& f) {
    for (int j = 0; int64_t(j) * gridDim.x < total; ++j)
        if (const int64_t t = block_work_tile(j); t < total) f(static_cast<int>(t));
}

// Scores the softmax sees, where the forward transforms them (softcap, ALiBi): then exp2 takes log2(e), not the
// scale, as its multiplier (score_exp2_mult) and the scale is applied here.
__device__ __forceinline__ bool scores_transformed(const AttnParams& p) {
    return p.softcap > 0.f || p.alibi_slopes != nullptr;
}
__device__ __forceinline__ float score_exp2_mult(const AttnParams& p) {
    return scores_transformed(p) ? kLog2e : p.scale_log2;
}
template <class T>
__device__ __forceinline__ void transform_scores(float (&acc_s)[T::kMTiles][T::kNTiles][4], const AttnParams& p,
                                                 const Sm90Place<T>& at, int n0) {
    const float softcap_in = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
    // ALiBi: the distance row + seqlen_k - seqlen_q - col of this thread's first key in the tile from each of its two
    // rows' diagonals, once a tile, in 32 bits (a sequence's length fits) and then as a float (exact below 2^24);
    // each score's distance is that less its column's constant offset, and its bias (alibi_bias_at) one FFMA
    // (alibi_bias of common/mask.h per score, in 64-bit integers, ran ALiBi forwards at a fifth of the plain speed).
    float dist0[2];
#pragma unroll
    for (int half = 0; half < 2; ++half)
        dist0[half] = static_cast<float>(at.m0 + at.warp_row0 + at.group + 8 * half + at.seqlen_k - at.seqlen_q - n0 -
                                         2 * at.tig);
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float s = acc_s[0][nt][i];
            s = p.softcap > 0.f ? p.softcap * ptx::tanh_fast(s * softcap_in) : s * p.scale;
            if (p.alibi_slopes) s += alibi_bias_at(at.alibi_slope, dist0[i / 2] - static_cast<float>(nt * 8 + i % 2));
            acc_s[0][nt][i] = s;
        }
}

// The specialised kernel's softmax after a work tile's first key tile: speculative. Each row's exponentials are
// taken against its running maximum m as it stands, P = exp2(S * exp2_mult - m), before this tile's maximum is known:
// no reduction along the row and no shuffles stand between the S product and the first exponential, and O is not
// rescaled. That is exact wherever m stays a valid reference, i.e. no score of the tile exceeds it by more than
// kSpeculativeLog2 (base-2 exponent units): P <= 2^kSpeculativeLog2 then, no concern in the fp32 sums and O nor in P's
// float16/bfloat16 range, and the result is that of an online softmax that keeps its stale maximum (lazy rescaling).
// Where a row's maximum grew further, some P of that row exceeds 2^kSpeculativeLog2, and so does the sum of this
// thread's part of the row: the caller tests the sums (speculation_failed), and where any row of the warpgroup
// failed it computes the step again from S with the exact online softmax (softmax_scores, O rescaled). A row whose
// maximum is still -inf (no visible key yet) gets inf or NaN, which fails the test too. With scores of a fixed
// distribution a row's maximum settles within its first key tiles, so the computation again is rare; a sequence of
// rising scores takes it at every step (GPU tests "key_ramp").
// Half `half` of this thread's rows: P in place, and returns the sum of its P.
constexpr int kSpeculativeLog2 = 8;
constexpr float kSpeculativeSumLimit = 1 << kSpeculativeLog2;
template <class T>
__device__ __forceinline__ float row_exp2_sum_speculative(float (&acc_s)[T::kMTiles][T::kNTiles][4],
                                                          const float (&row_max)[T::kMTiles][2], int half,
                                                          float exp2_mult) {
    static_assert(T::kMTiles == 1, "one m16 tile of rows a warp");
    return row_exp2_sum<T>(acc_s, 0, half, exp2_mult, row_max[0][half] * exp2_mult);
}
__device__ __forceinline__ bool speculation_failed(float sum0, float sum1) {
    return !(sum0 <= kSpeculativeSumLimit) || !(sum1 <= kSpeculativeSumLimit);  // NaN fails
}

// Thread 0 only: copy the 64-column boxes of one tile (rows [row, row + box rows) of head `head` of sequence b)
// into `boxes`, completing on `bar`.
template <class T, int kBoxes, typename Elem>
__device__ __forceinline__ void load_tile(Elem* boxes, int box_elems, const CUtensorMap* map, uint64_t* bar,
                                          uint32_t bytes, int row, int head, int b) {
    ptx::mbarrier_arrive_expect_tx(bar, bytes);
    for (int box = 0; box < kBoxes; ++box)
        ptx::tma_load_4d(boxes + box * box_elems, map, bar, box * T::kBoxCols, row, head, b);
}

// Thread 0 only: a Q tile into buffer qb; K or V key tile `row` (its first row in the tensor maps) into stage st.
template <class T, class Smem>
__device__ __forceinline__ void load_q_at(Smem& s, const CUtensorMap* map, int row, int head, int batch, int qb = 0) {
    load_tile<T, T::kBoxes>(s.q[qb][0], T::kQBoxElems, map, &s.q_full[qb], T::kQTileBytes, row, head, batch);
}
template <class T, class Smem>
__device__ __forceinline__ void load_q(Smem& s, const CUtensorMap* map, const Sm90Place<T>& at, int qb = 0) {
    load_q_at<T>(s, map, at.q_row0 + at.m0, at.h, at.map_batch, qb);
}
template <class T, class Smem>
__device__ __forceinline__ void load_k_at(Smem& s, int st, const CUtensorMap* map, int row, int head_k,
                                          int batch) {
    load_tile<T, T::kBoxes>(s.k[st][0], T::kKvBoxElems, map, &s.k_full[st], T::kKTileBytes, row, head_k, batch);
}
template <class T, class Smem>
__device__ __forceinline__ void load_v_at(Smem& s, int st, const CUtensorMap* map, int row, int head_k,
                                          int batch) {
    load_tile<T, T::kBoxesV>(s.v[st][0], T::kKvBoxElems, map, &s.v_full[st], T::kVTileBytes, row, head_k, batch);
}
template <class T, class Smem>
__device__ __forceinline__ void load_k(Smem& s, int st, const CUtensorMap* map, int row,
                                       const Sm90Place<T>& at) {
    load_k_at<T>(s, st, map, row, at.hk, at.map_batch);
}
template <class T, class Smem>
__device__ __forceinline__ void load_v(Smem& s, int st, const CUtensorMap* map, int row,
                                       const Sm90Place<T>& at) {
    load_v_at<T>(s, st, map, row, at.hk, at.map_batch);
}

// Whether a work tile's first key tile is key tile 0 of its (batch, kv head) and it has one, decided from the
// parameters and the tile's first row alone (no sequence slice): true without varlen, seqused_k and a left window,
// where a row sees keys from 0 on, when the tile's last row sees key 0 (visible_keys with window_left < 0).
template <class T>
__device__ __forceinline__ bool first_key_tile_is_zero(const AttnParams& p, int m0) {
    if (p.is_varlen || p.seqused_k != nullptr || p.window_left >= 0 || p.seqlen_k <= 0) return false;
    const int64_t last_row = min(m0 + T::kBlockM, p.seqlen_q) - 1;
    return p.window_right < 0 || last_row + p.seqlen_k - p.seqlen_q + p.window_right + 1 > 0;
}

// Varlen: the rows of the last key tile past the sequence's keys are the next sequence's (or rows seqused_k leaves
// unused, possibly never written): the copy engine zero-fills only past the packed tensor. The masks make their P
// exactly 0, but 0 x NaN is NaN, so their V rows are zeroed before the P V product reads them (as the Ampere-class
// kernel's loads zero-fill them). K needs nothing: the masks overwrite those scores.
template <class T>
__device__ __forceinline__ bool v_tail_needs_zeros(const AttnParams& p, const Sm90Place<T>& at) {
    return p.is_varlen && at.n_tile_end > at.n_tile_begin && at.n_tile_end * T::kBlockN > at.seqlen_k;
}
// Threads [0, threads) zero rows [seqlen_k - tile start, kBlockN) of the V tile in `v_stage` (each row of a box is
// 128 contiguous bytes, its chunks only permuted by the swizzle) and fence for wgmma's reads; the caller's barrier
// then hands the tile over.
template <class T>
__device__ __forceinline__ void zero_v_tail(typename T::Elem* v_stage, const Sm90Place<T>& at, int thread,
                                            int threads) {
    constexpr int kChunksPerBoxRow = T::kRowBytes / 16;
    const int first_row = at.seqlen_k - (at.n_tile_end - 1) * T::kBlockN;
    const int chunks_per_box = (T::kBlockN - first_row) * kChunksPerBoxRow;
    const uint32_t base = ptx::smem_addr(v_stage);
    for (int i = thread; i < T::kBoxesV * chunks_per_box; i += threads) {
        const int bx = i / chunks_per_box, rest = i % chunks_per_box;
        ptx::st_shared_16(base + (bx * T::kBlockN + first_row) * T::kRowBytes + rest * 16, make_uint4(0, 0, 0, 0));
    }
    ptx::fence_proxy_async_shared();
}

// Issue S = Q K^T for this warpgroup (one wgmma group, not waited for). q_desc: the descriptor of this warpgroup's
// rows of the Q tile (smem_desc_sw128), each k16 step's reached by smem_desc_advance. K's 64-column boxes lie
// k_box_bytes apart (another layout of K's tile, the kv-cache kernel's folded pieces (KvcPlan::k_fold), passes
// its own with a descriptor of its 8-row groups' stride).
template <class T>
__device__ __forceinline__ void issue_qk_desc(float (&acc_s)[T::kMTiles][T::kNTiles][4], uint64_t q_desc,
                                              uint64_t k_desc, uint32_t k_box_bytes = T::kBlockN * T::kRowBytes) {
    auto& s_flat = reinterpret_cast<float(&)[T::kNTiles * 4]>(acc_s[0][0][0]);
    ptx::fence_registers(s_flat);
    ptx::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < T::kQkSteps; ++ks) {
        const int box = ks / T::kKStepsPerBox;
        const uint32_t step = (ks % T::kKStepsPerBox) * 16 * 2;  // 16 columns further along the swizzled rows
        const uint64_t desc_q = ptx::smem_desc_advance(q_desc, box * T::kBlockM * T::kRowBytes + step);
        const uint64_t desc_k = ptx::smem_desc_advance(k_desc, box * k_box_bytes + step);
        ptx::wgmma_ss_m64k16<T::kBlockN>(s_flat, desc_q, desc_k, ks > 0 ? 1 : 0, typename T::Elem());
    }
    ptx::wgmma_commit();
}
// The same from the Q rows' and the K tile's shared-memory addresses; K's 8-row groups k_group_bytes apart.
template <class T>
__device__ __forceinline__ void issue_qk(float (&acc_s)[T::kMTiles][T::kNTiles][4], uint32_t q_smem,
                                         uint32_t k_smem, uint32_t k_group_bytes = ptx::kSwizzleRowGroupBytes,
                                         uint32_t k_box_bytes = T::kBlockN * T::kRowBytes) {
    // Opaque here: otherwise the compiler keeps every step's descriptor live across the main loop.
    ptx::opaque(q_smem);
    issue_qk_desc<T>(acc_s, ptx::smem_desc_sw128(q_smem), ptx::smem_desc_sw128_groups(k_smem, k_group_bytes),
                     k_box_bytes);
}

// P as wgmma's register A operand: the C layout of two n8 tiles is the A layout of one k16 step.
template <class T>
__device__ __forceinline__ void pack_p(uint32_t (&a_frag)[T::kPvSteps][4],
                                       const float (&acc_s)[T::kMTiles][T::kNTiles][4]) {
    using Elem = typename T::Elem;
#pragma unroll
    for (int ps = 0; ps < T::kPvSteps; ++ps) {
        a_frag[ps][0] = ptx::pack2(acc_s[0][2 * ps][0], acc_s[0][2 * ps][1], Elem());
        a_frag[ps][1] = ptx::pack2(acc_s[0][2 * ps][2], acc_s[0][2 * ps][3], Elem());
        a_frag[ps][2] = ptx::pack2(acc_s[0][2 * ps + 1][0], acc_s[0][2 * ps + 1][1], Elem());
        a_frag[ps][3] = ptx::pack2(acc_s[0][2 * ps + 1][2], acc_s[0][2 * ps + 1][3], Elem());
    }
}

// Issue O += P V (one wgmma group, not waited for). V's rows are keys: a k16 step is 16 swizzled rows further on.
// One product a k16 step spans every 64-column box of V (N = head dim v; the boxes, kBlockN rows of 128 bytes each,
// are the N-major layout's leading byte offset apart): P's registers are read once a step, not once a box. Another
// layout of V's tile (the kv-cache kernel's folded pieces, KvcPlan::v_fold_rows) passes its boxes' distance
// `box_bytes` and a k16 step's `step_bytes`.
template <class T>
__device__ __forceinline__ void issue_pv(float (&acc_o)[T::kMTiles][T::kDTiles][4],
                                         const uint32_t (&a_frag)[T::kPvSteps][4], uint32_t v_smem,
                                         uint32_t box_bytes = T::kBlockN * T::kRowBytes,
                                         uint32_t step_bytes = 16 * T::kRowBytes) {
    auto& o_flat = reinterpret_cast<float(&)[T::kDTiles * 4]>(acc_o[0][0][0]);
    ptx::fence_registers(o_flat);
    ptx::wgmma_fence();
    ptx::opaque(v_smem);
    const uint64_t v_desc = ptx::smem_desc_sw128_n_major(v_smem, box_bytes);
#pragma unroll
    for (int ps = 0; ps < T::kPvSteps; ++ps) {
        const uint64_t desc_v = ptx::smem_desc_advance(v_desc, ps * step_bytes);
        ptx::wgmma_rs_m64k16<T::kHeadDimV, 1>(o_flat, a_frag[ps], desc_v, 1, typename T::Elem());
    }
    ptx::wgmma_commit();
}

// Masks, only on tiles that cross a mask edge: element i of acc_s[0][nt] is row m0 + warp_row0 + group + 8*(i/2),
// key n0 + nt*8 + 2*tig + i%2.
template <class T>
__device__ __forceinline__ void mask_tile(float (&acc_s)[T::kMTiles][T::kNTiles][4], const AttnParams& p,
                                          const Sm90Place<T>& at, int n0) {
    if (at.all_see_begin <= n0 && at.all_see_end >= n0 + T::kBlockN) return;  // every row sees every key of the tile
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = at.m0 + at.warp_row0 + at.group + 8 * half;
        const KeyRange r = visible_keys(row, at.seqlen_q, at.seqlen_k, p.window_left, p.window_right);
        // In this tile's coordinates (32-bit: a sequence's length fits).
        const int begin = static_cast<int>(r.begin) - n0 - 2 * at.tig, end = static_cast<int>(r.end) - n0 - 2 * at.tig;
#pragma unroll
        for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int col = nt * 8 + j;
                if (col < begin || col >= end) acc_s[0][nt][2 * half + j] = -INFINITY;
            }
    }
}

// What the softmax needs of a fresh S tile: the transform (where asked for), then the masks.
template <class T>
__device__ __forceinline__ void prepare_scores(float (&acc_s)[T::kMTiles][T::kNTiles][4], const AttnParams& p,
                                               const Sm90Place<T>& at, int n0) {
    if (scores_transformed(p)) transform_scores<T>(acc_s, p, at, n0);
    mask_tile<T>(acc_s, p, at, n0);
}

// Normalise and write O and the LSE. kStaged (and an output whose rows are 16-byte aligned): O goes through shared
// memory, into this warpgroup's own rows of the Q tile (dead once its last S product has completed), so that global
// memory sees whole 16-byte chunks, a warp writing
// whole 128-byte row segments; each 128-byte row of a box there has its 16-byte chunks XOR-swizzled by the row, so
// that neither the 4-byte writes from the accumulators nor the 16-byte reads meet bank conflicts. An output whose
// rows are not 16-byte aligned is written 4 bytes at a time straight from the accumulators.
// Named barriers: 1-3 the consumer warpgroups' turns (fwd_specialised_kernel.cuh), 4-6 one per consumer warpgroup
// for the epilogue, 7 the V tail's zeroing.
// 8-10 one per consumer warpgroup for the speculative softmax's vote.
constexpr int kTurnBarrier = 1, kEpilogueBarrier = 4, kZeroBarrier = 7, kVoteBarrier = 8, kMaxConsumerWarpgroups = 3;
__device__ __forceinline__ void warpgroup_sync(int wg) {
    ptx::named_barrier_sync_nth<kEpilogueBarrier, kMaxConsumerWarpgroups>(wg, 128);
}
// The thread of each consumer warpgroup (tid: the index among the consumer threads) that issues that warpgroup's
// output box stores and waits for the copy engine to have read them.
__device__ __forceinline__ bool output_store_issuer(int tid) { return tid % 128 == 0; }
// map_o (not null: the persistent kernel, no varlen, an output the copy engine can address): the staged rows go out as
// one box store per 64 columns, issued by the warpgroup's thread `store_issuer` (output_store_issuer) as one bulk
// group, which nobody waits for here: that thread waits for the copy engine's reads (ptx::bulk_wait_group_read_all)
// before the Q tile is reused or the block exits.
template <class T, bool kStaged = true>
__device__ __forceinline__ void store_rows_and_lse(const float (&acc_o)[T::kMTiles][T::kDTiles][4],
                                                   const float (&row_max)[T::kMTiles][2],
                                                   const float (&row_sum)[T::kMTiles][2], const AttnParams& p,
                                                   const Sm90Place<T>& at, typename T::Elem* q_tile,
                                                   const CUtensorMap* map_o, bool store_issuer) {
    using Elem = typename T::Elem;
    Elem* out = static_cast<Elem*>(p.out) + at.b * p.out_batch_stride +
                int64_t(at.q_row0 + at.m0) * p.out_row_stride + at.h * p.out_head_stride;
    float* lse = p.softmax_lse
                     ? p.softmax_lse + at.b * p.lse_batch_stride + at.h * p.lse_head_stride + at.q_row0 + at.m0
                     : nullptr;
    const float max_to_natural = score_exp2_mult(p) * kLn2;
    constexpr int kChunksPerBoxRow = T::kRowBytes / 16;
    const bool wide = kStaged && reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && p.out_row_stride % 8 == 0 &&
                      p.out_head_stride % 8 == 0 && p.out_batch_stride % 8 == 0;
    // Byte address in this warpgroup's rows of the Q tile of (row r of the warpgroup, box bx, chunk c).
    const uint32_t region = ptx::smem_addr(q_tile) + at.wg * T::kRowsPerWarpgroup * T::kRowBytes;
    auto chunk_addr = [&](int r, int bx, int c) {
        return region + bx * T::kBlockM * T::kRowBytes + r * T::kRowBytes + ((c ^ (r % kChunksPerBoxRow)) * 16);
    };
    // The row sum is at least 1 where a row saw a key (its maximum's own term), so the special-function unit's
    // reciprocal and logarithm serve: the rows are rounded to 16 bits, and the LSE's error stays ~1e-7 of its value.
    // The IEEE division and logf were ~100 instructions of the ~410 a thread runs between its last product and the
    // output's store, on the critical path between two work tiles (bench/NOTES_sm90.md v25).
    float inv[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const float sum = ptx::quad_sum(row_sum[0][half]);
        const bool empty = !(sum > 0.f);  // saw no key: output 0, LSE +inf
        inv[half] = empty ? 0.f : __fdividef(1.f, sum);
        const int row = at.warp_row0 + at.group + 8 * half;
        if (lse && at.tig == 0 && row < at.rows)
            lse[row] = empty ? INFINITY : row_max[0][half] * max_to_natural + __logf(sum);
    }
    const bool first_thread = at.warp_row0 == 0 && at.group == 0 && at.tig == 0;  // the timeline's marks
    if (kStaged && first_thread) timeline_mark(kTlLseWritten);
    if constexpr (kStaged) {
        if (wide) {
            warpgroup_sync(at.wg);  // every warp's products are done with Q
            if (first_thread) timeline_mark(kTlEpilogueSynced);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            // Four 8x8 matrices a store (stmatrix: the warp's 16 rows by two n8 tiles), a quarter of the 4-byte
            // stores' instructions; each matrix row is one 16-byte chunk of the swizzled box, so lane l addresses
            // row l % 8 of matrix l / 8 = (rows + 8 * (l / 8 % 2), n8 tile dt + l / 16).
            static_assert(T::kDTiles % 2 == 0, "n8 tiles in pairs");
            const int lane = at.group * 4 + at.tig, mat = lane / 8;
            const int r = at.warp_row0 % T::kRowsPerWarpgroup + 8 * (mat % 2) + lane % 8;
            auto rows_of = [&](int dt, int half) {
                return ptx::pack2(acc_o[0][dt][2 * half] * inv[half], acc_o[0][dt][2 * half + 1] * inv[half], Elem());
            };
#pragma unroll
            for (int dt = 0; dt < T::kDTiles; dt += 2) {
                const int d = dt + mat / 2;
                ptx::stmatrix_x4(chunk_addr(r, d / kChunksPerBoxRow, d % kChunksPerBoxRow), rows_of(dt, 0),
                                 rows_of(dt, 1), rows_of(dt + 1, 0), rows_of(dt + 1, 1));
            }
#else
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = at.warp_row0 % T::kRowsPerWarpgroup + at.group + 8 * half;
#pragma unroll
                for (int dt = 0; dt < T::kDTiles; ++dt)
                    ptx::st_shared_32(chunk_addr(r, dt / kChunksPerBoxRow, dt % kChunksPerBoxRow) + 4 * at.tig,
                                      ptx::pack2(acc_o[0][dt][2 * half] * inv[half],
                                                 acc_o[0][dt][2 * half + 1] * inv[half], Elem()));
            }
#endif
            if (map_o) ptx::fence_proxy_async_shared();  // the copy engine reads what these stores wrote
            warpgroup_sync(at.wg);  // the warpgroup's rows are staged
            if (first_thread) timeline_mark(kTlEpilogueStaged);
            if (map_o) {
                if (store_issuer) {
#pragma unroll
                    for (int bx = 0; bx < T::kBoxesV; ++bx)
                        ptx::tma_store_4d(map_o, region + bx * T::kBlockM * T::kRowBytes, bx * T::kBoxCols,
                                          at.q_row0 + at.m0 + at.wg * T::kRowsPerWarpgroup, at.h, at.map_batch);
                    ptx::bulk_commit_group();
                }
                return;
            }
            constexpr int kChunksPerRow = T::kBoxesV * kChunksPerBoxRow;
            const int wg_tid = (at.warp_row0 % T::kRowsPerWarpgroup) * 2 + at.group * 4 + at.tig;  // 0..127
            const int wg_row0 = at.wg * T::kRowsPerWarpgroup;
#pragma unroll
            for (int i = 0; i < T::kRowsPerWarpgroup * kChunksPerRow / 128; ++i) {
                const int q = wg_tid + i * 128;
                const int r = q / kChunksPerRow, bx = (q % kChunksPerRow) / kChunksPerBoxRow;
                const int c = q % kChunksPerBoxRow;
                const int col = bx * T::kBoxCols + c * 8;
                if (wg_row0 + r < at.rows && col < p.head_dim_v)
                    ptx::st_global_16(out + int64_t(wg_row0 + r) * p.out_row_stride + col,
                                      ptx::ld_shared_16(chunk_addr(r, bx, c)));
            }
            return;
        }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = at.warp_row0 + at.group + 8 * half;
        if (row >= at.rows) continue;
#pragma unroll
        for (int dt = 0; dt < T::kDTiles; ++dt) {
            const int col = dt * 8 + 2 * at.tig;
            if (col < p.head_dim_v)
                *reinterpret_cast<uint32_t*>(out + int64_t(row) * p.out_row_stride + col) =
                    ptx::pack2(acc_o[0][dt][2 * half] * inv[half], acc_o[0][dt][2 * half + 1] * inv[half], Elem());
        }
    }
}

// The mbarriers, initialised by thread 0 and published to the block. A stage is empty once every consumer warp has
// arrived (one arrival a warp, after its wgmma wait).
// q_empty_arrivals: one a consumer warp, or (the persistent kernel, whose Q tiles go back once their staged output
// has been read by the copy engine) one a consumer warpgroup.
template <class T, int kQBuffers>
__device__ __forceinline__ void init_barriers(Sm90FwdSmem<T, kQBuffers>& s,
                                              uint32_t q_empty_arrivals = T::kWarpgroups * 4) {
    if (threadIdx.x == 0) {
        constexpr uint32_t kConsumerWarps = T::kWarpgroups * 4;
        for (int qb = 0; qb < kQBuffers; ++qb) ptx::mbarrier_init(&s.q_full[qb], 1);
        for (int st = 0; st < T::kKStages; ++st) ptx::mbarrier_init(&s.k_full[st], 1);
        for (int st = 0; st < T::kVStages; ++st) ptx::mbarrier_init(&s.v_full[st], 1);
        for (int st = 0; st < T::kKStages; ++st) ptx::mbarrier_init(&s.k_empty[st], kConsumerWarps);
        for (int st = 0; st < T::kVStages; ++st) ptx::mbarrier_init(&s.v_empty[st], kConsumerWarps);
        for (int qb = 0; qb < kQBuffers; ++qb) ptx::mbarrier_init(&s.q_empty[qb], q_empty_arrivals);
        for (int qb = 0; qb < kQBuffers; ++qb) ptx::mbarrier_init(&s.info_full[qb], 1);
        ptx::mbarrier_init(&s.pin, 1);
        ptx::fence_mbarrier_init();
    }
    __syncthreads();
}

template <class T, int kQBuffers = 1>
__device__ __forceinline__ Sm90FwdSmem<T, kQBuffers>& sm90_smem(unsigned char* raw) {
    return *reinterpret_cast<Sm90FwdSmem<T, kQBuffers>*>((reinterpret_cast<uintptr_t>(raw) + kSm90SmemAlign - 1) /
                                              kSm90SmemAlign * kSm90SmemAlign);
}

// ----- the kernel: each tile's products waited for at once ----------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(T::kThreads)
    fwd_sm90_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                    const __grid_constant__ CUtensorMap map_v, const AttnParams p) {
#if defined(__CUDA_ARCH__) && !FLASHATTN_SM90A
    __trap();  // sm_90a code only; the dispatch launches it on compute capability 9.0 alone
#else
    static_assert(T::kSchedule == Sm90Schedule::serial && T::kKStages == T::kVStages,
                  "K and V tiles share their stage here");
    extern __shared__ unsigned char smem_raw[];
    Sm90FwdSmem<T>& s = sm90_smem<T>(smem_raw);
    const int tid = threadIdx.x;
    const Sm90Place<T> at(p, tid);
    if (at.rows <= 0) return;  // a varlen block past its sequence (the whole block alike)
    init_barriers<T>(s);

    // Thread 0 only: the copies of K and V tile n_tile into stage st.
    auto issue_kv = [&](int n_tile, int st) {
        const int row = at.k_row0 + n_tile * T::kBlockN;
        load_k<T>(s, st, &map_k, row, at);
        load_v<T>(s, st, &map_v, row, at);
    };
    if (tid == 0) {
        load_q<T>(s, &map_q, at);
        for (int i = 0; i < T::kKStages && at.n_tile_begin + i < at.n_tile_end; ++i) issue_kv(at.n_tile_begin + i, i);
    }

    float acc_o[T::kMTiles][T::kDTiles][4];
    float row_max[T::kMTiles][2], row_sum[T::kMTiles][2];
    start_rows<T>(acc_o, row_max, row_sum);
    auto& o_flat = reinterpret_cast<float(&)[T::kDTiles * 4]>(acc_o[0][0][0]);
    const uint32_t q_smem = ptx::smem_addr(s.q[0][0]) + at.q_rows_offset;
    const float exp2_mult = score_exp2_mult(p);

    ptx::mbarrier_wait(&s.q_full[0], 0);
    for (int n_tile = at.n_tile_begin; n_tile < at.n_tile_end; ++n_tile) {
        const int it = n_tile - at.n_tile_begin;
        const int st = it % T::kKStages;
        const uint32_t phase = (it / T::kKStages) % 2;

        float acc_s[T::kMTiles][T::kNTiles][4] = {};
        ptx::mbarrier_wait(&s.k_full[st], phase);
        issue_qk<T>(acc_s, q_smem, ptx::smem_addr(s.k[st][0]));
        ptx::wgmma_wait<0>();
        ptx::fence_registers(reinterpret_cast<float(&)[T::kNTiles * 4]>(acc_s[0][0][0]));
        prepare_scores<T>(acc_s, p, at, n_tile * T::kBlockN);
        online_softmax<T>(acc_s, acc_o, row_max, row_sum, exp2_mult);

        // Every A fragment is packed before the products: registers written between wgmma operations would make
        // the compiler insert warpgroup waits.
        uint32_t a_frag[T::kPvSteps][4];
        pack_p<T>(a_frag, acc_s);
        ptx::mbarrier_wait(&s.v_full[st], phase);
        if (n_tile == at.n_tile_end - 1 && v_tail_needs_zeros<T>(p, at)) {
            zero_v_tail<T>(s.v[st][0], at, tid, T::kThreads);
            __syncthreads();
        }
        issue_pv<T>(acc_o, a_frag, ptx::smem_addr(s.v[st][0]));
        ptx::wgmma_wait<0>();
        ptx::fence_registers(o_flat);

        __syncthreads();  // every warp is done with stage st: refill it
        if (tid == 0 && n_tile + T::kKStages < at.n_tile_end) issue_kv(n_tile + T::kKStages, st);
    }
    store_rows_and_lse<T>(acc_o, row_max, row_sum, p, at, s.q[0][0], nullptr, false);
#endif
}

}  // namespace flashattn::kernels
