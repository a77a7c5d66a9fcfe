/* The C ABI from a C99 program linked against the shared library: the header compiles as C, the symbols are
 * exported, and a hand-computed attention comes back through it. Exit status 0 on success. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flashattn/flashattn_c.h"

#define HEAD_DIM 8

static int failures = 0;

static void check(int ok, const char* what) {
    if (!ok) {
        fprintf(stderr, "FAILED: %s (last error: %s)\n", what, flashattn_last_error());
        ++failures;
    }
}

int main(void) {
    float q[HEAD_DIM], k[2 * HEAD_DIM], v[2 * HEAD_DIM], out[HEAD_DIM], lse[1];
    const int64_t q_shape[4] = {1, 1, 1, HEAD_DIM};
    const int64_t kv_shape[4] = {1, 2, 1, HEAD_DIM};
    const int64_t lse_shape[3] = {1, 1, 1};
    flashattn_fwd_args args;
    flashattn_status status;
    double p1;
    int d;

    check(flashattn_abi_version() == FLASHATTN_ABI_VERSION, "ABI version");
    check(flashattn_version() != NULL && strlen(flashattn_version()) > 0, "version string");
    check(flashattn_doctor_report(NULL, 0) > 0, "doctor report length");

    /* An empty argument struct: q is missing. */
    check(flashattn_fwd_args_init(&args) == FLASHATTN_STATUS_OK && args.struct_size == sizeof args, "init");
    status = flashattn_forward(&args);
    check(status == FLASHATTN_STATUS_INVALID_ARGUMENT, "status of a call without q");
    check(strstr(flashattn_last_error(), "q: required") != NULL, "message of a call without q");

    /* One query, two keys: scores 0 and 2 (scale 1). */
    for (d = 0; d < HEAD_DIM; ++d) {
        q[d] = d == 0 ? 1.0f : 0.0f;
        k[d] = 0.0f;
        k[HEAD_DIM + d] = d == 0 ? 2.0f : 0.0f;
        v[d] = 1.0f;
        v[HEAD_DIM + d] = -1.0f;
    }
    flashattn_tensor_contiguous(&args.q, q, FLASHATTN_DTYPE_F32, 4, q_shape, FLASHATTN_DEVICE_CPU, 0);
    flashattn_tensor_contiguous(&args.k, k, FLASHATTN_DTYPE_F32, 4, kv_shape, FLASHATTN_DEVICE_CPU, 0);
    flashattn_tensor_contiguous(&args.v, v, FLASHATTN_DTYPE_F32, 4, kv_shape, FLASHATTN_DEVICE_CPU, 0);
    flashattn_tensor_contiguous(&args.out, out, FLASHATTN_DTYPE_F32, 4, q_shape, FLASHATTN_DEVICE_CPU, 0);
    flashattn_tensor_contiguous(&args.softmax_lse, lse, FLASHATTN_DTYPE_F32, 3, lse_shape, FLASHATTN_DEVICE_CPU, 0);
    args.options.softmax_scale = 1.0f;
    status = flashattn_forward(&args);
    check(status == FLASHATTN_STATUS_OK, "forward on CPU tensors");
    check(strcmp(flashattn_last_error(), "") == 0, "last error cleared after success");
    if (status == FLASHATTN_STATUS_OK) {
        p1 = exp(2.0) / (1.0 + exp(2.0));
        for (d = 0; d < HEAD_DIM; ++d) check(fabs(out[d] - ((1.0 - p1) - p1)) < 1e-6, "output value");
        check(fabs(lse[0] - log(1.0 + exp(2.0))) < 1e-6, "log-sum-exp value");
    }

    if (failures == 0) printf("C ABI check passed\n");
    return failures == 0 ? 0 : 1;
}
