// Calibration of the host CPU profile: microbenchmarks run through the
// runtime's CPU kernels (the same kernels the validation measures), each
// chosen so that one term of the cost model dominates, and each fitting the
// profile factor behind that term:
//
//   tiny element-wise op              -> launch overhead
//   Add at two sizes over the line    -> parallel (thread wake/join) overhead
//   element-wise Add, 3 tensor sizes  -> DRAM, last-level and L2 bandwidth
//   3x3 Conv, small and large images  -> GEMM/convolution per-call cost
//   Convs and MatMuls of generic shapes -> conv and GEMM efficiency (and the
//                                        peak, under turbo)
//   Conv writing a graph output       -> row-major output factor
//   Exp on L2-resident data           -> cost of a transcendental
//
// cost/ cannot link the runtime (DESIGN), so this is a library of its own
// (calibrate/: graph, cost, runtime); prepare_device.h is its entry point
// for the CLI, the C++ API and the Python module.
#pragma once

#include <ostream>
#include <string>

#include "cost/device_profile.h"
#include "graph/graph.h"
#include "runtime/runtime.h"

namespace tessera::calibrate {

struct CalibrationOptions {
  double seconds = 30;  // the whole calibration, compiling included
  // threads > 0: measure with that many runtime threads and describe a
  // device of that many cores (on a machine shared with other work, one
  // thread avoids measuring OpenMP barriers waiting for a descheduled one).
  int threads = 0;
  // The first-use calibration: the dense-kernel rates first, then the
  // bandwidths, the last level's capacity and the overheads; the other
  // factors keep their detected values.
  bool quick = false;
};

// Detects the host, measures, returns the fitted profile (calibrated, and
// stamped with the host it describes). Progress, and the remaining error
// per kernel class, go to `log`.
cost::DeviceProfile calibrate_host(const CalibrationOptions& options, std::ostream& log);

// Fastest time per run of the single kernel of `g`'s plan on the CPU backend,
// measured for about `seconds` (at least 3 runs). Shared with bench/cost.
// node: count only the kernel of that root node (empty: every kernel).
// median: the median run instead of the fastest, for a kernel whose usual
// time, not its luckiest, is what every run pays (a cache miss's).
// line: which kernels run on one thread (the profile being fitted's, so
// that the model prices each probe as it ran).
double measure_kernel_seconds(const Graph& g, double seconds, int threads = 0, const std::string& node = "",
                              runtime::Backend backend = runtime::Backend::kCpu, bool median = false,
                              const OneThreadLine& line = {});

// A GPU profile fitted through the CUDA backend: the builtin profile `base`
// (a100, h100, h200) with its launch overhead, L2 and HBM efficiencies, GEMM
// efficiency (f16 tensor cores) and transcendental cost measured. Throws
// Error(kUsage) where the CUDA backend cannot run. Written for
// bench/gpu_check.sh; not yet run on a GPU.
cost::DeviceProfile calibrate_gpu(const std::string& base, double seconds, std::ostream& log);

}  // namespace tessera::calibrate
