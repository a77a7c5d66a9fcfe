#include "support/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "common/numeric.h"

namespace flashattn::testing {

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
    if (shape_.empty() || shape_.size() > static_cast<size_t>(kMaxDims)) throw std::invalid_argument("HostTensor rank");
    numel_ = 1;
    for (int64_t s : shape_) numel_ *= s;
    bytes_.assign(static_cast<size_t>(numel_) * dtype_size(dtype_), 0);
}

TensorView HostTensor::view() {
    TensorView t;
    t.data = bytes_.empty() ? nullptr : bytes_.data();
    t.dtype = dtype_;
    t.device = DeviceType::cpu;
    t.ndim = static_cast<int32_t>(shape_.size());
    int64_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
        t.shape[d] = shape_[d];
        t.stride[d] = stride;
        stride *= shape_[d];
    }
    return t;
}

double HostTensor::get(int64_t i) const {
    const unsigned char* p = bytes_.data();
    switch (dtype_) {
        case DType::f16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return half_to_float(h); }
        case DType::bf16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return bf16_to_float(h); }
        case DType::f32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
        case DType::f64: { double d; std::memcpy(&d, p + 8 * i, 8); return d; }
        case DType::i32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    }
    return 0.0;
}

void HostTensor::set(int64_t i, double value) {
    unsigned char* p = bytes_.data();
    switch (dtype_) {
        case DType::f16: { uint16_t h = float_to_half(static_cast<float>(value)); std::memcpy(p + 2 * i, &h, 2); break; }
        case DType::bf16: { uint16_t h = float_to_bf16(static_cast<float>(value)); std::memcpy(p + 2 * i, &h, 2); break; }
        case DType::f32: { float f = static_cast<float>(value); std::memcpy(p + 4 * i, &f, 4); break; }
        case DType::f64: std::memcpy(p + 8 * i, &value, 8); break;
        case DType::i32: { int32_t v = static_cast<int32_t>(value); std::memcpy(p + 4 * i, &v, 4); break; }
    }
}

void HostTensor::fill_normal(std::mt19937_64& rng, double mean, double stddev) {
    std::normal_distribution<double> dist(mean, stddev);
    for (int64_t i = 0; i < numel_; ++i) set(i, dist(rng));
}

void HostTensor::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < numel_; ++i) set(i, dist(rng));
}

void fill_random_block_table(HostTensor& table, int64_t blocks, std::mt19937_64& rng) {
    if (table.dtype() != DType::i32 || table.numel() > blocks)
        throw std::invalid_argument("fill_random_block_table: an i32 table of at most `blocks` elements");
    std::vector<int32_t> order(static_cast<size_t>(blocks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::copy_n(order.begin(), table.numel(), static_cast<int32_t*>(table.data()));
}

void fill_alibi_slopes(HostTensor& slopes) {
    const int64_t heads = slopes.numel();
    for (int64_t h = 0; h < heads; ++h) slopes.set(h, std::exp2(-8.0 * double(h + 1) / double(heads)));
}

void HostTensor::poison() {
    for (int64_t i = 0; i < numel_; ++i) {
        if (dtype_ == DType::i32) set(i, std::numeric_limits<int32_t>::max());
        else set(i, std::numeric_limits<double>::quiet_NaN());
    }
}

bool HostTensor::has_poison_or_nan() const {
    for (int64_t i = 0; i < numel_; ++i) {
        const double v = get(i);
        if (std::isnan(v) || (dtype_ == DType::i32 && v == std::numeric_limits<int32_t>::max())) return true;
    }
    return false;
}

HostTensor HostTensor::to(DType dtype) const {
    HostTensor r(dtype, shape_);
    for (int64_t i = 0; i < numel_; ++i) r.set(i, get(i));
    return r;
}

std::string ErrorStats::str() const {
    std::ostringstream os;
    os << "max_abs=" << max_abs << " rel_l2=" << rel_l2 << " nonfinite=" << nonfinite;
    return os.str();
}

ErrorStats compare(const HostTensor& got, const HostTensor& ref) {
    if (got.numel() != ref.numel()) throw std::invalid_argument("compare: numel differs");
    ErrorStats e;
    double diff2 = 0.0, ref2 = 0.0;
    for (int64_t i = 0; i < got.numel(); ++i) {
        const double g = got.get(i), r = ref.get(i);
        if (std::isinf(r) && g == r) continue;  // e.g. +inf LSE of a fully masked row, matched exactly
        if (!std::isfinite(g) || !std::isfinite(r)) {
            ++e.nonfinite;
            continue;
        }
        const double d = std::fabs(g - r);
        e.max_abs = std::max(e.max_abs, d);
        diff2 += d * d;
        ref2 += r * r;
    }
    e.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    return e;
}

bool within_tolerance(const ErrorStats& candidate, const ErrorStats& baseline) {
    if (candidate.nonfinite != 0) return false;
    return candidate.max_abs <= kToleranceFactor * baseline.max_abs + kAbsoluteSlack &&
           candidate.rel_l2 <= kToleranceFactor * baseline.rel_l2 + kAbsoluteSlack;
}

}  // namespace flashattn::testing
