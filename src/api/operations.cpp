// The public operations: validate every argument, build the params, run them where the tensors live.
#include "api/dispatch.h"
#include "api/params_builder.h"
#include "api/validate.h"

namespace flashattn {

namespace {

// Calls whose outputs are all empty return after validation; the backends never see them.
bool nothing_to_do(const api::AttnDims& d) { return d.batch == 0 || d.nheads == 0; }

template <class Args>
void run_attention(const Args& args) {
    const api::AttnDims d = api::validate(args);
    if (nothing_to_do(d) || d.seqlen_q == 0) return;
    api::run_backend(api::build_params(args, d), d.where);
}

// Without a query row no key got any attention, so its gradients are zero (FlashAttention does the same);
// dq and softmax_d are empty then.
template <class Args>
void run_backward(const Args& args) {
    const api::AttnDims d = api::validate(args);
    if (nothing_to_do(d)) return;
    if (d.seqlen_q == 0) {
        api::zero_fill(args.dk, d.where, args.ctx.stream);
        api::zero_fill(args.dv, d.where, args.ctx.stream);
        return;
    }
    api::run_backend(api::build_params(args, d), d.where);
}

template <class Args>
size_t workspace_of(const Args& args) {
    const api::AttnDims d = api::validate(args);
    if (nothing_to_do(d) || d.seqlen_q == 0) return 0;
    return api::backend_workspace_bytes(api::build_params(args, d), d.where);
}

}  // namespace

void forward(const ForwardArgs& args) { run_attention(args); }
void varlen_forward(const VarlenForwardArgs& args) { run_attention(args); }
void backward(const BackwardArgs& args) { run_backward(args); }
void varlen_backward(const VarlenBackwardArgs& args) { run_backward(args); }

void kvcache_forward(const KvCacheArgs& args) {
    const api::AttnDims d = api::validate(args);
    // New keys are appended even when there is no query to attend with.
    if (nothing_to_do(d) || (d.seqlen_q == 0 && d.seqlen_new == 0)) return;
    api::run_backend(api::build_params(args, d), d.where);
}

void merge_attention(const MergeArgs& args) {
    const api::AttnDims d = api::validate(args);
    if (d.empty_outputs() || d.head_dim_v == 0) return;
    api::run_backend(api::build_params(args, d), d.where);
}

size_t workspace_size(const ForwardArgs& args) { return workspace_of(args); }
size_t workspace_size(const VarlenForwardArgs& args) { return workspace_of(args); }
size_t workspace_size(const BackwardArgs& args) { return workspace_of(args); }
size_t workspace_size(const VarlenBackwardArgs& args) { return workspace_of(args); }

size_t workspace_size(const KvCacheArgs& args) {
    const api::AttnDims d = api::validate(args);
    if (nothing_to_do(d) || (d.seqlen_q == 0 && d.seqlen_new == 0)) return 0;
    return api::backend_workspace_bytes(api::build_params(args, d), d.where);
}

}  // namespace flashattn
