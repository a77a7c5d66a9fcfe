// `flashattn doctor`: what this build holds and whether this machine can run it, with the fix for each problem.
#include <sstream>
#include <string>

#include "common/build_config.h"
#include "flashattn/flashattn.h"
#include "reference/reference.h"

#if FLASHATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/launch.h"
#endif

namespace flashattn {

namespace {

constexpr int kMinComputeMajor = 8;
constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

std::string cuda_version_str(int v) {
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

#if FLASHATTN_WITH_CUDA
// Whether the compiled architectures (e.g. "80,90a") include machine code that runs on compute capability
// major.minor: sm_XY code runs on X.Y' with Y' >= Y; an "a" target runs only on exactly its version.
std::string arch_for_device(int major, int minor) {
    std::string best;
    std::istringstream archs(FLASHATTN_CUDA_ARCHS);
    std::string a;
    while (std::getline(archs, a, ',')) {
        if (a.size() < 2) continue;
        const int amaj = a[0] - '0', amin = a[1] - '0';
        const bool exact_only = a.size() > 2 && a[2] == 'a';
        const bool runs = exact_only ? (amaj == major && amin == minor) : (amaj == major && amin <= minor);
        if (runs) best = "sm_" + a;
    }
    return best;
}

void report_gpus(std::ostringstream& os) {
    int driver = 0, runtime = 0;
    const cudaError_t derr = cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    os << "CUDA runtime (linked): " << cuda_version_str(runtime) << "\n";
    if (derr != cudaSuccess || driver == 0) {
        os << "CUDA driver: none found (libcuda.so not loadable)\n"
           << "GPUs: none visible: CPU reference path only (correct, slow).\n"
           << "  fix: install the NVIDIA driver, or run where a GPU is visible.\n";
        return;
    }
    os << "CUDA driver: supports CUDA " << cuda_version_str(driver) << "\n";
    if (driver < runtime)
        os << "  problem: the driver is older than the runtime flashattn was built with (" << cuda_version_str(runtime)
           << "); fix: update the NVIDIA driver, or build flashattn with an older CUDA toolkit.\n";
    int count = 0;
    const cudaError_t cerr = cudaGetDeviceCount(&count);
    if (cerr != cudaSuccess || count == 0) {
        os << "GPUs: none visible (" << (cerr != cudaSuccess ? cudaGetErrorString(cerr) : "count 0")
           << "): CPU reference path only (correct, slow).\n"
           << "  fix: check CUDA_VISIBLE_DEVICES and that the driver sees the GPU (nvidia-smi).\n";
        cudaGetLastError();  // clear the sticky error of the failed query
        return;
    }
    os << "GPUs: " << count << " visible\n";
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
            os << "  [" << i << "] properties unreadable\n";
            continue;
        }
        os << "  [" << i << "] " << prop.name << ", sm_" << prop.major << prop.minor << ", "
           << prop.multiProcessorCount << " SMs, " << static_cast<double>(prop.totalGlobalMem) / kBytesPerGiB
           << " GiB: ";
        const std::string arch = arch_for_device(prop.major, prop.minor);
        if (prop.major < kMinComputeMajor)
            os << "NOT supported: flashattn's kernels need compute capability 8.0 or newer (Ampere, Ada, Hopper)\n";
        else if (arch.empty())
            os << "NOT supported by this build: no compiled architecture runs on sm_" << prop.major << prop.minor
               << "; fix: rebuild with FLASHATTN_CUDA_ARCHS including " << prop.major << prop.minor
               << (prop.major == 9 ? "a" : "") << "\n";
        else
            os << "supported (runs " << arch << " code)\n";
    }
}
#endif

}  // namespace

std::string doctor_report() {
    std::ostringstream os;
    os << "flashattn " << FLASHATTN_VERSION << " (" << FLASHATTN_BUILD_TYPE << ", " << FLASHATTN_CXX_COMPILER << ")\n";
    os << "CPU reference: " << reference::num_threads() << " threads (FLASHATTN_CPU_THREADS overrides)\n";
#if FLASHATTN_WITH_CUDA
    os << "built with CUDA: nvcc " << FLASHATTN_NVCC_VERSION << ", archs " << FLASHATTN_CUDA_ARCHS << "\n";
    os << "GPU kernels: " << kernels::compiled_kernels_summary() << "\n";
    os << "GPU kv-cache attention: not implemented yet (CPU reference only)\n";
    report_gpus(os);
#else
    os << "built without CUDA: CPU reference path only.\n"
       << "  fix: install the CUDA toolkit (nvcc) and rebuild to get the GPU kernels.\n";
#endif
    return os.str();
}

}  // namespace flashattn
