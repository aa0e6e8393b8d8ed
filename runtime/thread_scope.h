// The OpenMP thread count (which oneDNN's primitives use) for a scope, restored
// after: a plan compiles and runs under its own count, and a kernel built for
// one thread runs under one.
#pragma once

#include <omp.h>

namespace tessera::runtime {

class ThreadScope {
 public:
  // threads <= 0: one per core.
  explicit ThreadScope(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
  }
  ~ThreadScope() { omp_set_num_threads(saved_); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

}  // namespace tessera::runtime
