// OpenMP's wait policy for the programs that run plans (the tessera CLI, the
// benchmark drivers): idle threads spin for GOMP_SPINCOUNT=10000 iterations
// between parallel regions, then sleep, unless the user set OMP_WAIT_POLICY
// or GOMP_SPINCOUNT.
//
// Why: oneDNN's primitives are OpenMP parallel regions with a static work
// split, one per kernel. A thread that sleeps the moment a region ends
// (passive) must be woken for the next one, which on a virtual machine costs
// tens of microseconds per kernel; libgomp's default spins 300000 iterations,
// which takes the time slices working threads need where the cores are
// shared. Measured with `tessera run --threads 2 --repeat 30` (median ms, 2
// vCPUs, AMD EPYC Zen 4 guest, 4 alternating rounds):
//   quiet:            mobilenet_v2 passive 7.0-8.3, spin 10000 5.0-5.5, spin 300000 5.1-5.6
//                     llama_small  passive 22.4-23.3, spin 10000 20.0-20.7
//   6 busy processes: resnet18     passive 125-134, spin 10000 121-132, spin 300000 118-124
// (An earlier Intel guest under load 11-15 measured resnet18 at 384 ms with
// the 300000 default against 33 ms passive; the short spin stays close to
// passive there by design: 1/30 of the default.)
//
// libgomp reads the policy once, in its constructor, before main; the only
// portable hook that runs earlier is the executable's .preinit_array (shared
// libraries may not have one). So this is a macro that an executable's main
// file expands once; it does nothing in a library.
#pragma once

#include <cstdlib>

namespace tessera::runtime {

inline void default_omp_wait_policy(int, char**, char**) {
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) setenv("GOMP_SPINCOUNT", "10000", 0);
}

}  // namespace tessera::runtime

#define TESSERA_DEFAULT_OMP_WAIT_POLICY()                                                  \
  __attribute__((section(".preinit_array"), used)) static void (*tessera_omp_wait_policy_)( \
      int, char**, char**) = &::tessera::runtime::default_omp_wait_policy
