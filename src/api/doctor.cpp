// version() and doctor_report(): what this build holds and what this machine offers it. CUDA runtime API only,
// compiled by the host compiler.
#include <sstream>
#include <string>

#include "api/arch_support.h"
#include "common/build_config.h"
#include "flashattn/flashattn.h"
#include "reference/reference.h"

#if FLASHATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/launch.h"
#endif

namespace flashattn {

namespace {

constexpr int kCudaVersionMajorUnit = 1000;  // CUDA versions are encoded as 1000 * major + 10 * minor
constexpr int kCudaVersionMinorUnit = 10;
constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

std::string cuda_version_str(int v) {
    return std::to_string(v / kCudaVersionMajorUnit) + "." + std::to_string((v % kCudaVersionMajorUnit) / kCudaVersionMinorUnit);
}

void report_build(std::ostringstream& os) {
    os << "flashattn " << FLASHATTN_VERSION << "\n";
    os << "  build type:        " << (FLASHATTN_BUILD_TYPE[0] ? FLASHATTN_BUILD_TYPE : "(none)") << "\n";
    os << "  C++ compiler:      " << FLASHATTN_CXX_COMPILER << "\n";
#if FLASHATTN_WITH_CUDA
    os << "  CUDA support:      yes, nvcc " << FLASHATTN_NVCC_VERSION << "\n";
    os << "  compiled archs:    " << FLASHATTN_CUDA_ARCHS << "\n";
    os << "  GPU kernels:       " << kernels::compiled_kernels_summary() << "\n";
#else
    os << "  CUDA support:      no (configured without CUDA): CPU reference path only\n";
    os << "  GPU kernels:       none compiled\n";
#endif
    os << "  CPU reference:     " << reference::num_threads() << " threads (FLASHATTN_CPU_THREADS overrides)\n";
}

#if FLASHATTN_WITH_CUDA
void report_gpus(std::ostringstream& os) {
    int runtime = 0, driver = 0;
    os << "CUDA\n";
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) os << "  runtime version:   " << cuda_version_str(runtime) << " (linked statically)\n";
    else os << "  runtime version:   unknown\n";
    const cudaError_t driver_err = cudaDriverGetVersion(&driver);
    if (driver_err != cudaSuccess || driver == 0) {
        os << "  driver version:    no NVIDIA driver found (libcuda.so not loadable)\n";
    } else {
        os << "  driver version:    supports CUDA " << cuda_version_str(driver) << "\n";
        if (driver < runtime)
            os << "  warning:           the driver is older than the runtime (" << cuda_version_str(runtime)
               << "): update the NVIDIA driver\n";
    }

    os << "GPUs\n";
    int count = 0;
    const cudaError_t count_err = cudaGetDeviceCount(&count);
    if (count_err != cudaSuccess || count == 0) {
        os << "  no GPU visible: CPU reference path only (slow)";
        if (count_err != cudaSuccess) os << " [cudaGetDeviceCount: " << cudaGetErrorName(count_err) << ": " << cudaGetErrorString(count_err) << "]";
        os << "\n";
        cudaGetLastError();  // reset the runtime's last error so that later calls do not report this one
        return;
    }
    for (int dev = 0; dev < count; ++dev) {
        cudaDeviceProp prop{};
        const cudaError_t err = cudaGetDeviceProperties(&prop, dev);
        if (err != cudaSuccess) {
            os << "  GPU " << dev << ": cudaGetDeviceProperties failed: " << cudaGetErrorString(err) << "\n";
            continue;
        }
        const api::ArchSupport s = api::arch_support(prop.major, prop.minor, FLASHATTN_CUDA_ARCHS);
        os.setf(std::ios::fixed);
        os.precision(1);
        os << "  GPU " << dev << ": " << prop.name << ", compute capability " << prop.major << "." << prop.minor << ", "
           << static_cast<double>(prop.totalGlobalMem) / kBytesPerGiB << " GiB, " << prop.multiProcessorCount << " SMs\n";
        os << "    " << (s.supported ? "supported: " : "NOT supported: ") << s.detail << "\n";
    }
}
#else
void report_gpus(std::ostringstream& os) {
    os << "GPUs\n  not probed: this build has no CUDA support; CPU reference path only (slow)\n";
}
#endif

}  // namespace

const char* version() { return FLASHATTN_VERSION; }

std::string doctor_report() {
    std::ostringstream os;
    report_build(os);
    report_gpus(os);
    return os.str();
}

}  // namespace flashattn
