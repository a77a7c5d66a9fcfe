#include "reference/closeness.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace flashattn::testing {

namespace {

// One unit in the last place, relative: a correctly rounded store is within half of it, and an accumulation
// error just below a rounding boundary can cost one more half.
constexpr double kUlpF16 = 0x1p-10, kUlpBf16 = 0x1p-7, kUlpF32 = 0x1p-23;

// Accumulation error relative to the largest magnitude, about 10x what the suite's problems show (up to 1000
// keys, head dim 256): fp32 sums reach ~1e-6; fp64 ones are limited by the fp32 values they share with the
// kernels (the ALiBi bias, computed in fp32 by common/mask.h, and the LSE, stored in fp32), ~2e-7.
constexpr double kAccumF32 = 1e-5, kAccumF64 = 1e-6;
constexpr double kGradientAccumF32 = 2e-5, kGradientAccumF64 = 2e-6;

double storage_ulp(DType dtype) {
    switch (dtype) {
        case DType::f16: return kUlpF16;
        case DType::bf16: return kUlpBf16;
        case DType::f32: return kUlpF32;
        default: return 0.0;
    }
}

}  // namespace

Tolerance output_tolerance(DType dtype, reference::Accum acc) {
    return Tolerance{storage_ulp(dtype), acc == reference::Accum::f32 ? kAccumF32 : kAccumF64};
}

Tolerance fp32_tolerance(reference::Accum acc) { return output_tolerance(DType::f32, acc); }

Tolerance gradient_tolerance(DType dtype, reference::Accum acc) {
    return Tolerance{storage_ulp(dtype), acc == reference::Accum::f32 ? kGradientAccumF32 : kGradientAccumF64};
}

::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol,
                                     const std::string& what) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure() << what << ": " << got.size() << " elements, expected " << want.size();
    double max_want = 0.0;
    for (double w : want)
        if (std::isfinite(w)) max_want = std::max(max_want, std::fabs(w));
    int64_t bad = 0, worst = -1;
    double worst_excess = 0.0, max_err = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], w = want[i];
        if (std::isinf(w) || std::isnan(g) || std::isinf(g)) {
            if (g != w) {  // a non-finite value where it should not be, or the wrong one
                ++bad;
                worst = static_cast<int64_t>(i);
                worst_excess = std::numeric_limits<double>::infinity();
            }
            continue;
        }
        const double err = std::fabs(g - w);
        const double allowed = tol.rel * std::fabs(w) + tol.abs_of_max * max_want;
        max_err = std::max(max_err, err);
        if (err > allowed) {
            ++bad;
            if (err - allowed > worst_excess || worst < 0) {
                worst = static_cast<int64_t>(i);
                worst_excess = err - allowed;
            }
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    std::ostringstream os;
    os << what << ": " << bad << " of " << got.size() << " elements out of tolerance (rel " << tol.rel
       << ", abs " << tol.abs_of_max << " x max " << max_want << "); max error " << max_err << "; worst at ["
       << worst << "]: got " << got[static_cast<size_t>(worst)] << ", expected " << want[static_cast<size_t>(worst)];
    return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult fully_written(const std::vector<double>& got, const std::string& what) {
    for (size_t i = 0; i < got.size(); ++i)
        if (std::isnan(got[i]))
            return ::testing::AssertionFailure() << what << ": element " << i << " of " << got.size()
                                                 << " is NaN (left unwritten?)";
    return ::testing::AssertionSuccess();
}

}  // namespace flashattn::testing
