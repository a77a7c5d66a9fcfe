// attn_probs at small sizes (softmax probabilities, negated where dropout dropped them) against the oracle's, and
// the dropout pattern: the GPU must keep and drop exactly the elements the CPU does (common/philox.h). Tests are
// named GpuAttnProbs.<Group>/<label> and GpuDropout.<Group>/<label>.
#include <vector>

#include "kernels/attention_case.h"
#include "kernels/test_cases.h"

namespace flashattn::testing {
namespace {

std::vector<AttnCase> probs_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 17, .seqlen_k = 17, .head_dim = 64, .attn_probs = true},
        {.dtype = kBF16, .seqlen_q = 113, .seqlen_k = 64, .head_dim = 128, .causal = true, .attn_probs = true},
        {.dtype = kF16, .seqlen_q = 64, .seqlen_k = 113, .head_dim = 40, .window_left = 8, .window_right = 4,
         .attn_probs = true},
        {.dtype = kBF16, .seqlen_q = 128, .seqlen_k = 128, .head_dim = 64, .softcap = 5.0f,
         .alibi = Alibi::per_batch_head, .attn_probs = true},
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 113, .head_dim = 256, .dropout_p = 0.3f, .attn_probs = true},
        {.dtype = kBF16, .seqlen_q = 64, .seqlen_k = 200, .nheads = 8, .nheads_k = 2, .head_dim = 72, .causal = true,
         .dropout_p = 0.1f, .attn_probs = true},
        {.dtype = kF16, .head_dim = 64, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK, .causal = true,
         .attn_probs = true},
    };
}

std::vector<AttnCase> pattern_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 128, .seqlen_k = 256, .head_dim = 64, .dropout_p = 0.17f, .attn_probs = true},
        {.dtype = kBF16, .seqlen_q = 256, .seqlen_k = 128, .head_dim = 128, .causal = true, .dropout_p = 0.5f,
         .seed = 1, .attn_probs = true},
        {.dtype = kF16, .seqlen_q = 113, .seqlen_k = 113, .head_dim = 40, .dropout_p = 0.83f, .seed = kBigSeed,
         .offset = kBigOffset, .attn_probs = true},
        {.dtype = kBF16, .seqlen_q = 200, .seqlen_k = 200, .nheads = 8, .nheads_k = 2, .head_dim = 64,
         .window_left = 32, .window_right = 32, .dropout_p = 0.1f, .seed = 0, .offset = 3, .attn_probs = true},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 512, .head_dim = 256, .alibi = Alibi::per_head,
         .dropout_p = 0.25f, .seed = kBigSeed, .attn_probs = true},
        {.dtype = kF16, .head_dim = 64, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK, .dropout_p = 0.3f,
         .attn_probs = true},
    };
}

[[maybe_unused]] const bool registered = [] {
    register_cases("GpuAttnProbs", "Small", probs_cases(), check_forward, __FILE__, __LINE__);
    register_cases("GpuDropout", "Pattern", pattern_cases(), check_dropout_pattern, __FILE__, __LINE__);
    return true;
}();

}  // namespace
}  // namespace flashattn::testing
