// The exact overlap test of strided views used by the aliasing rule.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "api/overlap.h"

namespace flashattn {
namespace {

TEST(ApiOverlap, DisjointBuffers) {
    std::vector<float> a(64), b(64);
    EXPECT_FALSE(api::may_overlap(make_view(a.data(), DType::f32, {64}), make_view(b.data(), DType::f32, {64})));
}

TEST(ApiOverlap, SameViewOverlaps) {
    std::vector<float> a(64);
    const TensorView v = make_view(a.data(), DType::f32, {4, 16});
    EXPECT_TRUE(api::may_overlap(v, v));
}

TEST(ApiOverlap, AdjacentHalvesDoNotOverlap) {
    std::vector<float> a(64);
    EXPECT_FALSE(api::may_overlap(make_view(a.data(), DType::f32, {32}), make_view(a.data() + 32, DType::f32, {32})));
    EXPECT_TRUE(api::may_overlap(make_view(a.data(), DType::f32, {33}), make_view(a.data() + 32, DType::f32, {32})));
}

TEST(ApiOverlap, InterleavedColumnsDoNotOverlap) {
    std::vector<float> a(64);  // (8, 8): even columns vs odd columns
    const TensorView even = make_strided_view(a.data(), DType::f32, {8, 4}, {8, 2});
    const TensorView odd = make_strided_view(a.data() + 1, DType::f32, {8, 4}, {8, 2});
    EXPECT_FALSE(api::may_overlap(even, odd));
    EXPECT_TRUE(api::may_overlap(even, make_strided_view(a.data() + 2, DType::f32, {8, 4}, {8, 2})));
}

TEST(ApiOverlap, ElementSizesAreCounted) {
    std::vector<double> a(8);  // a float view of the upper half of a double shares bytes with it
    const TensorView d = make_view(a.data(), DType::f64, {1});
    const TensorView f = make_view(reinterpret_cast<float*>(a.data()) + 1, DType::f32, {1});
    EXPECT_TRUE(api::may_overlap(d, f));
    EXPECT_FALSE(api::may_overlap(d, make_view(reinterpret_cast<float*>(a.data()) + 2, DType::f32, {1})));
}

TEST(ApiOverlap, EmptyViewsNeverOverlap) {
    std::vector<float> a(8);
    EXPECT_FALSE(api::may_overlap(make_view(a.data(), DType::f32, {0}), make_view(a.data(), DType::f32, {8})));
}

TEST(ApiOverlap, SelfOverlap) {
    std::vector<float> a(64);
    EXPECT_FALSE(api::self_overlaps(make_view(a.data(), DType::f32, {4, 16})));
    EXPECT_TRUE(api::self_overlaps(make_strided_view(a.data(), DType::f32, {4, 16}, {0, 1})));  // broadcast
    EXPECT_TRUE(api::self_overlaps(make_strided_view(a.data(), DType::f32, {4, 16}, {8, 1})));  // rows interleave
    EXPECT_FALSE(api::self_overlaps(make_strided_view(a.data(), DType::f32, {4, 8}, {16, 1})));
    EXPECT_FALSE(api::self_overlaps(make_strided_view(a.data(), DType::f32, {4, 4}, {1, 4})));  // transposed
}

// Every element's byte offsets, counted: do two elements of the view share a byte?
bool self_overlaps_by_enumeration(const TensorView& t) {
    const int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
    std::set<int64_t> bytes;
    int64_t index[kMaxDims] = {};
    for (int64_t i = 0; i < t.numel(); ++i) {
        int64_t offset = 0;
        for (int d = 0; d < t.ndim; ++d) offset += index[d] * t.stride[d];
        for (int64_t b = 0; b < elem; ++b)
            if (!bytes.insert(offset * elem + b).second) return true;
        for (int d = t.ndim - 1; d >= 0 && ++index[d] == t.shape[d]; --d) index[d] = 0;
    }
    return false;
}

// The layouts the fast path takes (strides nested by size) and those it leaves to the search (interleaved,
// broadcast, transposed, padded), against enumeration.
TEST(ApiOverlap, SelfOverlapAgreesWithEnumeration) {
    std::vector<float> a(1);
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int> rank(1, 4), extent(1, 4), stride(0, 12);
    for (int trial = 0; trial < 2000; ++trial) {
        const int n = rank(rng);
        TensorView v = make_view(a.data(), DType::f32, {1});
        v.ndim = n;
        for (int d = 0; d < n; ++d) v.shape[d] = extent(rng), v.stride[d] = stride(rng);
        EXPECT_EQ(api::self_overlaps(v), self_overlaps_by_enumeration(v)) << "trial " << trial;
    }
}

}  // namespace
}  // namespace flashattn
