// Validating the public argument structs and turning them into the params every backend reads.
#pragma once

#include "common/params.h"
#include "flashattn/flashattn.h"

namespace flashattn::api {

// A validated call: its params, where it runs, and whether there is nothing to compute.
struct Call {
    AttnParams params;
    bool on_cpu = true;
    int32_t device_index = 0;
    bool empty = false;  // batch 0 or no query rows: a valid no-op
};

// Each throws Error(Status::invalid_argument) naming the first bad argument; nothing is written.
Call build_call(const ForwardArgs& args);
Call build_call(const VarlenForwardArgs& args);
Call build_call(const BackwardArgs& args);
Call build_call(const VarlenBackwardArgs& args);
Call build_call(const KvCacheArgs& args);

}  // namespace flashattn::api
