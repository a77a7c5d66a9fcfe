// Tiles: the small dense matrices the reference computes on, and the block sizes that bound them.
//
// Like FlashAttention, the reference never holds a (seqlen_q, seqlen_k) matrix: scores exist one
// (kQueryBlock, kKeyBlock) tile at a time, so memory grows linearly with the sequence length.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace flashattn::reference {

// Query rows per tile. 64 matches the kernels' most common M tile, so the online-softmax rescaling happens at
// comparable boundaries; any value gives the same result up to rounding.
constexpr int64_t kQueryBlock = 64;
// Keys per tile; key tiles start at multiples of kKeyBlock, as the kernels' do.
constexpr int64_t kKeyBlock = 64;

// A row-major (rows, cols) matrix; reshape keeps the allocation, so a tile reused across blocks allocates once.
template <class Acc>
class Tile {
  public:
    void reshape(int64_t rows, int64_t cols) {
        rows_ = rows;
        cols_ = cols;
        const size_t need = static_cast<size_t>(rows * cols);
        if (data_.size() < need) data_.resize(need);
    }
    void fill(Acc value) { std::fill(data_.begin(), data_.begin() + static_cast<std::ptrdiff_t>(rows_ * cols_), value); }
    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    Acc* row(int64_t r) { return data_.data() + r * cols_; }
    const Acc* row(int64_t r) const { return data_.data() + r * cols_; }
    Acc& at(int64_t r, int64_t c) { return data_[static_cast<size_t>(r * cols_ + c)]; }
    Acc at(int64_t r, int64_t c) const { return data_[static_cast<size_t>(r * cols_ + c)]; }

  private:
    int64_t rows_ = 0, cols_ = 0;
    std::vector<Acc> data_;
};

// The first multiple of `block` at or below x (x >= 0).
inline int64_t align_down(int64_t x, int64_t block) { return x - x % block; }

// y[0, n) += a * x[0, n): the one inner loop of every tile product. Each y[c] sums its own terms in a fixed
// order, so the compiler may vectorise over c without changing a single bit of the result.
template <class Acc>
inline void axpy(Acc a, const Acc* x, Acc* y, int64_t n) {
    for (int64_t c = 0; c < n; ++c) y[c] += a * x[c];
}

}  // namespace flashattn::reference
