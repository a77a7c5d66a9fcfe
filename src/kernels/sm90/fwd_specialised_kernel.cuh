// The Hopper forward with warp specialisation: one producer warpgroup feeds the copy engine, T::kWarpgroups (two, or
// three at head dim 64) consumer warpgroups (64 query rows each) compute.
//
//   producer (warpgroup 0, one thread): a work tile's Q; then for every key tile K into its K stage and V into its V
//     stage, each stage (and Q) first waited for on its "empty" mbarrier (the persistent kernel: K one key tile
//     ahead of V). It keeps kProducerRegs registers (setmaxnreg) so the consumers can hold theirs.
//   consumers: the overlapped step: S(j) = Q K(j)^T and O += P(j-1) V(j-1) in flight
//     together, the exponentials of S(j) computed while the second runs, O rescaled once it is done. Each warp hands
//     a stage back (one arrival on its empty mbarrier) as soon as the wgmma wait that covers its reads returns, so
//     the producer refills it without a block-wide barrier. After a work tile's first key tile the softmax is
//     speculative (row_exp2_sum_speculative): the exponentials against the rows' running maxima, the step computed
//     again from S only where a row's maximum grew by more than 2^8; after such a step the exact online softmax
//     until the maxima settle.
//   taking turns (take_turns, a run-time choice): the consumer warpgroups issue their products one after the
//     other, each waiting on its named barrier for the previous one's signal, so that one's softmax runs while the
//     others' products keep the tensor cores busy rather than all asking for them at once. With two consumer
//     warpgroups at head dims up to 128, a work tile's first and last products go outside the turns (kFreeEnds).
//   persistence: a block loops over work tiles (sm90_tile: heaviest causal tiles first); launched with one block an
//     SM, it keeps two Q tiles: the producer loads the next work tile's Q and first K/V stages while the consumers
//     compute the current one, whose output is staged in its Q tile and stored by the copy engine; that Q tile goes
//     back to the producer (its "empty" mbarrier) once the copy engine has read the output, which the storing thread
//     checks during the next work tile's first step rather than waiting for it; the producer issues the next work
//     tile's Q then, once the current tile's first K and V are out. It also leaves each work tile's place in its Q
//     buffer's slot (Sm90TileInfo), so the consumers do not work it out between two tiles.
// The steps (Sm90Place, issue_qk, issue_pv, pack_p, prepare_scores, store_rows_and_lse) are fwd_kernel.cuh's.
#pragma once

#include "kernels/sm90/fwd_kernel.cuh"
#include "kernels/sm90/fwd_tail_split.cuh"

namespace flashattn::kernels {

// One work tile's computation by a consumer warpgroup; `kv` and `done` count the block's earlier K/V tiles and work
// tiles (the rings' positions). kPersistent: the persistent kernel's instance (two Q tiles, `done` % 2 the current
// one; the output stored by the copy engine through map_o). store_pending: in and out, the Q tile whose output stores
// this warpgroup's first thread has issued but not yet seen read (-1: none); it hands that tile back during this work
// tile's first step (or the caller does after the last work tile).
// The persistent kernel's rings run on over its work tiles, so a tile's first stage is kv modulo the stage count, a
// run-time value (kept in a uniform register); the one-tile kernel's is 0. The persistent kernel had one instance of
// this function per offset (a constant offset keeps each stage's descriptors in uniform registers), picked by kv's
// parity: the two copies of the code made it ~13k instructions, and a block whose work tiles alternated between them
// fetched each cold (Nsight Compute at hd128 512 causal: 17% of the warps' samples stalled on instruction fetch).
// One instance measured +9.7% at hd128 512 causal and +6.0% at 1k causal, the rest unchanged (bench/NOTES_sm90.md v26).
template <class T, bool kPersistent, bool kSplit = false>
__device__ __forceinline__ void consume_work_tile(const AttnParams& p, Sm90FwdSmem<T, kPersistent ? 2 : 1>& s,
                                               const Sm90Place<T>& at, int tid, int kv, int done, bool take_turns,
                                               const CUtensorMap* map_o, int& store_pending,
                                               const Sm90TailSplit& split = {}, Sm90BlockTile bt = {0, -1}) {
    constexpr int kQBuffers = kPersistent ? 2 : 1;
    constexpr bool kMarks = !kPersistent;  // the timeline's marks (timeline.cuh), one-tile kernel only
    const int qb = done % kQBuffers;
    const bool warp_leader = tid % 32 == 0;
    const bool store_issuer = output_store_issuer(tid);  // the warpgroup's output stores (persistent)
    // Turns go round the consumer warpgroups: w waits on barrier kTurnBarrier + w (its own 128 threads and the
    // signalling warpgroup's 128), then signals the next one's. The last warpgroup opens the first round and skips
    // its last signal, so every barrier phase a warpgroup waits for is completed exactly once.
    // kFreeEnds: a work tile's first S product and last P V product are issued outside the turns, which then cover
    // only the steps that issue both products. At a tile's end a warpgroup otherwise waited, before its next tile's
    // first S, for the other warpgroup's last softmax and P V (bench/NOTES_sm90.md v16-v17); measured +2.9% and
    // +0.7% on average at head dim 128 from 512 to 4k keys in two runs, neutral beyond; at head dim 64 (three
    // consumer warpgroups) and 256 it was not ahead, so they keep every issue in turn.
    constexpr bool kFreeEnds = T::kWarpgroups == 2 && T::kHeadDimV <= 128;
    constexpr int kTurnThreads = 256, kLastWg = T::kWarpgroups - 1;
    const int wg = tid / 128, next_wg = wg == kLastWg ? 0 : wg + 1;
    const int tiles = at.n_tile_end - at.n_tile_begin;
    const int issues = kFreeEnds ? (tiles > 1 ? tiles - 1 : 0) : (tiles > 0 ? tiles + 1 : 0);  // those in turn
    int issued = 0;
    auto my_turn = [&] {
        if (take_turns) ptx::named_barrier_sync_nth<kTurnBarrier, T::kWarpgroups>(wg, kTurnThreads);
    };
    auto your_turn = [&] {
        ++issued;
        if (take_turns && (wg != kLastWg || issued < issues))
            ptx::named_barrier_arrive_nth<kTurnBarrier, T::kWarpgroups>(next_wg, kTurnThreads);
    };
    // The products at a work tile's ends, in turn unless kFreeEnds.
    auto my_end_turn = [&] {
        if constexpr (!kFreeEnds) my_turn();
    };
    auto your_end_turn = [&] {
        if constexpr (!kFreeEnds) your_turn();
    };
    if (take_turns && wg == kLastWg && issues > 0) ptx::named_barrier_arrive<kTurnBarrier>(kTurnThreads);

    static_assert(T::kKStages == T::kVStages, "one offset for both rings");
    const int ring = kPersistent ? ptx::warp_uniform(kv) % T::kKStages : 0;  // the rings' first stage
    auto wait_k = [&](int i) {
        ptx::mbarrier_wait(&s.k_full[(ring + i) % T::kKStages], ((kv + i) / T::kKStages) % 2);
    };
    auto wait_v = [&](int i) {
        ptx::mbarrier_wait(&s.v_full[(ring + i) % T::kVStages], ((kv + i) / T::kVStages) % 2);
    };
    auto release_k = [&](int i) {
        if (warp_leader) ptx::mbarrier_arrive(&s.k_empty[(ring + i) % T::kKStages]);
    };
    auto release_v = [&](int i) {
        if (warp_leader) ptx::mbarrier_arrive(&s.v_empty[(ring + i) % T::kVStages]);
    };
    // Q goes back to the producer (one tile a block: once the output staged in it is written out, one arrival a warp).
    auto release_q = [&] {
        if (warp_leader) ptx::mbarrier_arrive(&s.q_empty[0]);
    };
    // The persistent kernel: the previous work tile's Q tile goes back once the copy engine has read the output staged
    // in it (one arrival a warpgroup).
    auto release_stored_q = [&] {
        if (store_pending < 0) return;
        if (store_issuer) {
            ptx::bulk_wait_group_read_all();
            ptx::mbarrier_arrive(&s.q_empty[store_pending]);
        }
        store_pending = -1;
    };
    // In the persistent kernel the tile counter goes through warp_uniform:
    // inside its loop over work tiles the compiler otherwise kept the counter in an ordinary register and built every
    // K and V descriptor there (ncu, hd128 8k: 764M instructions against 711M for one block a tile, LOP3/SHF/R2UR in
    // place of their uniform forms). The one-tile kernel keeps them uniform without it.
    auto stage_of = [](int i) { return kPersistent ? ptx::warp_uniform(i) : i; };
    auto k_smem = [&](int i) { return ptx::smem_addr(s.k[(ring + stage_of(i)) % T::kKStages][0]); };
    auto v_smem = [&](int i) { return ptx::smem_addr(s.v[(ring + stage_of(i)) % T::kVStages][0]); };

    float acc_o[T::kMTiles][T::kDTiles][4];
    float row_max[T::kMTiles][2], row_sum[T::kMTiles][2];
    start_rows<T>(acc_o, row_max, row_sum);
    auto& o_flat = reinterpret_cast<float(&)[T::kDTiles * 4]>(acc_o[0][0][0]);
    // This warpgroup's Q rows as a descriptor, built once a work tile from a value the compiler knows to be the same
    // across the warp, so that each product's descriptors are uniform-register adds (smem_desc_advance). Built from
    // the address at each issue, that chain and its moves to uniform registers stood between a turn's barrier and the
    // first product: 31 instructions there and 157 from the first product to the last at hd128 with 176-key tiles,
    // now 16 and 48; measured 1.025x over the sweep's 36 shapes, hd128 +1.2 to +7.7% (bench/NOTES_sm90.md v30).
    const uint64_t q_desc = ptx::smem_desc_sw128(static_cast<uint32_t>(
        ptx::warp_uniform(static_cast<int>(ptx::smem_addr(s.q[qb][0]) + at.q_rows_offset))));
    const float exp2_mult = score_exp2_mult(p);
    float acc_s[T::kMTiles][T::kNTiles][4];
    auto& s_flat = reinterpret_cast<float(&)[T::kNTiles * 4]>(acc_s[0][0][0]);
    uint32_t a_frag[T::kPvSteps][4];  // P of the previous tile, the operand of the product in flight
    float rescale[T::kMTiles][2];

    if (kPersistent && tid == 0) tile_mark(done, kTtEntered);
    ptx::mbarrier_wait(&s.q_full[qb], (done / kQBuffers) % 2);
    if (kMarks && tid == 0) timeline_mark(kTlQArrived);
    if (kPersistent && tid == 0) tile_mark(done, kTtQArrived);
    if (tiles > 0) {
        // Tile 0: S alone (O is still zero, so no rescale is pending).
        wait_k(0);
        if (kPersistent && tid == 0) tile_mark(done, kTtK0Landed);
        my_end_turn();
        issue_qk_desc<T>(acc_s, q_desc, ptx::smem_desc_sw128(k_smem(0)));
        your_end_turn();
        ptx::wgmma_wait<0>();
        ptx::fence_registers(s_flat);
        release_k(0);
        release_stored_q();
        if (kMarks && tid == 0) timeline_mark(kTlFirstS);
        if (kPersistent && tid == 0) tile_mark(done, kTtFirstS);
        prepare_scores<T>(acc_s, p, at, at.n_tile_begin * T::kBlockN);
        softmax_scores<T>(acc_s, row_max, row_sum, exp2_mult, rescale);  // O is still zero: not rescaled
        pack_p<T>(a_frag, acc_s);
    }
    // The warpgroup's vote (a barrier of its 128 threads that ORs their tests), then the warp's vote on that answer
    // (the same in every lane): the compiler then knows what follows to be uniform, which kept the loop's descriptors
    // in uniform registers.
    auto warpgroup_any = [&](bool pred) {
        return __any_sync(0xffffffffu, ptx::named_barrier_any_nth<kVoteBarrier, T::kWarpgroups>(wg, pred, 128));
    };
    // The P V wait, below the exponentials of the first half-rows (their sum: sum0). ptxas hoisted it above the whole
    // softmax, so a warpgroup's exponentials never ran under its own P V product; placed after them all, the packing
    // of P went onto the path to the next issue (bench/NOTES_sm90.md v11). ptxas keeps it below a barrier operation,
    // so a warp arrives on one that nobody waits for (s.pin), with a test that depends on sum0: those exponentials
    // then come before the wait (v17). The test is against a run-time value, since `!(sum0 < 0)` (a sum of
    // exponentials) was proved true by ptxas, which then dropped the dependency; whether it passes does not matter.
    auto wait_pv_below = [&](int i, float sum0) {
        if (warp_leader && !(sum0 < -exp2_mult)) ptx::mbarrier_arrive(&s.pin);
        ptx::wgmma_wait<0>();  // O += P(i-1) V(i-1) is done: O may be rescaled, P replaced
        ptx::fence_registers(o_flat);
        release_v(i - 1);
    };
    // Step i's softmax after its S wait, speculative: returns whether it failed for some row of the warpgroup, which
    // then computed it again from S. Either way P is packed, and K(i) is still held.
    auto speculative_step = [&](int i) {
        const float sum0 = row_exp2_sum_speculative<T>(acc_s, row_max, 0, exp2_mult);
        wait_pv_below(i, sum0);
        const float sum1 = row_exp2_sum_speculative<T>(acc_s, row_max, 1, exp2_mult);
        pack_p<T>(a_frag, acc_s);
        const bool failed = warpgroup_any(speculation_failed(sum0, sum1));
        if (failed) {
            // S(i) again (K's stage is still ours), its descriptor built here: kept from the issue, it held the
            // issue's descriptors in ordinary registers (30 more instructions after each turn's barrier).
            uint32_t k_addr = k_smem(i);
            ptx::opaque(k_addr);
            issue_qk_desc<T>(acc_s, q_desc, ptx::smem_desc_sw128(k_addr));
            ptx::wgmma_wait<0>();
            ptx::fence_registers(s_flat);
            prepare_scores<T>(acc_s, p, at, (at.n_tile_begin + i) * T::kBlockN);
            softmax_scores<T>(acc_s, row_max, row_sum, exp2_mult, rescale);
            rescale_rows<T>(acc_o, rescale);
            pack_p<T>(a_frag, acc_s);
        } else {
            row_sum[0][0] += sum0;
            row_sum[0][1] += sum1;
        }
        return failed;
    };
    // Step i's softmax after its S wait, exact (the online softmax, O rescaled): returns whether some row of the
    // warpgroup moved its maximum by more than 2^kSpeculativeLog2 (a factor below 2^-kSpeculativeLog2; 0 where the
    // maximum was -inf), i.e. whether the next step should stay exact.
    auto exact_step = [&](int i) {
        softmax_scores<T>(acc_s, row_max, row_sum, exp2_mult, rescale);
        wait_pv_below(i, row_sum[0][0]);
        rescale_rows<T>(acc_o, rescale);
        pack_p<T>(a_frag, acc_s);
        constexpr float kMovedFactor = 1.f / kSpeculativeSumLimit;
        return warpgroup_any(!(rescale[0][0] >= kMovedFactor) || !(rescale[0][1] >= kMovedFactor));
    };
    // Not where the registers are short: head dim 64's three consumer warpgroups (160 registers a thread) and the
    // 192 / 128 instance spilled 72-96 bytes with both forms in the loop, there inside the issue path. They
    // speculate at every step.
    constexpr bool kAdaptive = T::kWarpgroups == 2 && T::kHeadDim != 192;
    bool speculate = true;  // warpgroup-uniform
    for (int i = 1; i < tiles; ++i) {
        wait_k(i);
        wait_v(i - 1);
        // K's descriptor before the turn: the persistent kernel then issues its first product 18 instructions after
        // the turn's barrier rather than 37 (in the one-tile kernels ptxas moves it after the barrier either way).
        const uint64_t k_desc = ptx::smem_desc_sw128(k_smem(i));
        my_turn();
        issue_qk_desc<T>(acc_s, q_desc, k_desc);    // group 1: S(i)
        issue_pv<T>(acc_o, a_frag, v_smem(i - 1));  // group 2: O += P(i-1) V(i-1)
        your_turn();
        ptx::wgmma_wait<1>();                       // S(i) is done; the product may still run
        ptx::fence_registers(s_flat);
        prepare_scores<T>(acc_s, p, at, (at.n_tile_begin + i) * T::kBlockN);
        // The softmax. Speculative (row_exp2_sum_speculative: no row maximum before the first exponential, no
        // rescale of O) while it holds: measured 1.046x over 30 shapes of head dims 64-256, hd128 +3 to +10%
        // (bench/NOTES_sm90.md v31). A step where it fails for some row of the warpgroup is computed twice, which ran
        // rising scores at ~0.56x; so after a failure the warpgroup takes the exact online softmax, until a step in
        // which no row's maximum grew by more than 2^kSpeculativeLog2 (kAdaptive): rising scores then ran at
        // 0.85-0.95x of random ones, random ones at 0.997x the speculation alone (v32). Either form ends in the
        // warpgroup's vote, so `speculate` is the same across the warpgroup.
        if (!kAdaptive || speculate) {
            const bool failed = speculative_step(i);
            if constexpr (kAdaptive) speculate = !failed;
        } else {
            speculate = !exact_step(i);
        }
        release_k(i);
    }
    if (tiles > 0) {
        wait_v(tiles - 1);
        if (kPersistent && tid == 0) tile_mark(done, kTtLastVLanded);
        if (v_tail_needs_zeros<T>(p, at)) {  // both consumer warpgroups zero it and meet before either reads it
            constexpr int kConsumerThreads = 128 * T::kWarpgroups;
            zero_v_tail<T>(s.v[(ring + tiles - 1) % T::kVStages][0], at, tid, kConsumerThreads);
            ptx::named_barrier_sync<kZeroBarrier>(kConsumerThreads);
        }
        my_end_turn();
        issue_pv<T>(acc_o, a_frag, v_smem(tiles - 1));
        your_end_turn();
        ptx::wgmma_wait<0>();
        ptx::fence_registers(o_flat);
        release_v(tiles - 1);
    }
    if (kMarks && tid == 0) timeline_mark(kTlLastPv);
    if (kPersistent && tid == 0) tile_mark(done, kTtLastPv);
    release_stored_q();  // a work tile without key tiles
    if (kSplit && bt.part >= 0)  // a part of a split tile (fwd_tail_split.cuh): fp32 rows for the combine
        store_partial_rows<T>(acc_o, row_max, row_sum, p, at, split, bt);
    else
        store_rows_and_lse<T, true>(acc_o, row_max, row_sum, p, at, s.q[qb][0], kPersistent ? map_o : nullptr,
                                    store_issuer);
    if (kMarks && tid % 128 == 0 && wg < 2) timeline_mark(wg == 0 ? kTlStored0 : kTlStored1);
    if (kPersistent && tid == 0) tile_mark(done, kTtStored);
    if (kPersistent) {
        store_pending = qb;
    } else {
        // The output staged in Q was written by ordinary stores and the next Q arrives by the copy engine: each
        // thread orders its stores before the copy engine's writes.
        ptx::fence_proxy_async_shared();
        __syncwarp();
        release_q();
    }
}

// kSplit: the one-tile kernel's instance whose last blocks may be parts of split tiles (fwd_tail_split.cuh), launched
// only when a split runs, so that the other instances' code is what it was without the split.
template <class T, bool kPersistent, bool kSplit = false>
__global__ void __launch_bounds__(T::kThreads, 1)
    fwd_sm90_specialised_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                                const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o,
                                const AttnParams p, bool take_turns, const Sm90TailSplit split) {
#if defined(__CUDA_ARCH__) && !FLASHATTN_SM90A
    __trap();
#else
    static_assert(T::kSchedule == Sm90Schedule::specialised, "the specialised schedule's traits");
    extern __shared__ unsigned char smem_raw[];
    constexpr int kQBuffers = kPersistent ? 2 : 1;
    Sm90FwdSmem<T, kQBuffers>& s = sm90_smem<T, kQBuffers>(smem_raw);
    // Q goes back once each warp is done with it (one tile a block) or once each warpgroup's output stores have been
    // read from it (persistent).
    init_barriers<T>(s, kPersistent ? T::kWarpgroups : T::kWarpgroups * 4);
    constexpr int kProducerThreads = 128;
    const bool producer = threadIdx.x < kProducerThreads;
    const int tid = producer ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) - kProducerThreads;
    // The block takes work tiles block_work_tile(0), (1), ... (a grid of one tile a block, or persistent: one block
    // an SM). The rings' stages and phases run on over the block's tiles: `kv` counts the K/V tiles before this work
    // tile, `done` the work tiles before it.
    const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
    const int total = m_blocks * p.batch * p.nheads;
    auto place = [&](int t) {
        const Sm90Tile w = sm90_tile(p, t, m_blocks);
        return Sm90Place<T>(p, tid, w.m_block, w.b, w.h);
    };
    // One tile a block: the block's work tile, and its part of the tile's key tiles where the last wave is split
    // (fwd_tail_split.cuh; never in the persistent kernel).
    static_assert(!(kPersistent && kSplit), "the persistent kernel does not split");
    const Sm90BlockTile bt = kSplit ? sm90_block_tile(split, static_cast<int>(blockIdx.x))
                                    : Sm90BlockTile{static_cast<int>(blockIdx.x), -1};
    auto place_block = [&] {
        Sm90Place<T> at = place(bt.tile);
        if (bt.part >= 0) sm90_part_range(at.n_tile_begin, at.n_tile_end, bt.part, split.parts);
        return at;
    };

    if (producer) {
        ptx::setmaxnreg_dec<T::kProducerRegs>();
        if (tid != 0) return;
        if (!kPersistent) timeline_mark(kTlStart);
        int kv = 0, done = 0;
        // Round r of a barrier waits for the consumers' release of round r - 1; round 0 passes at once (a fresh
        // mbarrier counts its previous phase, parity 1, as complete).
        // Work tile d's Q (its first row in the tensor map, head and map batch), into buffer d % kQBuffers: in the
        // persistent kernel that is the buffer of work tile d - 2, free once that tile's output has been read out.
        auto issue_q_at = [&](int row, int head, int batch, int d) {
            const int qb = d % kQBuffers;
            ptx::mbarrier_wait(&s.q_empty[qb], ((d / kQBuffers) % 2) ^ 1);
            load_q_at<T>(s, &map_q, row, head, batch, qb);
            if (!kPersistent) timeline_mark(kTlQIssued);
            if (kPersistent) tile_mark(d, kTtQIssued);
        };
        auto issue_q = [&](const Sm90Place<T>& at, int d) { issue_q_at(at.q_row0 + at.m0, at.h, at.map_batch, d); };
        // The block's first Q goes out before the rest of its place is worked out (one thread's chain of scalar
        // arithmetic: 0.5 us of the 0.76 us the timeline measured before Q was issued). Without varlen every work
        // tile has rows, and Q's rows and batch are the grid coordinates'.
        // Where the parameters alone say that its first key tile is tile 0, that tile's K and V go out right after Q
        // (into stage 0, free in a fresh block).
        const bool q_first = !p.is_varlen && bt.tile < total;
        bool kv_first = false;
        if (q_first) {
            const Sm90Tile w = sm90_tile(p, bt.tile, m_blocks);
            load_q_at<T>(s, &map_q, w.m_block * T::kBlockM, w.h, w.b);
            if (!kPersistent) timeline_mark(kTlQIssued);
            if (kPersistent) tile_mark(0, kTtQIssued);
            kv_first = bt.part <= 0 && first_key_tile_is_zero<T>(p, w.m_block * T::kBlockM);
            if (kv_first) {
                const int hk = w.h / (p.nheads / p.nheads_k);
                load_k_at<T>(s, 0, &map_k, 0, hk, w.b);
                load_v_at<T>(s, 0, &map_v, 0, hk, w.b);
            }
        }
        struct KvTiles {
            int row0, tiles, hk, map_batch;  // row0: the first key tile's first row in the tensor maps
        };
        auto kv_tiles = [](const Sm90Place<T>& at) {
            return KvTiles{at.k_row0 + at.n_tile_begin * T::kBlockN, at.n_tile_end - at.n_tile_begin, at.hk,
                           at.map_batch};
        };
        // A work tile's K and V tiles. after_first_v: called once its first V tile is issued (or at once where it
        // has no key tile); the persistent kernel issues the next work tile's Q there.
        auto produce_kv = [&](const KvTiles at, auto&& after_first_v) {
            auto issued_with_q = [&](int i) { return i == 0 && done == 0 && kv_first; };
            auto issue_k = [&](int i) {
                if (issued_with_q(i)) return;
                const int g = kv + i, ks = g % T::kKStages;
                ptx::mbarrier_wait(&s.k_empty[ks], ((g / T::kKStages) % 2) ^ 1);
                load_k_at<T>(s, ks, &map_k, at.row0 + i * T::kBlockN, at.hk, at.map_batch);
            };
            auto issue_v = [&](int i) {
                if (issued_with_q(i)) return;
                const int g = kv + i, vs = g % T::kVStages;
                ptx::mbarrier_wait(&s.v_empty[vs], ((g / T::kVStages) % 2) ^ 1);
                load_v_at<T>(s, vs, &map_v, at.row0 + i * T::kBlockN, at.hk, at.map_batch);
            };
            if (!kPersistent) {  // the one-tile kernel: K(i) then V(i)
                for (int i = 0; i < at.tiles; ++i) {
                    issue_k(i);
                    issue_v(i);
                }
            } else {
                // K one tile ahead of V. Step i issues S(i + 1) beside P(i) V(i), and K's stage frees earlier in a
                // step than V's (after the S wait, V's after the P V wait), so K(i + 1) goes out before V(i) rather
                // than queueing behind V(i)'s wait.
                if (at.tiles > 0) issue_k(0);
                for (int i = 0; i < at.tiles; ++i) {
                    if (i + 1 < at.tiles) issue_k(i + 1);
                    issue_v(i);
                    if (i == 0) after_first_v();
                }
                if (at.tiles == 0) after_first_v();
            }
            kv += at.tiles, ++done;
        };
        if constexpr (kPersistent) {
            // Every work tile has rows (no varlen here). The next work tile's Q goes out once this one's first K and
            // V are out, which is when this tile's first step hands back the Q buffer it needs: a tile's length
            // before the consumers want it, rather than after all of this tile's K and V, right beside the next
            // tile's first K and V (measured +2.5 to +6.2% at hd128 512-2k non-causal, causal within ±1%;
            // bench/NOTES_sm90.md v24). Its coordinates are the work tile's alone; the rest of its place is worked
            // out when the producer comes to its K and V, and left for the consumers in its Q buffer's slot
            // (Sm90TileInfo, announced on info_full): the producer keeps one place at a time within its
            // kProducerRegs registers (two spilled 120-210 bytes).
            for_each_block_work_tile(total, [&](int t) {
                const Sm90Place<T> at = place(t);
                const int qb = done % kQBuffers;
                if (!q_first && done == 0) issue_q(at, 0);  // (q_first holds without varlen, so always here)
                // After Q's buffer was waited for, so after the consumers have read this slot's previous place. The
                // first tile's too, which its consumers work out themselves: every tile then completes one phase of
                // its slot's barrier, and tile d's is phase d / 2.
                at.publish(&s.tile_info[qb]);
                ptx::mbarrier_arrive(&s.info_full[qb]);
                const int64_t next_t = block_work_tile(done + 1);
                produce_kv(kv_tiles(at), [&] {
                    if (next_t < total) {
                        const Sm90Tile w = sm90_tile(p, static_cast<int>(next_t), m_blocks);
                        issue_q_at(w.m_block * T::kBlockM, w.h, w.b, done + 1);
                    }
                });
            });
        } else {  // one tile (or a split tile's part) a block
            const Sm90Place<T> at = place_block();
            timeline_mark(kTlPlaced);
            if (at.rows > 0) {  // else a varlen tile past its sequence
                // Q first, as nothing else can start without it (issued after two K and V stages it arrived last,
                // and the consumers' first wait for it was 19% of the stall samples at seqlen 512).
                if (!q_first) issue_q(at, 0);
                produce_kv(kv_tiles(at), [] {});
            }
        }
        if (!kPersistent) timeline_mark(kTlProducerDone);
        return;
    }

    ptx::setmaxnreg_inc<T::kConsumerRegs>();
    // Turns (consume_work_tile): in a work tile each consumer warpgroup issues tiles + 1 times (S(0), one per later
    // tile, the last P V), tiles - 1 of them in turn where the ends are free; the same count in every warpgroup.
    static_assert(T::kWarpgroups == 2 || T::kWarpgroups == 3, "turns go round two or three consumer warpgroups");
    int store_pending = -1;  // the Q tile whose output stores have not been seen read (consume_work_tile)
    if constexpr (kPersistent) {
        int kv = 0, done = 0;
        // Every work tile has rows here (the persistent kernel does not take varlen); the place of each after the
        // first is the producer's (Sm90TileInfo), read once its slot's barrier says it is written.
        for_each_block_work_tile(total, [&](int t) {
            const int qb = done % kQBuffers;
            if (done > 0) ptx::mbarrier_wait(&s.info_full[qb], (done / kQBuffers) % 2);
            const Sm90Place<T> at = done == 0 ? place(t) : Sm90Place<T>(s.tile_info[qb], tid);
            if (at.rows <= 0) return;
            consume_work_tile<T, true>(p, s, at, tid, kv, done, take_turns, &map_o, store_pending);
            kv += at.n_tile_end - at.n_tile_begin, ++done;
        });
        // The last output's shared-memory source must stay until the copy engine has read it.
        if (store_pending >= 0 && output_store_issuer(tid)) ptx::bulk_wait_group_read_all();
    } else {  // one work tile a block: straight-line code
        const Sm90Place<T> at = place_block();
        if (at.rows > 0)
            consume_work_tile<T, false, kSplit>(p, s, at, tid, 0, 0, take_turns, nullptr, store_pending, split,
                                                bt);
    }
#endif
}

}  // namespace flashattn::kernels
