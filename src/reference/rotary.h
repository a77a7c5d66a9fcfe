// Rotary position embedding of the kv-cache forward, applied to a row of head_dim values.
//
// Only the first rotary_dim channels rotate, in rotary_dim / 2 pairs; pair c turns by the angle whose cosine and
// sine are row `pos` of the (seqlen_ro, rotary_dim / 2) tables:
//   interleaved (GPT-J):      pairs (2c, 2c + 1)
//   not interleaved (NeoX):   pairs (c, c + rotary_dim / 2)
//   x0' = x0 cos - x1 sin,  x1' = x0 sin + x1 cos
// The rotation runs in double whatever the accumulator, then each result is rounded to the params dtype, as it
// would be when stored (the rotated keys are written to the cache; the kernels round the rotated queries too).
// Doing it in one fixed precision makes the rotated cache entries independent of the accumulator type.
#pragma once

#include <cstdint>
#include <vector>

#include "common/params.h"
#include "reference/element_access.h"

namespace flashattn::reference {

class Rotary {
  public:
    explicit Rotary(const AttnParams& p)
        : p_(p), half_(p.rotary_dim / 2), cos_(static_cast<size_t>(half_)), sin_(static_cast<size_t>(half_)) {}

    bool enabled() const { return p_.rotary_dim > 0 && p_.rotary_cos && p_.rotary_sin; }

    // Rotates x[0, rotary_dim) in place at position pos.
    template <class Acc>
    void rotate(Acc* x, int64_t pos) {
        if (!enabled()) return;
        read_row(p_.dtype, p_.rotary_cos, pos * half_, half_, cos_.data());
        read_row(p_.dtype, p_.rotary_sin, pos * half_, half_, sin_.data());
        for (int64_t c = 0; c < half_; ++c) {
            const int64_t i0 = p_.rotary_interleaved ? 2 * c : c;
            const int64_t i1 = p_.rotary_interleaved ? 2 * c + 1 : c + half_;
            const double x0 = static_cast<double>(x[i0]), x1 = static_cast<double>(x[i1]);
            const double cs = cos_[static_cast<size_t>(c)], sn = sin_[static_cast<size_t>(c)];
            x[i0] = static_cast<Acc>(round_to(p_.dtype, x0 * cs - x1 * sn));
            x[i1] = static_cast<Acc>(round_to(p_.dtype, x0 * sn + x1 * cs));
        }
    }

  private:
    const AttnParams& p_;
    int64_t half_;
    std::vector<double> cos_, sin_;
};

}  // namespace flashattn::reference
