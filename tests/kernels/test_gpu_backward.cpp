// GPU backward (dq, dk, dv, softmax_d), padded and varlen, against the fp32 CPU oracle by the rule of
// attention_case.h; the deterministic option (two runs, identical bits). Each case also checks its forward.
// Tests are named GpuBackward.<Group>/<label>, GpuVarlenBackward.<Group>/<label>, GpuDeterministic.<Group>/<label>.
#include <vector>

#include "kernels/attention_case.h"
#include "kernels/test_cases.h"

namespace flashattn::testing {
namespace {

// Every head dim, the dtypes alternating.
std::vector<AttnCase> head_dim_cases() {
    std::vector<AttnCase> cases;
    int n = 0;
    for (int64_t d : kHeadDims)
        cases.push_back({.dtype = (n++ % 2 == 0) ? kF16 : kBF16, .seqlen_q = 113, .seqlen_k = 256, .head_dim = d});
    return cases;
}

std::vector<AttnCase> seqlen_cases() {
    struct Lengths {
        int64_t q, k;
    };
    const Lengths lengths[] = {{1, 1},     {17, 1000}, {1000, 17}, {113, 512},
                               {512, 113}, {1, 2049},  {2049, 1},  {2049, 2049}};
    std::vector<AttnCase> cases;
    int n = 0;
    for (const Lengths& l : lengths) {
        const bool big = l.q * l.k > kLargePairs;
        cases.push_back({.dtype = (n++ % 2 == 0) ? kBF16 : kF16,
                         .batch = big ? 1 : 2,
                         .seqlen_q = l.q,
                         .seqlen_k = l.k,
                         .nheads = big ? kLargeHeads / 2 : 4,
                         .nheads_k = big ? kLargeHeads / 2 : 4,
                         .head_dim = 64});
    }
    return cases;
}

std::vector<AttnCase> mask_cases() {
    return {
        // causal
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 64, .causal = true},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 113, .head_dim = 128, .causal = true},
        {.dtype = kF16, .batch = 1, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 8, .head_dim = 128,
         .causal = true},
        {.dtype = kBF16, .batch = 1, .seqlen_q = 2049, .seqlen_k = 17, .head_dim = 64, .causal = true},
        // windows: left only, both sides, right only, and one leaving rows with no key
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .window_left = 64},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 128, .window_left = 128,
         .window_right = 64},
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 72, .window_right = 16},
        {.dtype = kBF16, .seqlen_q = 64, .seqlen_k = 16, .head_dim = 64, .window_left = 3, .window_right = 1},
    };
}

std::vector<AttnCase> modifier_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .softcap = 5.0f},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 1000, .head_dim = 128, .causal = true, .softcap = 2.0f},
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .alibi = Alibi::per_head},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 113, .head_dim = 128, .causal = true,
         .alibi = Alibi::per_batch_head},
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .dropout_p = 0.17f},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 1000, .head_dim = 128, .causal = true, .dropout_p = 0.3f,
         .seed = kBigSeed, .offset = kBigOffset},
        // A zero softmax_scale (uniform weights over the visible keys; dq = dk = 0), with and without softcap.
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 113, .head_dim = 64, .softmax_scale = 0.0f, .causal = true},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 256, .softmax_scale = 0.0f, .softcap = 5.0f},
    };
}

// GQA ratios 2 and 8, and MQA: dk and dv sum over the query heads of a group.
std::vector<AttnCase> gqa_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .nheads = 6, .nheads_k = 3, .head_dim = 64},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 512, .nheads = 16, .nheads_k = 2, .head_dim = 128,
         .causal = true},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 512, .nheads = 8, .nheads_k = 1, .head_dim = 64},
        {.dtype = kBF16, .seqlen_q = 256, .seqlen_k = 256, .nheads = 5, .nheads_k = 1, .head_dim = 200},
    };
}

std::vector<AttnCase> layout_cases() {
    return {
        // head_dim_v != head_dim
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 128, .head_dim_v = 64},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 192, .head_dim_v = 128, .causal = true},
        // hd192 with full query tiles and a partial last one (its Q and dO tiles take the swizzled layout)
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 512, .head_dim = 192},
        // q, k, v (and dq, dk, dv) as slices of packed tensors
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 113, .head_dim = 64, .packed_qkv = true},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 128, .causal = true, .packed_qkv = true},
    };
}

std::vector<AttnCase> combination_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 1000, .head_dim = 64, .causal = true, .softcap = 5.0f,
         .alibi = Alibi::per_batch_head},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 128,
         .window_left = 64, .window_right = 32},
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .nheads = 6, .nheads_k = 2, .head_dim = 72, .causal = true,
         .dropout_p = 0.2f},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 200,
         .causal = true, .window_left = 200, .softcap = 5.0f, .alibi = Alibi::per_batch_head, .dropout_p = 0.1f},
    };
}

std::vector<AttnCase> varlen_cases() {
    return {
        {.dtype = kF16, .head_dim = 64, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK},
        {.dtype = kBF16, .head_dim = 128, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK, .causal = true},
        {.dtype = kF16, .nheads = 8, .nheads_k = 2, .head_dim = 72, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK,
         .window_left = 32, .window_right = 8, .dropout_p = 0.1f},
        {.dtype = kBF16, .head_dim = 64, .seqlens_q = kUsedQ, .seqlens_k = kUsedK, .seqused_k = kUsedUsed,
         .softcap = 5.0f, .alibi = Alibi::per_batch_head},
        // causal with seqused_k: key tiles past the used keys are seen by no row and must visit no query tile
        {.dtype = kF16, .head_dim = 64, .seqlens_q = kUsedQ, .seqlens_k = kUsedK, .seqused_k = kUsedUsed,
         .causal = true},
        {.dtype = kF16, .nheads = 4, .nheads_k = 2, .head_dim = 64, .seqlens_q = kLongQ, .seqlens_k = kLongK,
         .causal = true},
        {.dtype = kBF16, .head_dim = 256, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK, .alibi = Alibi::per_head,
         .dropout_p = 0.2f},
    };
}

// Many key blocks contributing to each dq row, and GQA heads contributing to each dk / dv row: where atomics
// would make results depend on scheduling.
std::vector<AttnCase> deterministic_cases() {
    return {
        {.dtype = kF16, .batch = 1, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 128,
         .causal = true},
        {.dtype = kBF16, .nheads = 4, .nheads_k = 1, .head_dim = 64, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK},
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .alibi = Alibi::per_head,
         .dropout_p = 0.2f},
        // 128 (batch, kv head) pairs leave room for only a few splits, so each block walks several key tiles that
        // add into the same dQ rows one after another.
        {.dtype = kBF16, .batch = 4, .seqlen_q = 113, .seqlen_k = 2049, .nheads = 32, .nheads_k = 32,
         .head_dim = 128},
    };
}

[[maybe_unused]] const bool registered = [] {
    const char* suite = "GpuBackward";
    register_cases(suite, "HeadDim", head_dim_cases(), check_backward, __FILE__, __LINE__);
    register_cases(suite, "SeqLen", seqlen_cases(), check_backward, __FILE__, __LINE__);
    register_cases(suite, "Mask", mask_cases(), check_backward, __FILE__, __LINE__);
    register_cases(suite, "Modifier", modifier_cases(), check_backward, __FILE__, __LINE__);
    register_cases(suite, "Gqa", gqa_cases(), check_backward, __FILE__, __LINE__);
    register_cases(suite, "Layout", layout_cases(), check_backward, __FILE__, __LINE__);
    register_cases(suite, "Combined", combination_cases(), check_backward, __FILE__, __LINE__);
    register_cases("GpuVarlenBackward", "Ragged", varlen_cases(), check_backward, __FILE__, __LINE__);
    register_cases("GpuDeterministic", "TwoRuns", deterministic_cases(), check_deterministic, __FILE__, __LINE__);
    return true;
}();

}  // namespace
}  // namespace flashattn::testing
