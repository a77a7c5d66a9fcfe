// version(), doctor_report(), and which compiled GPU code runs on which device.
#include <gtest/gtest.h>

#include <string>

#include "api/arch_support.h"
#include "common/build_config.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ApiDoctor, Version) { EXPECT_STREQ(version(), FLASHATTN_VERSION); }

TEST(ApiDoctor, ReportDescribesBuildAndMachine) {
    const std::string r = doctor_report();
    EXPECT_TRUE(contains(r, std::string("flashattn ") + FLASHATTN_VERSION)) << r;
    EXPECT_TRUE(contains(r, "build type:")) << r;
    EXPECT_TRUE(contains(r, "C++ compiler:")) << r;
    EXPECT_TRUE(contains(r, "CPU reference:")) << r;
#if FLASHATTN_WITH_CUDA
    EXPECT_TRUE(contains(r, std::string("compiled archs:    ") + FLASHATTN_CUDA_ARCHS)) << r;
    EXPECT_TRUE(contains(r, "runtime version:")) << r;
    EXPECT_TRUE(contains(r, "driver version:")) << r;
    // Either GPUs are listed with a verdict each, or the report says why none is usable.
    EXPECT_TRUE(contains(r, "GPU 0:") || contains(r, "no GPU visible: CPU reference path only (slow)")) << r;
    if (contains(r, "GPU 0:")) EXPECT_TRUE(contains(r, "supported: ")) << r;
#else
    EXPECT_TRUE(contains(r, "CUDA support:      no")) << r;
#endif
}

TEST(ApiArchSupport, PreAmpereIsUnsupported) {
    const api::ArchSupport s = api::arch_support(7, 5, "80,90a");
    EXPECT_FALSE(s.supported);
    EXPECT_EQ(s.detail, "sm_75: flashattn needs compute capability 8.0 or newer (Ampere, Ada, Hopper, Blackwell)");
}

TEST(ApiArchSupport, ExactBinary) {
    const api::ArchSupport s = api::arch_support(8, 0, "80,90a");
    EXPECT_TRUE(s.supported);
    EXPECT_EQ(s.detail, "sm_80: runs the compiled sm_80 binary");
}

TEST(ApiArchSupport, LaterMinorRunsEarlierBinary) {
    EXPECT_EQ(api::arch_support(8, 6, "80,90a").detail, "sm_86: runs the compiled sm_80 binary");
    EXPECT_EQ(api::arch_support(8, 9, "80,86").detail, "sm_89: runs the compiled sm_86 binary");
}

TEST(ApiArchSupport, ArchSpecificBinaryOnlyOnItsArch) {
    EXPECT_EQ(api::arch_support(9, 0, "80,90a").detail, "sm_90: runs the compiled sm_90a binary");
    // sm_100 can't run sm_90a code: it JIT-compiles the compute_80 PTX.
    const api::ArchSupport s = api::arch_support(10, 0, "80,90a");
    EXPECT_TRUE(s.supported);
    EXPECT_NE(s.detail.find("runs the compute_80 PTX, JIT-compiled"), std::string::npos) << s.detail;
}

TEST(ApiArchSupport, RealOnlyEntriesHaveNoPtx) {
    const api::ArchSupport s = api::arch_support(12, 0, "80-real,90a-real");
    EXPECT_FALSE(s.supported);
    EXPECT_EQ(s.detail, "sm_120: no compiled architecture runs on it (compiled: 80-real,90a-real); rebuild with "
                        "-DFLASHATTN_CUDA_ARCHS=120");
    EXPECT_TRUE(api::arch_support(12, 0, "80-virtual").supported);
    EXPECT_FALSE(api::arch_support(8, 6, "90-virtual").supported);  // PTX never runs on an older device
}

TEST(ApiArchSupport, NoCudaBuild) {
    const api::ArchSupport s = api::arch_support(9, 0, "");
    EXPECT_FALSE(s.supported);
    EXPECT_EQ(s.detail, "sm_90: this build has no GPU code (configured without CUDA)");
}

}  // namespace
}  // namespace flashattn
