// Calibration of the host CPU profile: microbenchmarks run through the
// runtime's CPU kernels (the same kernels the validation measures), each
// chosen so that one term of the cost model dominates, and each fitting the
// profile factor behind that term:
//
//   tiny element-wise op              -> launch overhead
//   element-wise Add, 3 tensor sizes  -> DRAM, last-level and L2 bandwidth
//   3x3 Conv, MatMul on weights       -> GEMM efficiency (and the peak, under turbo)
//   Exp on L2-resident data           -> cost of a transcendental
//
// cost/ cannot link the runtime (DESIGN), so this lives with the CLI.
#pragma once

#include <ostream>

#include "cost/device_profile.h"
#include "graph/graph.h"

namespace tessera::cli {

// Detects the host, measures for about `seconds` in total, returns the
// fitted profile (calibrated = true). Progress goes to `log`.
// threads > 0: measure with that many runtime threads and describe a device
// of that many cores (on a machine shared with other work, one thread
// avoids measuring OpenMP barriers waiting for a descheduled thread).
cost::DeviceProfile calibrate_host(double seconds, int threads, std::ostream& log);

// Fastest time per run of the single kernel of `g`'s plan on the CPU backend,
// measured for about `seconds` (at least 3 runs). Shared with bench/cost.
double measure_kernel_seconds(const Graph& g, double seconds, int threads = 0);

}  // namespace tessera::cli
