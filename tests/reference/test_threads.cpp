// Threading: the thread count comes from the hardware or FLASHATTN_CPU_THREADS, and results are bit-identical
// whatever the count (work items never share an output element, and every sum runs in a fixed order).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "reference/attention_problem.h"
#include "reference/reference.h"
#include "reference/thread_pool.h"

namespace flashattn::testing {
namespace {

constexpr const char* kThreadsEnv = "FLASHATTN_CPU_THREADS";

// Sets FLASHATTN_CPU_THREADS for the scope, restoring the previous value after.
class ThreadsEnv {
  public:
    explicit ThreadsEnv(const char* value) {
        if (const char* old = std::getenv(kThreadsEnv)) old_ = old;
        if (value) setenv(kThreadsEnv, value, 1);
        else unsetenv(kThreadsEnv);
    }
    ~ThreadsEnv() {
        if (old_) setenv(kThreadsEnv, old_->c_str(), 1);
        else unsetenv(kThreadsEnv);
    }

  private:
    std::optional<std::string> old_;
};

TEST(ReferenceThreads, CountFromHardwareOrEnvironment) {
    const unsigned hw = std::thread::hardware_concurrency();
    {
        ThreadsEnv env(nullptr);
        EXPECT_EQ(reference::num_threads(), hw > 0 ? static_cast<int>(hw) : 1);
    }
    {
        ThreadsEnv env("3");
        EXPECT_EQ(reference::num_threads(), 3);
    }
    for (const char* bad : {"0", "-2", "many", "4x", ""}) {
        ThreadsEnv env(bad);
        EXPECT_EQ(reference::num_threads(), hw > 0 ? static_cast<int>(hw) : 1) << "'" << bad << "' is ignored";
    }
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(ReferenceThreads, ResultsIndependentOfThreadCount) {
    ProblemConfig cfg;
    cfg.dtype = DType::f32;
    cfg.batch = 3;
    cfg.nheads = 6;
    cfg.nheads_k = 2;
    cfg.head_dim = 32;
    cfg.seqlen_q = 150;
    cfg.seqlen_k = 130;
    cfg.causal = true;
    cfg.dropout_p = 0.1f;
    cfg.softmax_d = true;
    auto run = [&](const char* threads) {
        ThreadsEnv env(threads);
        auto prob = std::make_unique<Problem>(cfg);
        reference::forward(prob->params(OpKind::forward));
        reference::backward(prob->params(OpKind::backward));
        return prob;
    };
    const auto one = run("1");
    for (const char* threads : {"2", "5", "64"}) {
        const auto many = run(threads);
        EXPECT_TRUE(same_bytes(*one->out.storage, *many->out.storage)) << threads << " threads: out";
        EXPECT_TRUE(same_bytes(one->lse, many->lse)) << threads << " threads: lse";
        EXPECT_TRUE(same_bytes(*one->dq.storage, *many->dq.storage)) << threads << " threads: dq";
        EXPECT_TRUE(same_bytes(*one->dk.storage, *many->dk.storage)) << threads << " threads: dk";
        EXPECT_TRUE(same_bytes(*one->dv.storage, *many->dv.storage)) << threads << " threads: dv";
        EXPECT_TRUE(same_bytes(one->softmax_d, many->softmax_d)) << threads << " threads: softmax_d";
    }
}

TEST(ReferenceThreads, ParallelForRunsEachItemOnce) {
    ThreadsEnv env("4");
    constexpr int64_t kItems = 1000;
    std::vector<std::atomic<int>> runs(kItems);
    reference::parallel_for(kItems, [&](int64_t i) { ++runs[static_cast<size_t>(i)]; });
    for (int64_t i = 0; i < kItems; ++i) EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << "item " << i;
    reference::parallel_for(0, [&](int64_t) { ADD_FAILURE() << "no items, no calls"; });
}

TEST(ReferenceThreads, ExceptionsReachTheCaller) {
    // An item that throws must surface in the caller once every thread has stopped, not terminate the program.
    ThreadsEnv env("4");
    std::atomic<int> started{0};
    EXPECT_THROW(reference::parallel_for(100,
                                         [&](int64_t i) {
                                             ++started;
                                             if (i == 10) throw std::runtime_error("item 10 failed");
                                         }),
                 std::runtime_error);
    EXPECT_GE(started.load(), 11);
}

}  // namespace
}  // namespace flashattn::testing
