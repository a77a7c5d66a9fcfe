// Owning host tensors for tests: random fill (never zeros), poison, element access as double, error metrics.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::testing {

// A contiguous host tensor of any flashattn dtype, storage in bytes.
class HostTensor {
  public:
    HostTensor() = default;
    HostTensor(DType dtype, std::vector<int64_t> shape);

    DType dtype() const { return dtype_; }
    const std::vector<int64_t>& shape() const { return shape_; }
    int64_t numel() const { return numel_; }
    void* data() { return bytes_.data(); }
    const void* data() const { return bytes_.data(); }
    size_t nbytes() const { return bytes_.size(); }

    // A view of this tensor (contiguous strides).
    TensorView view();

    // Element i (flat index) as double / set from double (rounded to the dtype).
    double get(int64_t i) const;
    void set(int64_t i, double value);

    // Fill with N(mean, stddev) values rounded to the dtype; a fixed generator keeps tests reproducible.
    void fill_normal(std::mt19937_64& rng, double mean = 0.0, double stddev = 1.0);
    void fill_uniform(std::mt19937_64& rng, double lo, double hi);
    // Write a NaN (floating types) or 0x7fffffff pattern (i32) everywhere: unwritten elements stay visible.
    void poison();
    bool has_poison_or_nan() const;

    // The same values in another dtype (rounded).
    HostTensor to(DType dtype) const;

  private:
    DType dtype_ = DType::f32;
    std::vector<int64_t> shape_;
    int64_t numel_ = 0;
    std::vector<unsigned char> bytes_;
};

// A paged cache's block table (i32, any shape): distinct blocks of a pool of `blocks` in random order (a permutation
// of [0, blocks) cut to the table's size; blocks >= the table's elements).
void fill_random_block_table(HostTensor& table, int64_t blocks, std::mt19937_64& rng);
// ALiBi slopes (f32, one a query head): 2^(-8 (h + 1) / heads), the usual geometric set.
void fill_alibi_slopes(HostTensor& slopes);

// Error of `got` against `ref` (same numel): max |got - ref|, and ||got - ref|| / ||ref||.
struct ErrorStats {
    double max_abs = 0.0;
    double rel_l2 = 0.0;
    int64_t nonfinite = 0;  // elements of got that are NaN / inf where ref is finite
    std::string str() const;
};
ErrorStats compare(const HostTensor& got, const HostTensor& ref);

// The tolerance rule: the candidate's error against the reference may be at most 2x the error of a plain
// same-precision implementation against the same reference, plus a small absolute slack.
constexpr double kToleranceFactor = 2.0;
constexpr double kAbsoluteSlack = 1e-5;
bool within_tolerance(const ErrorStats& candidate, const ErrorStats& baseline);

}  // namespace flashattn::testing
