// The reference merge of two attention results over disjoint keys (flashattn.h, MergeArgs), in double.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/element_access.h"
#include "reference/reference.h"

namespace flashattn::reference {

void merge(const AttnParams& p) {
    const int64_t dv = p.head_dim_v;
    std::vector<double> a(static_cast<size_t>(dv)), b(static_cast<size_t>(dv)), out(static_cast<size_t>(dv));
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t batch = 0; batch < p.batch; ++batch)
        for (int64_t h = 0; h < p.nheads; ++h)
            for (int64_t i = 0; i < p.seqlen_q; ++i) {
                const int64_t lse_at = batch * p.lse_batch_stride + h * p.lse_head_stride + i;
                // +inf marks a part that saw no key: it weighs nothing, like -inf would.
                double lse[2];
                for (int part = 0; part < 2; ++part) {
                    const double v = p.part_lse[part][lse_at];
                    lse[part] = v == inf ? -inf : v;
                }
                const double top = std::max(lse[0], lse[1]);
                const bool empty = top == -inf;
                const double w0 = empty ? 0.0 : std::exp(lse[0] - top), w1 = empty ? 0.0 : std::exp(lse[1] - top);
                const double total = w0 + w1;
                auto row = [&](int part) {
                    return batch * p.part_out_batch_stride[part] + i * p.part_out_row_stride[part] +
                           h * p.part_out_head_stride[part];
                };
                read_row(p.dtype, p.part_out[0], row(0), dv, a.data());
                read_row(p.dtype, p.part_out[1], row(1), dv, b.data());
                for (int64_t c = 0; c < dv; ++c)
                    out[static_cast<size_t>(c)] = empty ? 0.0 : (w0 * a[static_cast<size_t>(c)] + w1 * b[static_cast<size_t>(c)]) / total;
                write_row(p.dtype, p.out, batch * p.out_batch_stride + i * p.out_row_stride + h * p.out_head_stride,
                          dv, out.data());
                if (p.softmax_lse) p.softmax_lse[lse_at] = empty ? INFINITY : static_cast<float>(top + std::log(total));
            }
}

}  // namespace flashattn::reference
