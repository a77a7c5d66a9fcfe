// Running independent work items on all hardware threads.
//
// Every caller splits its work so that no two items write the same output element (an item is, e.g., one block
// of query rows of one head, or one kv head of one sequence); then no locking is needed and the results do not
// depend on the number of threads or on which thread runs which item.
#pragma once

#include <cstdint>
#include <functional>

namespace flashattn::reference {

// Calls fn(i) for every i in [0, count), spread over num_threads() threads (the caller's thread is one of them).
// The first exception an item throws is rethrown once every thread has stopped; items not yet started are skipped.
void parallel_for(int64_t count, const std::function<void(int64_t)>& fn);

}  // namespace flashattn::reference
