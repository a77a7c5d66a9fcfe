// The exact overlap test of strided views used by the aliasing rule.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace flashattn
