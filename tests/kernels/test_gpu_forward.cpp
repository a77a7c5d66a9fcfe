// GPU forward against the fp32 CPU oracle, by the rule of attention_case.h, over every head dim, sequence length,
// mask, score modifier and GQA ratio, and pairs of them. Tests are named GpuForward.<Group>/<case label>.
#include <vector>

#include "kernels/attention_case.h"
#include "kernels/test_cases.h"

namespace flashattn::testing {
namespace {

// Every supported head dim, both dtypes; a short and a long side so the key loop crosses several blocks.
std::vector<AttnCase> head_dim_cases() {
    std::vector<AttnCase> cases;
    for (DType dt : kDtypes)
        for (int64_t d : kHeadDims) {
            const bool f16 = dt == kF16;
            cases.push_back({.dtype = dt, .seqlen_q = f16 ? 113 : 1000, .seqlen_k = f16 ? 1000 : 113, .head_dim = d});
        }
    return cases;
}

// Every sequence length on both sides, equal and unequal (both ways); no mask. Batch x heads shrinks as the
// sequences grow, to bound the oracle's O(N^2) cost.
std::vector<AttnCase> seqlen_cases() {
    struct Lengths {
        int64_t q, k;
    };
    const Lengths lengths[] = {{1, 1},      {17, 17},    {113, 113},  {512, 512},   {1000, 1000},
                               {2049, 2049}, {1, 2049},  {2049, 1},   {17, 1000},   {1000, 17},
                               {113, 2049}, {2049, 113}, {512, 1000}, {1000, 512}};
    std::vector<AttnCase> cases;
    int n = 0;
    for (const Lengths& l : lengths) {
        const bool big = l.q * l.k > kLargePairs;
        cases.push_back({.dtype = (n++ % 2 == 0) ? kF16 : kBF16,
                         .batch = big ? 1 : 2,
                         .seqlen_q = l.q,
                         .seqlen_k = l.k,
                         .nheads = big ? kLargeHeads : 4,
                         .nheads_k = big ? kLargeHeads : 4,
                         .head_dim = 64});
    }
    return cases;
}

// Bottom-right causal, seqlen_q < seqlen_k, > (top rows see nothing), == and a single query row.
std::vector<AttnCase> causal_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 64, .causal = true},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 113, .head_dim = 128, .causal = true},
        {.dtype = kF16, .batch = 1, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 8, .head_dim = 256,
         .causal = true},
        {.dtype = kBF16, .seqlen_q = 17, .seqlen_k = 2049, .head_dim = 40, .causal = true},
        {.dtype = kF16, .seqlen_q = 2049, .seqlen_k = 17, .head_dim = 72, .causal = true},
        {.dtype = kBF16, .batch = 3, .seqlen_q = 1, .seqlen_k = 1000, .head_dim = 200, .causal = true},
        {.dtype = kF16, .batch = 1, .seqlen_q = 2049, .seqlen_k = 2049, .nheads = 8, .nheads_k = 8, .head_dim = 128,
         .causal = true},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 64, .causal = true},
    };
}

// Sliding windows: left side only, both sides, right side only (window_right = 0 is causal by other means), and
// causal with a left bound.
std::vector<AttnCase> window_cases() {
    return {
        // left only
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 64, .window_left = 100},
        {.dtype = kBF16, .batch = 1, .seqlen_q = 512, .seqlen_k = 2049, .head_dim = 128, .window_left = 256},
        {.dtype = kF16, .batch = 1, .seqlen_q = 2049, .seqlen_k = 512, .head_dim = 40, .window_left = 64},
        // both sides
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 128, .window_left = 32, .window_right = 16},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 256, .window_left = 128,
         .window_right = 128},
        {.dtype = kBF16, .batch = 1, .seqlen_q = 2049, .seqlen_k = 2049, .nheads = 8, .nheads_k = 8, .head_dim = 64,
         .window_left = 256, .window_right = 256},
        // right only
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .window_right = 8},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 1000, .head_dim = 200, .window_right = 0},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 113, .head_dim = 72, .window_right = 32},
        // causal with a left bound
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 64, .causal = true, .window_left = 128},
    };
}

// tanh soft-capping, from strongly nonlinear (1.5) to nearly inactive (30).
std::vector<AttnCase> softcap_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .softcap = 1.5f},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 1000, .head_dim = 128, .softcap = 5.0f},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 113, .head_dim = 256, .softcap = 30.0f},
        {.dtype = kBF16, .seqlen_q = 17, .seqlen_k = 17, .head_dim = 200, .softcap = 2.0f},
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 72, .softmax_scale = 1.0f, .softcap = 5.0f},
    };
}

// ALiBi slopes per head (nheads) and per batch and head (batch, nheads).
std::vector<AttnCase> alibi_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .alibi = Alibi::per_head},
        {.dtype = kBF16, .batch = 1, .seqlen_q = 113, .seqlen_k = 2049, .head_dim = 128, .alibi = Alibi::per_head},
        {.dtype = kF16, .batch = 3, .seqlen_q = 1000, .seqlen_k = 113, .head_dim = 72,
         .alibi = Alibi::per_batch_head},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 256, .alibi = Alibi::per_batch_head},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 128, .causal = true,
         .alibi = Alibi::per_head},
    };
}

std::vector<AttnCase> dropout_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .dropout_p = 0.17f},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 1000, .head_dim = 128, .dropout_p = 0.5f, .seed = 7},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 113, .head_dim = 256, .dropout_p = 0.1f,
         .seed = kBigSeed, .offset = kBigOffset},
        {.dtype = kBF16, .seqlen_q = 17, .seqlen_k = 17, .head_dim = 40, .dropout_p = 0.83f},
    };
}

// Grouped-query attention: ratios 2 and 8, and multi-query (one key/value head).
std::vector<AttnCase> gqa_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 1000, .nheads = 6, .nheads_k = 3, .head_dim = 64},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 512, .nheads = 8, .nheads_k = 4, .head_dim = 128},
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 512, .nheads = 16, .nheads_k = 2, .head_dim = 128},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 512, .nheads = 16, .nheads_k = 2, .head_dim = 72},
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .nheads = 8, .nheads_k = 1, .head_dim = 256},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 113, .nheads = 5, .nheads_k = 1, .head_dim = 40},
    };
}

// Features together.
std::vector<AttnCase> combination_cases() {
    return {
        // causal + ALiBi + softcap
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 1000, .head_dim = 64, .causal = true, .softcap = 5.0f,
         .alibi = Alibi::per_batch_head},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 512, .head_dim = 128, .causal = true, .softcap = 2.0f,
         .alibi = Alibi::per_head},
        // window + GQA
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 128,
         .window_left = 64, .window_right = 32},
        {.dtype = kBF16, .batch = 1, .seqlen_q = 2049, .seqlen_k = 2049, .nheads = 6, .nheads_k = 1, .head_dim = 64,
         .window_left = 256, .window_right = 0},
        // dropout + causal
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 64, .causal = true, .dropout_p = 0.2f},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 512, .head_dim = 256, .causal = true, .dropout_p = 0.3f},
        // everything at once
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 1000, .nheads = 8, .nheads_k = 2, .head_dim = 72,
         .causal = true, .window_left = 200, .softcap = 5.0f, .alibi = Alibi::per_batch_head, .dropout_p = 0.1f},
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 512, .nheads = 4, .nheads_k = 2, .head_dim = 200,
         .window_left = 100, .window_right = 50, .softcap = 10.0f, .alibi = Alibi::per_head, .dropout_p = 0.25f},
    };
}

// head_dim_v != head_dim.
std::vector<AttnCase> head_dim_v_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 128, .head_dim_v = 64},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 1000, .head_dim = 128, .head_dim_v = 64, .causal = true},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 113, .head_dim = 192, .head_dim_v = 128},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 192, .head_dim_v = 128, .causal = true},
    };
}

// Head dims of the buckets whose tiles use the swizzled shared-memory layout (128 and 192) at and below the bucket:
// full tiles through the unpredicated copies, partial columns and the last, partial key tile through the chunk
// copies, and the output written through the swizzled tile.
std::vector<AttnCase> swizzled_layout_cases() {
    return {
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 2049, .nheads = 6, .nheads_k = 2, .head_dim = 192},
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 1000, .head_dim = 192, .causal = true, .dropout_p = 0.1f},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 1000, .head_dim = 160, .window_left = 100, .window_right = 7},
        {.dtype = kF16, .seqlen_q = 17, .seqlen_k = 113, .head_dim = 136, .softcap = 4.0f},
        {.dtype = kBF16, .seqlen_q = 2049, .seqlen_k = 512, .head_dim = 128, .causal = true,
         .alibi = Alibi::per_head},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 120, .head_dim_v = 128},
    };
}

// Non-contiguous inputs: q, k, v slices of one packed qkv tensor; out in a buffer with padded rows.
std::vector<AttnCase> strided_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 113, .head_dim = 64, .packed_qkv = true},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 128, .causal = true, .packed_qkv = true},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 40, .window_left = 64, .window_right = 64,
         .packed_qkv = true},
    };
}

// An explicit softmax_scale (large logits stress the running maximum of the online softmax).
std::vector<AttnCase> scale_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 64, .softmax_scale = 0.5f},
        {.dtype = kF16, .seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 128, .softmax_scale = 1.0f, .causal = true},
        // A zero scale: uniform weights over the visible keys (rows seeing no key stay 0 with LSE +inf).
        {.dtype = kBF16, .seqlen_q = 1000, .seqlen_k = 113, .head_dim = 128, .softmax_scale = 0.0f, .causal = true},
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 2049, .head_dim = 64, .softmax_scale = 0.0f, .window_left = 64,
         .window_right = 0},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 192, .softmax_scale = 0.0f, .softcap = 3.0f,
         .alibi = Alibi::per_head},
    };
}

[[maybe_unused]] const bool registered = [] {
    const char* suite = "GpuForward";
    register_cases(suite, "HeadDim", head_dim_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "SeqLen", seqlen_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Causal", causal_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Window", window_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Softcap", softcap_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Alibi", alibi_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Dropout", dropout_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Gqa", gqa_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Combined", combination_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "HeadDimV", head_dim_v_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "SwizzledLayout", swizzled_layout_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Strided", strided_cases(), check_forward, __FILE__, __LINE__);
    register_cases(suite, "Scale", scale_cases(), check_forward, __FILE__, __LINE__);
    return true;
}();

}  // namespace
}  // namespace flashattn::testing
