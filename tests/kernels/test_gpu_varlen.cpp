// GPU varlen forward (ragged batches with cu_seqlens and seqused_k on the device) and softmax_lse, including rows
// that see no key (out exactly 0, lse exactly +inf). Tests are named GpuVarlenForward.<Group>/<label> and
// GpuLse.<Group>/<label>.
#include <vector>

#include "kernels/attention_case.h"
#include "kernels/test_cases.h"

namespace flashattn::testing {
namespace {

std::vector<AttnCase> ragged_cases() {
    const auto& q = kRaggedQ;
    const auto& k = kRaggedK;
    return {
        {.dtype = kF16, .head_dim = 64, .seqlens_q = q, .seqlens_k = k},
        {.dtype = kBF16, .head_dim = 128, .seqlens_q = q, .seqlens_k = k, .causal = true},
        {.dtype = kF16, .head_dim = 72, .seqlens_q = q, .seqlens_k = k, .window_left = 32, .window_right = 8},
        {.dtype = kBF16, .head_dim = 256, .seqlens_q = q, .seqlens_k = k, .alibi = Alibi::per_batch_head},
        {.dtype = kF16, .head_dim = 200, .seqlens_q = q, .seqlens_k = k, .softcap = 5.0f},
        {.dtype = kBF16, .head_dim = 64, .seqlens_q = q, .seqlens_k = k, .dropout_p = 0.17f},
        {.dtype = kF16, .nheads = 8, .nheads_k = 2, .head_dim = 128, .seqlens_q = q, .seqlens_k = k,
         .window_left = 64},
        {.dtype = kBF16, .head_dim = 40, .seqlens_q = q, .seqlens_k = k, .causal = true, .softcap = 2.0f,
         .alibi = Alibi::per_head},
        {.dtype = kF16, .head_dim = 192, .head_dim_v = 128, .seqlens_q = q, .seqlens_k = k, .causal = true},
    };
}

std::vector<AttnCase> seqused_cases() {
    const auto& q = kUsedQ;
    const auto& k = kUsedK;
    const auto& used = kUsedUsed;
    return {
        {.dtype = kF16, .head_dim = 64, .seqlens_q = q, .seqlens_k = k, .seqused_k = used, .causal = true},
        {.dtype = kBF16, .head_dim = 128, .seqlens_q = q, .seqlens_k = k, .seqused_k = used,
         .alibi = Alibi::per_head},
        {.dtype = kF16, .nheads = 6, .nheads_k = 1, .head_dim = 40, .seqlens_q = q, .seqlens_k = k,
         .seqused_k = used, .window_left = 16, .window_right = 16},
        {.dtype = kBF16, .head_dim = 64, .seqlens_q = q, .seqlens_k = k, .seqused_k = used, .dropout_p = 0.3f},
        {.dtype = kF16, .head_dim = 128, .seqlens_q = q, .seqlens_k = k, .seqused_k = used, .nan_past_used = true},
    };
}

std::vector<AttnCase> long_cases() {
    return {
        {.dtype = kBF16, .head_dim = 64, .seqlens_q = kLongQ, .seqlens_k = kLongK, .causal = true},
        {.dtype = kF16, .nheads = 4, .nheads_k = 1, .head_dim = 128, .seqlens_q = kLongQ, .seqlens_k = kLongK,
         .window_left = 300, .window_right = 100},
    };
}

// Cases with rows that see no key: bottom-right causal with seqlen_q > seqlen_k, windows that end before the first
// key, a varlen sequence with no keys, one whose seqused_k is 0.
std::vector<AttnCase> masked_row_cases() {
    return {
        {.dtype = kF16, .seqlen_q = 300, .seqlen_k = 100, .head_dim = 64, .causal = true},
        {.dtype = kBF16, .batch = 1, .seqlen_q = 2049, .seqlen_k = 113, .head_dim = 128, .causal = true},
        {.dtype = kF16, .seqlen_q = 64, .seqlen_k = 16, .head_dim = 64, .window_left = 3, .window_right = 1},
        {.dtype = kBF16, .seqlen_q = 512, .seqlen_k = 200, .nheads = 8, .nheads_k = 2, .head_dim = 256,
         .window_left = 20, .window_right = 5, .alibi = Alibi::per_head},
        {.dtype = kBF16, .head_dim = 64, .seqlens_q = kRaggedQ, .seqlens_k = kRaggedK},
        {.dtype = kF16, .head_dim = 128, .seqlens_q = kUsedQ, .seqlens_k = kUsedK, .seqused_k = kUsedUsed,
         .softcap = 5.0f},
    };
}

[[maybe_unused]] const bool registered = [] {
    register_cases("GpuVarlenForward", "Ragged", ragged_cases(), check_forward, __FILE__, __LINE__);
    register_cases("GpuVarlenForward", "SequsedK", seqused_cases(), check_forward, __FILE__, __LINE__);
    register_cases("GpuVarlenForward", "Long", long_cases(), check_forward, __FILE__, __LINE__);
    register_cases("GpuLse", "MaskedRows", masked_row_cases(), check_masked_rows, __FILE__, __LINE__);
    return true;
}();

}  // namespace
}  // namespace flashattn::testing
