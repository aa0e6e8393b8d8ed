// The order of a plan's steps: when each kernel runs, and when a kernel
// that splits (Kernel::splits: the collectives) starts and finishes, so
// that the kernels that do not depend on a collective run while it is in
// flight. The schedule is a function of the kernel list alone, which is the
// rank program's topological order: ranks whose programs have the same
// nodes get the same schedule.
//
//   kernels  mm1  mm2  ar(mm2)  mm3  mm4  add(ar, mm4)
//   steps    mm1  mm2  start ar  mm3  mm4  finish ar  add
//
// A collective starts right after the step that writes the last of its
// inputs, but never before the collective that precedes it in the kernel
// order: every rank starts its collectives in the kernel order, the order
// collective_signature lists and MPI needs. It finishes just before the
// first step that reads its output (another collective's start included),
// or at the end. Neither transport needs the finishes in start order (MPI
// completes outstanding collectives in any order; InProcessWorld's ranks
// never wait for a peer's finish). Where no kernel runs between a start and
// its finish, the collective runs as one step, the blocking form.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/plan_spec.h"

namespace tessera::runtime {

struct PlanStep {
  enum class Kind : uint8_t { kRun, kStart, kFinish };
  Kind kind = Kind::kRun;
  int32_t kernel = 0;
};

// Every kernel of spec once (a split one as a start and a finish), in an
// order where each step's inputs are written before it. Without overlap,
// every kernel runs, in the kernel order.
std::vector<PlanStep> schedule_steps(const PlanSpec& spec, bool overlap);

// The collective steps, one line each, the collectives numbered in kernel
// order: "start 0 AllReduce 'ar'", "finish 0 ...", "run 1 ...".
std::string describe_collective_steps(const PlanSpec& spec, const std::vector<PlanStep>& steps);

}  // namespace tessera::runtime
