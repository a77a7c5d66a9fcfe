// Dropout: the Philox generator against published test vectors, the kept fraction against the binomial law, and
// the mask as a pure function of (seed, offset, batch, head, row, column).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/philox.h"
#include "reference/attention_problem.h"
#include "reference/reference.h"

namespace flashattn::testing {
namespace {

// How many standard deviations of the binomial count the kept count may stray: a false alarm is ~1e-6 likely.
constexpr double kBinomialSigmas = 5.0;

// Philox4x32-10 known answers from Random123's kat_vectors.
TEST(ReferenceDropout, PhiloxKnownAnswers) {
    const Philox4 zero = philox4x32_10(Philox4{0, 0, 0, 0}, 0, 0);
    EXPECT_EQ(zero.x, 0x6627e8d5u);
    EXPECT_EQ(zero.y, 0xe169c58du);
    EXPECT_EQ(zero.z, 0xbc57ac4cu);
    EXPECT_EQ(zero.w, 0x9b00dbd8u);
    const Philox4 ones = philox4x32_10(Philox4{~0u, ~0u, ~0u, ~0u}, ~0u, ~0u);
    EXPECT_EQ(ones.x, 0x408f276du);
    EXPECT_EQ(ones.y, 0x41c83b0eu);
    EXPECT_EQ(ones.z, 0xa20bc7c6u);
    EXPECT_EQ(ones.w, 0x6d5451fdu);
}

ProblemConfig dropout_problem(float p, uint64_t seed, uint64_t offset) {
    ProblemConfig c;
    c.dtype = DType::f32;
    c.batch = 2;
    c.nheads = c.nheads_k = 4;
    c.head_dim = 16;
    c.seqlen_q = c.seqlen_k = 200;
    c.dropout_p = p;
    c.seed = seed;
    c.offset = offset;
    c.attn_probs = true;
    return c;
}

// The kept/dropped pattern of every (batch, head, row, col), read from the signs of attn_probs (no mask here, so
// every probability is nonzero).
std::vector<bool> kept_mask(const ProblemConfig& cfg) {
    Problem prob(cfg);
    reference::forward(prob.params(OpKind::forward));
    std::vector<bool> kept(static_cast<size_t>(prob.probs.numel()));
    for (int64_t i = 0; i < prob.probs.numel(); ++i) {
        const double v = prob.probs.get(i);
        EXPECT_NE(v, 0.0);
        kept[static_cast<size_t>(i)] = v > 0;
    }
    return kept;
}

double fraction_differing(const std::vector<bool>& a, const std::vector<bool>& b) {
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
    return static_cast<double>(differ) / static_cast<double>(a.size());
}

TEST(ReferenceDropout, KeptFractionIsBinomial) {
    for (float p : {0.1f, 0.17f, 0.5f, 0.9f}) {
        const std::vector<bool> kept = kept_mask(dropout_problem(p, 42, 0));
        const double n = static_cast<double>(kept.size());
        const double q = dropout_keep_threshold(p) / 65536.0;  // the quantised keep probability
        double count = 0;
        for (bool k : kept) count += k;
        EXPECT_NEAR(count, n * q, kBinomialSigmas * std::sqrt(n * q * (1 - q))) << "p=" << p;
    }
}

TEST(ReferenceDropout, SameSeedAndOffsetReproduce) {
    const ProblemConfig cfg = dropout_problem(0.3f, 7, 3);
    Problem a(cfg), b(cfg);
    reference::forward(a.params(OpKind::forward));
    reference::forward(b.params(OpKind::forward));
    ASSERT_EQ(a.out.storage->nbytes(), b.out.storage->nbytes());
    EXPECT_EQ(std::memcmp(a.out.storage->data(), b.out.storage->data(), a.out.storage->nbytes()), 0);
    EXPECT_EQ(std::memcmp(a.probs.data(), b.probs.data(), a.probs.nbytes()), 0);
}

TEST(ReferenceDropout, SeedAndOffsetChangeTheMask) {
    const float p = 0.3f;
    const double q = 1.0 - p;
    // Two independent masks differ in a fraction 2q(1-q) of the entries; allow a wide margin below it.
    const double expected = 2 * q * (1 - q), floor = 0.8 * expected;
    const std::vector<bool> base = kept_mask(dropout_problem(p, 7, 3));
    const uint64_t high = uint64_t(1) << 32;
    EXPECT_GT(fraction_differing(base, kept_mask(dropout_problem(p, 8, 3))), floor) << "seed";
    EXPECT_GT(fraction_differing(base, kept_mask(dropout_problem(p, 7 + high, 3))), floor) << "seed high half";
    EXPECT_GT(fraction_differing(base, kept_mask(dropout_problem(p, 7, 4))), floor) << "offset";
    EXPECT_GT(fraction_differing(base, kept_mask(dropout_problem(p, 7, 3 + high))), floor) << "offset high half";
}

TEST(ReferenceDropout, MaskDiffersAcrossHeadsAndBatches) {
    // Every (batch, head) must draw its own mask: compare the first head's mask with every other one's.
    const ProblemConfig cfg = dropout_problem(0.5f, 99, 0);
    const std::vector<bool> kept = kept_mask(cfg);
    const size_t per_head = static_cast<size_t>(cfg.seqlen_q) * cfg.seqlen_k;
    const std::vector<bool> first(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(per_head));
    for (size_t bh = 1; bh < kept.size() / per_head; ++bh) {
        const std::vector<bool> other(kept.begin() + static_cast<std::ptrdiff_t>(bh * per_head),
                                      kept.begin() + static_cast<std::ptrdiff_t>((bh + 1) * per_head));
        EXPECT_GT(fraction_differing(first, other), 0.4) << "batch*head " << bh;
    }
}

}  // namespace
}  // namespace flashattn::testing
