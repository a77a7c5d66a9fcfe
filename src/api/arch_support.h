// Which compiled GPU code, if any, runs on a device of a given compute capability.
#pragma once

#include <string>

namespace flashattn::api {

// flashattn's kernels use mma.sync with bf16 and cp.async: compute capability 8.0 (Ampere) or newer.
constexpr int kMinComputeMajor = 8;

struct ArchSupport {
    bool supported = false;
    std::string detail;  // which code runs ("sm_80 binary", "compute_80 PTX, JIT-compiled"), or why none does
};

// `compiled` is the comma-separated CMake architecture list of the build (e.g. "80,90a", "80-real,90-virtual");
// a plain entry holds both a binary and PTX, "-real" only the binary, "-virtual" only PTX. A binary for sm_XY runs
// on X.Z for Z >= Y; an arch-specific one (sm_90a) only on exactly 9.0; PTX is JIT-compiled for any newer device.
ArchSupport arch_support(int major, int minor, const std::string& compiled);

}  // namespace flashattn::api
