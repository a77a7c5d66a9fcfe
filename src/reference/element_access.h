// Reading and writing tensor elements of any params dtype from the CPU reference, and where each row lives.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/numeric.h"
#include "common/params.h"

namespace flashattn::reference {

inline double read_elem(ElemType t, const void* base, int64_t off) {
    const unsigned char* p = static_cast<const unsigned char*>(base);
    switch (t) {
        case ElemType::f16: { uint16_t h; std::memcpy(&h, p + 2 * off, 2); return half_to_float(h); }
        case ElemType::bf16: { uint16_t h; std::memcpy(&h, p + 2 * off, 2); return bf16_to_float(h); }
        case ElemType::f32: { float f; std::memcpy(&f, p + 4 * off, 4); return f; }
        case ElemType::f64: { double d; std::memcpy(&d, p + 8 * off, 8); return d; }
    }
    return 0.0;
}

inline void write_elem(ElemType t, void* base, int64_t off, double v) {
    unsigned char* p = static_cast<unsigned char*>(base);
    switch (t) {
        case ElemType::f16: { const uint16_t h = float_to_half(static_cast<float>(v)); std::memcpy(p + 2 * off, &h, 2); break; }
        case ElemType::bf16: { const uint16_t h = float_to_bf16(static_cast<float>(v)); std::memcpy(p + 2 * off, &h, 2); break; }
        case ElemType::f32: { const float f = static_cast<float>(v); std::memcpy(p + 4 * off, &f, 4); break; }
        case ElemType::f64: std::memcpy(p + 8 * off, &v, 8); break;
    }
}

// The value as it would be stored in dtype t (rounded), e.g. a rotated key before it is attended to.
inline double round_to(ElemType t, double v) {
    switch (t) {
        case ElemType::f16: return half_to_float(float_to_half(static_cast<float>(v)));
        case ElemType::bf16: return bf16_to_float(float_to_bf16(static_cast<float>(v)));
        case ElemType::f32: return static_cast<float>(v);
        case ElemType::f64: return v;
    }
    return v;
}

// A dense row-major matrix of accumulator values: the converted rows of one (sequence, head).
template <class Acc>
struct Rows {
    int64_t n = 0, dim = 0;
    std::vector<Acc> data;
    void resize(int64_t rows, int64_t cols) {
        n = rows;
        dim = cols;
        data.assign(static_cast<size_t>(rows * cols), Acc(0));
    }
    Acc* row(int64_t i) { return data.data() + i * dim; }
    const Acc* row(int64_t i) const { return data.data() + i * dim; }
};

// Where sequence b lives and how long it is (padded or varlen; kv-cache sequences are handled in kvcache.cpp).
struct SeqExtent {
    int64_t q_row0 = 0, k_row0 = 0;  // varlen: first row in the packed tensors; padded: 0
    int64_t seqlen_q = 0, seqlen_k = 0;
    int64_t k_rows = 0;  // rows of k/v the sequence occupies (varlen: may exceed seqlen_k = seqused_k)
};

inline SeqExtent seq_extent(const AttnParams& p, int b) {
    SeqExtent s;
    if (p.is_varlen) {
        s.q_row0 = p.cu_seqlens_q[b];
        s.k_row0 = p.cu_seqlens_k[b];
        s.seqlen_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
        s.k_rows = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
        s.seqlen_k = p.seqused_k ? p.seqused_k[b] : s.k_rows;
    } else {
        s.seqlen_q = p.seqlen_q;
        s.k_rows = p.seqlen_k;
        s.seqlen_k = p.seqused_k ? p.seqused_k[b] : p.seqlen_k;
    }
    return s;
}

// Element offset of (batch b, absolute row, head h) in a tensor with the given strides.
inline int64_t row_offset(int64_t batch_stride, int64_t row_stride, int64_t head_stride, int b, int64_t row, int h) {
    return b * batch_stride + row * row_stride + h * head_stride;
}

// Convert `count` rows starting at absolute row `row0` of (b, h) into `out` (dim columns).
template <class Acc>
void load_rows(Rows<Acc>& out, ElemType t, const void* base, int64_t bs, int64_t rs, int64_t hs, int b, int h,
               int64_t row0, int64_t count, int64_t dim) {
    out.resize(count, dim);
    for (int64_t i = 0; i < count; ++i) {
        const int64_t off = row_offset(bs, rs, hs, b, row0 + i, h);
        Acc* dst = out.row(i);
        for (int64_t d = 0; d < dim; ++d) dst[d] = static_cast<Acc>(read_elem(t, base, off + d));
    }
}

}  // namespace flashattn::reference
