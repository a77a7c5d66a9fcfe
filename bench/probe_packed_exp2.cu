// Probe: what ptxas makes of the packed exponentials on sm_90a (bench/NOTES_sm90.md, "Packed exponentials").
//
// Question it answers: would ex2.approx on bf16x2 / f16x2 pairs halve the special-function unit's instructions of the
// forward's softmax? Build and read the SASS (nvcc 13.0 gives two MUFU.EX2.BF16 / .F16 and a PRMT per packed ex2):
//   nvcc -arch=sm_90a -cubin -o /tmp/probe_exp2.cubin bench/probe_packed_exp2.cu && cuobjdump -sass /tmp/probe_exp2.cubin
#include <cstdint>

__global__ void packed_exp2(const uint32_t* in, uint32_t* out, const float* in_f32, float* out_f32) {
    const uint32_t x = in[threadIdx.x];
    uint32_t bf16_pair, f16_pair;
    asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(bf16_pair) : "r"(x));
    asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(f16_pair) : "r"(x));
    out[threadIdx.x] = bf16_pair ^ f16_pair;
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(in_f32[threadIdx.x]));  // the unpacked form, to compare
    out_f32[threadIdx.x] = y;
}
