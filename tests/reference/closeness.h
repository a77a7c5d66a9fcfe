// Element-wise comparison of a result against an fp64 oracle, with tolerances derived from the storage dtype and
// the accumulator type rather than picked per test.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "reference/reference.h"

namespace flashattn::testing {

// got[i] passes when |got[i] - want[i]| <= rel * |want[i]| + abs_of_max * max_i |want[i]|: `rel` covers the
// rounding of each stored element, `abs_of_max` the accumulation error, which scales with the magnitudes summed,
// not with the (possibly tiny) element. An infinite want must be matched exactly; a NaN never passes.
struct Tolerance {
    double rel = 0.0;
    double abs_of_max = 0.0;
};

// For values stored in `dtype` and computed with accumulator `acc`.
Tolerance output_tolerance(DType dtype, reference::Accum acc);
// For fp32 side outputs (LSE, softmax_d, probabilities) computed with accumulator `acc`.
Tolerance fp32_tolerance(reference::Accum acc);
// For gradients: longer sums (over keys and query heads) than the forward's, so a looser accumulation term.
Tolerance gradient_tolerance(DType dtype, reference::Accum acc);

::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                     Tolerance tol, const std::string& what);

// True when no element is NaN (poison left unwritten).
::testing::AssertionResult fully_written(const std::vector<double>& got, const std::string& what);

}  // namespace flashattn::testing
