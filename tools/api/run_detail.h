// What api::run and the mesh runs (mesh_run.cc) share: RunConfig to the
// runtime's options, and the warm-up plus timed runs of a compiled plan; and
// the count formatting the cost report and the CLI share. Internal to
// tessera_api (not installed).
#pragma once

#include <string>
#include <vector>

#include "runtime/runtime.h"
#include "tools/api/tessera.h"

namespace tessera::api::detail {

// Where kernels of this host run on one thread when a process uses
// `threads` of its cores (0: all): cost::one_thread_line of its profile.
OneThreadLine host_one_thread_line(int threads);

// Throws Error(kUsage) for negative --threads or --repeat, or an unknown backend.
runtime::RunOptions run_options(const RunConfig& config);

// One run (the warm-up when timing), then config.repeat timed runs; the
// profile table and the plan's memory.
RunResult run_compiled(runtime::ExecutablePlan& plan, const std::vector<Tensor>& inputs, const RunConfig& config);

// "1.23 GFLOP", "4.5 MB": human-readable counts.
std::string human_count(double value, const char* unit);

}  // namespace tessera::api::detail
