// Random combinations of every forward/backward feature (a fixed seed, so failures reproduce): catches
// interactions the feature-by-feature tests do not set up, e.g. a window with ALiBi and GQA in a varlen batch.
#include <gtest/gtest.h>

#include <initializer_list>
#include <random>
#include <utility>

#include "reference/reference_checks.h"

namespace flashattn::testing {
namespace {

constexpr int kSweepCases = 24;
constexpr uint64_t kSweepSeed = 20240917;
constexpr int kMaxSweepSeqlen = 300;

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> options) {
    return options.begin()[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)];
}

// One random problem: anything goes except what the layout itself forbids.
ProblemConfig random_config(std::mt19937_64& rng) {
    auto coin = [&](double p_true) { return std::bernoulli_distribution(p_true)(rng); };
    auto length = [&] { return std::uniform_int_distribution<int>(1, kMaxSweepSeqlen)(rng); };

    ProblemConfig c;
    c.dtype = pick(rng, {DType::f16, DType::bf16, DType::f32});
    const auto heads = pick<std::pair<int, int>>(rng, {{1, 1}, {3, 3}, {4, 2}, {6, 1}, {8, 4}});
    c.nheads = heads.first;
    c.nheads_k = heads.second;
    c.head_dim = pick(rng, {16, 40, 72, 128, 256});
    c.head_dim_v = coin(0.3) ? pick(rng, {16, 40, 72}) : 0;
    c.batch = std::uniform_int_distribution<int>(1, 3)(rng);
    if (coin(0.4)) {
        for (int b = 0; b < c.batch + 1; ++b) {  // varlen, sometimes with empty sequences
            c.seqlens_q.push_back(coin(0.15) ? 0 : length());
            c.seqlens_k.push_back(coin(0.15) ? 0 : length());
        }
        if (coin(0.3))
            for (int sk : c.seqlens_k) c.seqused_k.push_back(sk > 0 ? std::uniform_int_distribution<int>(0, sk)(rng) : 0);
    } else {
        c.seqlen_q = length();
        c.seqlen_k = coin(0.3) ? c.seqlen_q : length();
    }
    switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
        case 0: break;
        case 1: c.causal = true; break;
        case 2:
            c.window_left = coin(0.7) ? std::uniform_int_distribution<int>(0, 100)(rng) : -1;
            c.window_right = coin(0.7) ? std::uniform_int_distribution<int>(0, 100)(rng) : -1;
            break;
        case 3:
            c.causal = true;
            c.window_left = std::uniform_int_distribution<int>(0, 100)(rng);
            break;
    }
    if (coin(0.3)) c.softcap = pick(rng, {1.0f, 10.0f, 50.0f});
    if (coin(0.3)) c.alibi = pick(rng, {Alibi::per_head, Alibi::per_batch_head});
    if (coin(0.3)) {
        c.dropout_p = pick(rng, {0.1f, 0.3f, 0.7f});
        c.seed = rng();
        c.offset = rng();
    }
    const bool packable = c.nheads == c.nheads_k && c.head_dim_v == 0 && c.seqlens_q == c.seqlens_k &&
                          c.seqlen_q == c.seqlen_k && c.seqused_k.empty();
    c.layout = packable && coin(0.5) ? Layout::packed_qkv : (coin(0.3) ? Layout::row_padding : Layout::contiguous);
    c.attn_probs = coin(0.5);
    c.softmax_d = true;
    c.data_seed = rng();
    return c;
}

TEST(ReferenceSweep, ForwardAndBackward) {
    std::mt19937_64 rng(kSweepSeed);
    for (int i = 0; i < kSweepCases; ++i) {
        SCOPED_TRACE(::testing::Message() << "sweep case " << i);
        const ProblemConfig c = random_config(rng);
        check_forward(c);
        check_backward(c);
    }
}

}  // namespace
}  // namespace flashattn::testing
