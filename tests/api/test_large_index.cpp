// 64-bit indexing: tensors whose batch stride lies past 2^31 elements. The views live in a sparse anonymous
// mapping of several GiB (MAP_NORESERVE): only the pages the call touches get memory.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

#include "api/api_fixtures.h"

namespace flashattn::testing {
namespace {

// A private anonymous mapping, unmapped on destruction.
class SparseRegion {
  public:
    explicit SparseRegion(size_t bytes) : bytes_(bytes) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        data_ = p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
    }
    ~SparseRegion() {
        if (data_) munmap(data_, bytes_);
    }
    SparseRegion(const SparseRegion&) = delete;
    SparseRegion& operator=(const SparseRegion&) = delete;
    unsigned char* data() const { return data_; }

  private:
    size_t bytes_;
    unsigned char* data_ = nullptr;
};

TEST(ApiLargeIndex, BatchStridePast2To31Elements) {
    constexpr int64_t kBatch = 2, kSeqQ = 3, kSeqK = 4, kHeads = 1, kDim = 8;
    // Every tensor's batch stride; the four tensors sit at different offsets within each batch's slot.
    constexpr int64_t kBatchStride = (int64_t{1} << 31) + 4096;
    constexpr int64_t kSlot = 1024;  // elements between tensors within a batch
    const size_t bytes = static_cast<size_t>(kBatchStride + 4 * kSlot) * sizeof(uint16_t);
    SparseRegion region(bytes);
    if (!region.data()) GTEST_SKIP() << "could not map " << bytes << " bytes of address space";
    uint16_t* base = reinterpret_cast<uint16_t*>(region.data());

    DenseProblem dense(DenseShape{kBatch, kSeqQ, kSeqK, kHeads, kHeads, kDim, kDim}, DType::f16);
    auto far_view = [&](int slot, int64_t rows) {
        return make_strided_view(base + slot * kSlot, DType::f16, {kBatch, rows, kHeads, kDim},
                                 {kBatchStride, kHeads * kDim, kDim, 1});
    };
    ForwardArgs far;
    far.q = far_view(0, kSeqQ);
    far.k = far_view(1, kSeqK);
    far.v = far_view(2, kSeqK);
    far.out = far_view(3, kSeqQ);
    // Copy the dense inputs in (batch b of each tensor at b * kBatchStride).
    const HostTensor* inputs[] = {&dense.q, &dense.k, &dense.v};
    for (int t = 0; t < 3; ++t) {
        const int64_t rows = t == 0 ? kSeqQ : kSeqK, per_batch = rows * kHeads * kDim;
        for (int64_t b = 0; b < kBatch; ++b)
            std::memcpy(base + t * kSlot + b * kBatchStride,
                        static_cast<const uint16_t*>(inputs[t]->data()) + b * per_batch, per_batch * sizeof(uint16_t));
    }

    forward(dense.forward_args());
    forward(far);

    const int64_t per_batch = kSeqQ * kHeads * kDim;
    for (int64_t b = 0; b < kBatch; ++b)
        EXPECT_EQ(std::memcmp(base + 3 * kSlot + b * kBatchStride,
                              static_cast<const uint16_t*>(dense.out.data()) + b * per_batch, per_batch * sizeof(uint16_t)),
                  0)
            << "batch " << b;
}

}  // namespace
}  // namespace flashattn::testing
