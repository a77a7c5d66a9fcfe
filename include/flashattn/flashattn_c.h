/* flashattn: the C ABI.
 *
 * Plain C99 mirrors of the C++ API in flashattn.h, for bindings in other languages. Every struct has an _init
 * function that sets the documented defaults (call it, then fill in what you use: fields added by a later ABI
 * version get their defaults that way). Each operation's argument struct starts with struct_size, the struct's size
 * as the caller compiled it, which its _init sets: a caller built against another version of this header is refused
 * with a message rather than read or written past its struct. Every operation returns a flashattn_status; on failure
 * flashattn_last_error() gives the message, which names the argument, what was expected and what was given.
 * No C++ exception crosses this interface.
 *
 * Tensors, layouts, masks and the meaning of every field are as in flashattn.h. Booleans are int32_t (0 / 1).
 */
#ifndef FLASHATTN_FLASHATTN_C_H
#define FLASHATTN_FLASHATTN_C_H

#include <stddef.h>
#include <stdint.h>

#ifndef FLASHATTN_API
#if defined(_WIN32)
#define FLASHATTN_API __declspec(dllexport)
#else
#define FLASHATTN_API __attribute__((visibility("default")))
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below or a function's meaning changes incompatibly. Compare with
 * flashattn_abi_version() at load time. Version 2: struct_size in the argument structs, the _init functions take
 * the caller's sizeof, and softmax_scale's default is NaN (0 is a scale). */
#define FLASHATTN_ABI_VERSION 2

#define FLASHATTN_MAX_DIMS 4

/* Status codes (the values of flashattn::Status). */
typedef int32_t flashattn_status;
#define FLASHATTN_STATUS_OK 0
#define FLASHATTN_STATUS_INVALID_ARGUMENT 1 /* a bad input; flashattn_last_error() names it */
#define FLASHATTN_STATUS_UNSUPPORTED 2      /* valid, but not available in this build or on this device */
#define FLASHATTN_STATUS_CUDA_ERROR 3       /* the CUDA runtime reported an error */
#define FLASHATTN_STATUS_INTERNAL 4         /* a bug in flashattn (or the host ran out of memory) */

/* Element types (flashattn::DType). float32/float64 are accepted for CPU tensors only; int32 is for indices. */
#define FLASHATTN_DTYPE_F16 0
#define FLASHATTN_DTYPE_BF16 1
#define FLASHATTN_DTYPE_F32 2
#define FLASHATTN_DTYPE_F64 3
#define FLASHATTN_DTYPE_I32 4

/* Device types (flashattn::DeviceType). */
#define FLASHATTN_DEVICE_CPU 0
#define FLASHATTN_DEVICE_CUDA 1

/* A non-owning view of a strided tensor; ndim 0 means absent (an optional argument not given). */
typedef struct flashattn_tensor {
    void* data;
    int32_t dtype;        /* FLASHATTN_DTYPE_* */
    int32_t device_type;  /* FLASHATTN_DEVICE_* */
    int32_t device_index; /* CUDA device ordinal; ignored for CPU tensors */
    int32_t ndim;         /* 0 (absent) .. FLASHATTN_MAX_DIMS */
    int64_t shape[FLASHATTN_MAX_DIMS];
    int64_t stride[FLASHATTN_MAX_DIMS]; /* in elements */
} flashattn_tensor;

typedef struct flashattn_options {
    float softmax_scale;           /* NaN (as _init sets it): 1 / sqrt(head_dim); else finite, >= 0 */
    int32_t causal;                /* bottom-right aligned */
    int32_t window_left;           /* -1: unbounded */
    int32_t window_right;          /* -1: unbounded (0 when causal) */
    float softcap;                 /* 0: off */
    flashattn_tensor alibi_slopes; /* optional fp32 (nheads) or (batch, nheads) */
    float dropout_p;               /* in [0, 1) */
    uint64_t seed;
    uint64_t offset;
    int32_t deterministic; /* backward: bit-identical results run to run */
} flashattn_options;

typedef struct flashattn_context {
    void* stream;    /* cudaStream_t; NULL is the default stream */
    void* workspace; /* device memory of at least the *_workspace_size() bytes */
    size_t workspace_bytes;
} flashattn_context;

typedef struct flashattn_fwd_args {
    size_t struct_size; /* the caller's sizeof(flashattn_fwd_args): set by its _init */
    flashattn_tensor q, k, v;
    flashattn_tensor out;
    flashattn_tensor softmax_lse; /* optional */
    flashattn_tensor attn_probs;  /* optional */
    flashattn_options options;
    flashattn_context ctx;
} flashattn_fwd_args;

typedef struct flashattn_varlen_fwd_args {
    size_t struct_size; /* the caller's sizeof(flashattn_varlen_fwd_args): set by its _init */
    flashattn_tensor q, k, v;
    flashattn_tensor cu_seqlens_q, cu_seqlens_k;
    flashattn_tensor seqused_k; /* optional */
    int64_t max_seqlen_q, max_seqlen_k;
    flashattn_tensor out;
    flashattn_tensor softmax_lse; /* optional */
    flashattn_tensor attn_probs;  /* optional */
    flashattn_options options;
    flashattn_context ctx;
} flashattn_varlen_fwd_args;

typedef struct flashattn_bwd_args {
    size_t struct_size; /* the caller's sizeof(flashattn_bwd_args): set by its _init */
    flashattn_tensor dout, q, k, v, out, softmax_lse;
    flashattn_tensor dq, dk, dv;
    flashattn_tensor softmax_d; /* optional */
    flashattn_options options;
    flashattn_context ctx;
} flashattn_bwd_args;

typedef struct flashattn_varlen_bwd_args {
    size_t struct_size; /* the caller's sizeof(flashattn_varlen_bwd_args): set by its _init */
    flashattn_tensor dout, q, k, v, out, softmax_lse;
    flashattn_tensor cu_seqlens_q, cu_seqlens_k;
    flashattn_tensor seqused_k; /* optional */
    int64_t max_seqlen_q, max_seqlen_k;
    flashattn_tensor dq, dk, dv;
    flashattn_tensor softmax_d; /* optional */
    flashattn_options options;
    flashattn_context ctx;
} flashattn_varlen_bwd_args;

typedef struct flashattn_kvcache_args {
    size_t struct_size; /* the caller's sizeof(flashattn_kvcache_args): set by its _init */
    flashattn_tensor q;
    flashattn_tensor k_cache, v_cache;
    flashattn_tensor k, v;                   /* optional, both or neither */
    flashattn_tensor rotary_cos, rotary_sin; /* optional, both or neither */
    int32_t rotary_interleaved;              /* default 1 */
    flashattn_tensor cache_seqlens;          /* optional */
    int64_t cache_seqlen;                    /* default -1: the whole cache */
    flashattn_tensor cache_batch_idx;        /* optional */
    flashattn_tensor cache_leftpad;          /* optional */
    flashattn_tensor block_table;            /* optional: paged cache */
    int32_t num_splits;                      /* default 0: heuristic */
    flashattn_tensor out;
    flashattn_tensor softmax_lse; /* optional */
    flashattn_options options;
    flashattn_context ctx;
} flashattn_kvcache_args;

/* Two results over disjoint keys merged by their LSEs (flashattn.h, MergeArgs). */
typedef struct flashattn_merge_args {
    size_t struct_size; /* the caller's sizeof(flashattn_merge_args): set by its _init */
    flashattn_tensor out_a, lse_a;
    flashattn_tensor out_b, lse_b;
    flashattn_tensor out;
    flashattn_tensor softmax_lse; /* optional */
    flashattn_context ctx;
} flashattn_merge_args;

/* Defaults: every tensor absent, options as in flashattn.h, no stream or workspace. A NULL pointer is ignored. */
FLASHATTN_API void flashattn_tensor_init(flashattn_tensor* t);
FLASHATTN_API void flashattn_options_init(flashattn_options* o);
FLASHATTN_API void flashattn_context_init(flashattn_context* c);

/* The argument structs' defaults, and struct_size. Call them through the macros, which pass the caller's
 * sizeof(*a) (bindings without the header pass the size of their mirror of the struct). A size other than this
 * library's leaves the struct untouched but for struct_size and returns FLASHATTN_STATUS_INVALID_ARGUMENT; the
 * operations refuse such a struct too. A NULL pointer is refused. */
FLASHATTN_API flashattn_status flashattn_fwd_args_init_sized(flashattn_fwd_args* a, size_t struct_size);
FLASHATTN_API flashattn_status flashattn_varlen_fwd_args_init_sized(flashattn_varlen_fwd_args* a, size_t struct_size);
FLASHATTN_API flashattn_status flashattn_bwd_args_init_sized(flashattn_bwd_args* a, size_t struct_size);
FLASHATTN_API flashattn_status flashattn_varlen_bwd_args_init_sized(flashattn_varlen_bwd_args* a, size_t struct_size);
FLASHATTN_API flashattn_status flashattn_kvcache_args_init_sized(flashattn_kvcache_args* a, size_t struct_size);
FLASHATTN_API flashattn_status flashattn_merge_args_init_sized(flashattn_merge_args* a, size_t struct_size);
#define flashattn_fwd_args_init(a) flashattn_fwd_args_init_sized((a), sizeof *(a))
#define flashattn_varlen_fwd_args_init(a) flashattn_varlen_fwd_args_init_sized((a), sizeof *(a))
#define flashattn_bwd_args_init(a) flashattn_bwd_args_init_sized((a), sizeof *(a))
#define flashattn_varlen_bwd_args_init(a) flashattn_varlen_bwd_args_init_sized((a), sizeof *(a))
#define flashattn_kvcache_args_init(a) flashattn_kvcache_args_init_sized((a), sizeof *(a))
#define flashattn_merge_args_init(a) flashattn_merge_args_init_sized((a), sizeof *(a))

/* A contiguous (row-major) view: sets every field of *t. */
FLASHATTN_API flashattn_status flashattn_tensor_contiguous(flashattn_tensor* t, void* data, int32_t dtype,
                                                           int32_t ndim, const int64_t* shape, int32_t device_type,
                                                           int32_t device_index);

/* The operations. */
FLASHATTN_API flashattn_status flashattn_forward(const flashattn_fwd_args* args);
FLASHATTN_API flashattn_status flashattn_varlen_forward(const flashattn_varlen_fwd_args* args);
FLASHATTN_API flashattn_status flashattn_backward(const flashattn_bwd_args* args);
FLASHATTN_API flashattn_status flashattn_varlen_backward(const flashattn_varlen_bwd_args* args);
FLASHATTN_API flashattn_status flashattn_kvcache_forward(const flashattn_kvcache_args* args);
FLASHATTN_API flashattn_status flashattn_merge_attention(const flashattn_merge_args* args);

/* Bytes of device workspace the call needs (0 for CPU tensors), into *bytes; validates like the call. */
FLASHATTN_API flashattn_status flashattn_forward_workspace_size(const flashattn_fwd_args* args, size_t* bytes);
FLASHATTN_API flashattn_status flashattn_varlen_forward_workspace_size(const flashattn_varlen_fwd_args* args,
                                                                       size_t* bytes);
FLASHATTN_API flashattn_status flashattn_backward_workspace_size(const flashattn_bwd_args* args, size_t* bytes);
FLASHATTN_API flashattn_status flashattn_varlen_backward_workspace_size(const flashattn_varlen_bwd_args* args,
                                                                        size_t* bytes);
FLASHATTN_API flashattn_status flashattn_kvcache_workspace_size(const flashattn_kvcache_args* args, size_t* bytes);

/* The message of this thread's last failed call; "" after a call that succeeded. Valid until the thread's next
 * flashattn call. */
FLASHATTN_API const char* flashattn_last_error(void);
/* "ok", "invalid_argument", "unsupported", "cuda_error", "internal", or "unknown". */
FLASHATTN_API const char* flashattn_status_name(flashattn_status status);

FLASHATTN_API const char* flashattn_version(void);
FLASHATTN_API int32_t flashattn_abi_version(void);

/* The doctor report (build, driver, runtime, GPUs) into buf, truncated to len - 1 characters and NUL-terminated
 * when len > 0. Returns the report's full length without the NUL, like snprintf: call with (NULL, 0) to size the
 * buffer. Returns 0 if the report could not be produced. */
FLASHATTN_API size_t flashattn_doctor_report(char* buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_FLASHATTN_C_H */
