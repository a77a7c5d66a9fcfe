#include "reference/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "reference/reference.h"

namespace flashattn::reference {

namespace {
constexpr const char* kThreadsEnv = "FLASHATTN_CPU_THREADS";
constexpr long kMaxThreads = 1024;  // a sanity bound on the override, far above any CPU's hardware threads
}  // namespace

int num_threads() {
    if (const char* env = std::getenv(kThreadsEnv)) {
        char* end = nullptr;
        const long n = std::strtol(env, &end, 10);
        if (end != env && *end == '\0' && n > 0) return static_cast<int>(std::min(n, kMaxThreads));
    }
    const unsigned hw = std::thread::hardware_concurrency();  // 0 when unknown
    return hw > 0 ? static_cast<int>(hw) : 1;
}

void parallel_for(int64_t count, const std::function<void(int64_t)>& fn) {
    const int threads = static_cast<int>(std::min<int64_t>(num_threads(), count));
    if (threads <= 1) {
        for (int64_t i = 0; i < count; ++i) fn(i);
        return;
    }
    // Items are handed out one at a time from a shared counter: they vary a lot in cost (causal masks, ragged
    // sequences), so a static split would leave threads idle.
    std::atomic<int64_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto worker = [&] {
        for (int64_t i = next++; i < count; i = next++) {
            try {
                fn(i);
            } catch (...) {
                const std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) error = std::current_exception();
                next = count;
            }
        }
    };
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(threads - 1));
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
    if (error) std::rethrow_exception(error);
}

}  // namespace flashattn::reference
