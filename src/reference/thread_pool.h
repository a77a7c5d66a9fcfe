// Running independent work items on all hardware threads: each item is one (batch, head) or (batch, kv head), and
// items never write the same output, so no locking is needed and results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace flashattn::reference {

// Calls fn(i) for every i in [0, count), spread over num_threads() threads. The first exception thrown by an item
// is rethrown after all threads have stopped.
void parallel_for(int64_t count, const std::function<void(int64_t)>& fn);

}  // namespace flashattn::reference
