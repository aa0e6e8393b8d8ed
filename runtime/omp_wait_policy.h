// OpenMP's wait policy for the programs that run plans (the tessera CLI, the
// benchmark driver): passive unless the user set OMP_WAIT_POLICY or
// GOMP_SPINCOUNT.
//
// Why: oneDNN's primitives are OpenMP parallel regions with a static work
// split, and libgomp's default lets idle threads spin for 300000 iterations
// between regions. Where the cores are shared (other processes runnable), the
// spinning threads take the time slices the working ones need: resnet18 at 2
// threads on 2 loaded cores ran in 384 ms with the default, 33 ms passive
// (111 ms with OMP_WAIT_POLICY=active); bert_base 2 threads 1400 ms -> 278 ms.
//
// libgomp reads the policy once, in its constructor, before main; the only
// portable hook that runs earlier is the executable's .preinit_array (shared
// libraries may not have one). So this is a macro that an executable's main
// file expands once; it does nothing in a library.
#pragma once

#include <cstdlib>

namespace tessera::runtime {

inline void default_omp_wait_policy(int, char**, char**) {
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) setenv("OMP_WAIT_POLICY", "passive", 0);
}

}  // namespace tessera::runtime

#define TESSERA_DEFAULT_OMP_WAIT_POLICY()                                                  \
  __attribute__((section(".preinit_array"), used)) static void (*tessera_omp_wait_policy_)( \
      int, char**, char**) = &::tessera::runtime::default_omp_wait_policy
