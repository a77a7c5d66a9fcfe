// The checks most reference tests are made of: run the tiled reference on a fresh problem (outputs poisoned) and
// compare every output with the naive fp64 attention.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <vector>

#include "reference/attention_problem.h"
#include "reference/reference.h"

namespace flashattn::testing {

constexpr reference::Accum kBothAccums[] = {reference::Accum::f32, reference::Accum::f64};

// Values of an fp32 HostTensor (LSE, probabilities) in order.
std::vector<double> values(const HostTensor& t);

// True when every storage element of t outside its view is still poison (NaN): nothing wrote out of bounds.
::testing::AssertionResult gaps_untouched(const StridedTensor& t, const std::string& what);

// Forward (padded or varlen) vs naive: out, LSE, and probabilities when the config asks for them.
void check_forward(const ProblemConfig& cfg, reference::Accum acc);
void check_forward(const ProblemConfig& cfg);  // both accumulators

// Backward vs naive on the out / LSE of a reference forward: dq, dk, dv, and softmax_d when asked.
void check_backward(const ProblemConfig& cfg, reference::Accum acc);
void check_backward(const ProblemConfig& cfg);  // both accumulators

}  // namespace flashattn::testing
