// AttnParams from validated arguments: sizes from validation, pointers and strides from the views, options
// defaulted and normalised (softmax scale, window, dropout threshold).
#pragma once

#include "api/attn_dims.h"
#include "common/params.h"
#include "flashattn/flashattn.h"

namespace flashattn::api {

AttnParams build_params(const ForwardArgs& args, const AttnDims& dims);
AttnParams build_params(const VarlenForwardArgs& args, const AttnDims& dims);
AttnParams build_params(const BackwardArgs& args, const AttnDims& dims);
AttnParams build_params(const VarlenBackwardArgs& args, const AttnDims& dims);
AttnParams build_params(const KvCacheArgs& args, const AttnDims& dims);
AttnParams build_params(const MergeArgs& args, const AttnDims& dims);

}  // namespace flashattn::api
