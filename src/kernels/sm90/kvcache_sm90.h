// The Hopper kv-cache kernel's host side (sm90/kvcache_sm90.cu): which calls it takes, its occupancy (for the split
// heuristic) and its launch (append, attention, combine).
#pragma once

#include <cstdint>

#include "common/params.h"
#include "kernels/sm80/kvcache_plan.h"

namespace flashattn::kernels {

// Whether the Hopper kv-cache kernel computes p: float16/bfloat16, head dims (q/k and v) up to 128; a dense cache, or
// a paged one without cache_leftpad (its pieces start on 16-row boundaries of the pages); pointers and strides the
// copy engine can address. The device (compute capability 9.0) and the build (sm_90a compiled) are the dispatch's
// checks; FLASHATTN_KVCACHE_PATH=sm80 turns it off there.
bool kvc_sm90_handles(const AttnParams& p);

// Resident blocks an SM for p's instance (the split heuristic's slots).
int kvc_sm90_blocks_per_sm(const AttnParams& p);
// Clusters of `splits` blocks (2 to kKvcClusterMax, a unit's splits merged in their cluster) of p's instance that
// the GPU holds at once; 0 where it cannot launch them.
int kvc_sm90_cluster_capacity(const AttnParams& p, int splits);
// Key-rows a tile of p's instance (the split heuristic's tile count).
int kvc_sm90_block_n(const AttnParams& p);
// Tiles of K (and of V) p's instance keeps in flight: its stages (kvc_latency_splits).
int kvc_sm90_tiles_in_flight(const AttnParams& p);
// kv heads a block on a GPU of `slots` resident blocks (kvc_head_group of the instance's tile in 16-row pieces, then
// kvc_head_group_for_grid on pages of 16-row pieces, kvc_dense_head_group on dense caches and longer pages).
// FLASHATTN_KVC_HEAD_GROUP=1 keeps one kv head a block (for comparison), =max takes kvc_head_group's count whatever
// the grid (tests), =8 kvc_wide_head_group's where it is 8, else kvc_head_group's (tests), =2 or =4 at most that many,
// =no8 the rule without groups of 8 (measurements). many_waves: kvc_sm90_many_waves(p, slots), which the caller has
// already asked for the planner. fast_memory (kvc_fast_memory): paged caches of long pieces then take
// kvc_fast_memory_paged_group's pairs in place of the wide group, and every paged cache kvc_fast_memory_paged_quads'
// fours in place of pairs, where they say; dense caches kvc_fast_memory_dense_quads' fours.
int kvc_sm90_head_group(const AttnParams& p, int64_t slots, bool many_waves, bool fast_memory = false);
// Whether the many-waves rule applies to p on a GPU of `slots` resident blocks (kvc_many_waves, on dense caches and
// longer page pieces: one kv head a block, kvc_sm90_head_group, and kvc_many_wave_splits splits, the planner's);
// not with fast memory (kvc_fast_memory: on an H200, 256 blocks of 8 kv heads read batch 64 x 32 x 4k page 16 at 948
// us where one kv head a block read the dense cache at 978). FLASHATTN_KVC_MANY_WAVES=0 turns it off, =1 on with fast
// memory too (measurements).
bool kvc_sm90_many_waves(const AttnParams& p, int64_t slots, bool fast_memory);

void launch_kvc_sm90(const AttnParams& p, const KvcPlan& plan);

// Launches so far in this process: lets a test tell which kv-cache kernel ran.
int64_t kvc_sm90_launches();
// Of those, the launches whose splits merged in a cluster.
int64_t kvc_sm90_cluster_launches();
// Of those, the launches on a paged cache that read pages in address order (KvcPlan::pages_in_address_order).
int64_t kvc_sm90_ordered_launches();
// Of those, the launches whose V pieces were copied both halves at once (KvcPlan::v_fold_rows).
int64_t kvc_sm90_v_fold_launches();
// ... and those whose K pieces were (KvcPlan::k_fold).
int64_t kvc_sm90_k_fold_launches();
// Of those, the launches of the lean instance (the common decode call's; kvc_lean in kvcache_sm90.cu).
int64_t kvc_sm90_lean_launches();

}  // namespace flashattn::kernels
