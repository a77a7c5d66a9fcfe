// Writing ForwardArgs::attn_probs on the GPU (tests at small sizes), from the forward's LSE.
#pragma once

#include "common/params.h"

namespace flashattn::kernels {

void launch_attn_probs(const AttnParams& p, const float* lse);

}  // namespace flashattn::kernels
