// Exact overlap tests of strided views: whether sum_i c_i x_i lands in a target interval, each x_i ranging over
// an interval, by a depth-first search that bounds each variable with what the remaining ones can still reach.
#include "api/overlap.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "api/tensor_checks.h"

namespace flashattn::api {

namespace {

using Wide = __int128;

// Past this many search steps the answer is "may overlap": layouts that need more are not real tensor layouts.
constexpr int64_t kMaxSearchSteps = 1 << 16;

struct Term {
    Wide coef;     // bytes per unit of x
    Wide lo, hi;   // x in [lo, hi]
};

Wide floor_div(Wide a, Wide b) {  // b > 0
    Wide q = a / b;
    if ((a % b != 0) && (a < 0)) --q;
    return q;
}
Wide ceil_div(Wide a, Wide b) { return -floor_div(-a, b); }

class Search {
  public:
    // Does sum_i coef_i x_i + base fall in [target_lo, target_hi] for some x (with some x_i != 0 if `nonzero`)?
    Search(std::vector<Term> terms, Wide base, Wide target_lo, Wide target_hi, bool nonzero)
        : terms_(std::move(terms)), base_(base), lo_(target_lo), hi_(target_hi), nonzero_(nonzero) {
        for (const Term& t : terms_)
            if (t.lo == t.hi) base_ += t.coef * t.lo;  // a fixed variable only shifts the sum
        terms_.erase(std::remove_if(terms_.begin(), terms_.end(), [](const Term& t) { return t.coef == 0 || t.lo == t.hi; }),
                     terms_.end());
        std::sort(terms_.begin(), terms_.end(), [](const Term& a, const Term& b) { return abs(a.coef) > abs(b.coef); });
        min_rest_.assign(terms_.size() + 1, 0);
        max_rest_.assign(terms_.size() + 1, 0);
        for (size_t i = terms_.size(); i-- > 0;) {
            const Wide a = terms_[i].coef * terms_[i].lo, b = terms_[i].coef * terms_[i].hi;
            min_rest_[i] = min_rest_[i + 1] + std::min(a, b);
            max_rest_[i] = max_rest_[i + 1] + std::max(a, b);
        }
    }

    bool found() { return visit(0, base_, false); }

  private:
    static Wide abs(Wide v) { return v < 0 ? -v : v; }

    bool visit(size_t i, Wide sum, bool any_nonzero) {
        if (++steps_ > kMaxSearchSteps) return true;
        if (i == terms_.size()) return sum >= lo_ && sum <= hi_ && (any_nonzero || !nonzero_);
        if (sum + min_rest_[i] > hi_ || sum + max_rest_[i] < lo_) return false;
        // coef * x must lie in [need_lo, need_hi] for the remaining terms to be able to finish the sum.
        const Term& t = terms_[i];
        const Wide need_lo = lo_ - sum - max_rest_[i + 1], need_hi = hi_ - sum - min_rest_[i + 1];
        Wide x_lo, x_hi;
        if (t.coef > 0) {
            x_lo = ceil_div(need_lo, t.coef);
            x_hi = floor_div(need_hi, t.coef);
        } else {
            x_lo = ceil_div(-need_hi, -t.coef);
            x_hi = floor_div(-need_lo, -t.coef);
        }
        x_lo = std::max(x_lo, t.lo);
        x_hi = std::min(x_hi, t.hi);
        for (Wide x = x_lo; x <= x_hi; ++x) {
            if (visit(i + 1, sum + t.coef * x, any_nonzero || x != 0)) return true;
            if (steps_ > kMaxSearchSteps) return true;
        }
        return false;
    }

    std::vector<Term> terms_;
    Wide base_, lo_, hi_;
    bool nonzero_;
    std::vector<Wide> min_rest_, max_rest_;
    int64_t steps_ = 0;
};

Wide elem_bytes(const TensorView& t) { return static_cast<Wide>(dtype_size(t.dtype)); }
Wide abs_stride(const TensorView& t, int d) { return t.stride[d] < 0 ? -Wide(t.stride[d]) : Wide(t.stride[d]); }

// The common layouts without the search (and its allocations), which every call's outputs meet: dimensions taken by
// growing stride, each stride beyond the farthest element offset of the dimensions before it (row-major, and any
// permutation or padding of it). Then an element's offset determines its index, and no two elements meet.
bool nested_strides(const TensorView& t) {
    int order[kMaxDims];
    int n = 0;
    for (int d = 0; d < t.ndim; ++d)
        if (t.shape[d] > 1) order[n++] = d;
    // By growing stride; an insertion sort, as there are at most kMaxDims (std::sort's path for long ranges, never
    // taken here, drew an array-bounds warning on this fixed array).
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && abs_stride(t, order[j]) < abs_stride(t, order[j - 1]); --j)
            std::swap(order[j], order[j - 1]);
    Wide reach = 0;  // the farthest element offset of the dimensions taken so far
    for (int i = 0; i < n; ++i) {
        const Wide stride = abs_stride(t, order[i]);
        if (stride <= reach) return false;
        reach += stride * Wide(t.shape[order[i]] - 1);
    }
    return true;
}

}  // namespace

bool may_overlap(const TensorView& a, const TensorView& b) {
    const ByteSpan sa = byte_span(a), sb = byte_span(b);
    if (sa.begin == sa.end || sb.begin == sb.end) return false;
    if (sa.end <= sb.begin || sb.end <= sa.begin) return false;
    // Element x of a starts at address_a + sum coef_a x; it shares a byte with element y of b iff
    // -(elem_a - 1) <= start_a - start_b <= elem_b - 1.
    std::vector<Term> terms;
    for (int d = 0; d < a.ndim; ++d) terms.push_back({Wide(a.stride[d]) * elem_bytes(a), 0, Wide(a.shape[d] - 1)});
    for (int d = 0; d < b.ndim; ++d) terms.push_back({-Wide(b.stride[d]) * elem_bytes(b), 0, Wide(b.shape[d] - 1)});
    const Wide base = Wide(sa.begin) - Wide(sb.begin);
    return Search(std::move(terms), base, -(elem_bytes(a) - 1), elem_bytes(b) - 1, false).found();
}

bool self_overlaps(const TensorView& t) {
    if (t.numel() <= 1) return false;
    if (nested_strides(t)) return false;
    // Two elements x != y overlap iff sum stride (x - y) * elem lies within (-elem, elem).
    std::vector<Term> terms;
    for (int d = 0; d < t.ndim; ++d) {
        const Wide reach = t.shape[d] - 1;
        if (t.stride[d] == 0 && reach > 0) return true;  // broadcast
        terms.push_back({Wide(t.stride[d]) * elem_bytes(t), -reach, reach});
    }
    return Search(std::move(terms), 0, -(elem_bytes(t) - 1), elem_bytes(t) - 1, true).found();
}

}  // namespace flashattn::api
