// What an executable plan is made of: kernels that read and write values'
// buffers. A kernel is built once at plan compile (primitives created, weights
// prepacked) and run many times; where each value lives is decided per run
// (graph inputs and outputs move, the arena does not) and handed over in
// ExecContext.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::runtime {

class Communicator;

struct ExecContext {
  std::vector<uint8_t*> ptr;  // per ValueId: its data in this run (nullptr: not materialized)
  uint8_t* scratch = nullptr;  // the running kernel's scratch bytes (scratch_bytes())
  Communicator* communicator = nullptr;
  // This run uses one thread (the plan's cores are oversubscribed): kernels
  // with a one-thread form run it.
  bool one_thread = false;

  template <class T>
  T* at(ValueId v) const { return reinterpret_cast<T*>(ptr[static_cast<size_t>(v)]); }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void run(ExecContext& ctx) = 0;
  // How the kernel computes, for --profile: "onednn:<impl>", "native", "reference".
  virtual std::string impl() const = 0;
  virtual int64_t scratch_bytes() const { return 0; }
  virtual int64_t weight_bytes() const { return 0; }  // prepacked constants it owns

  // A kernel that waits on other ranks (a collective) can run in two
  // halves, so that the plan runs independent kernels in between (plan.cc):
  // start() posts the exchange, finish() completes it (and unpacks its
  // result). From start to finish its inputs, outputs and scratch stay
  // allocated and unchanged, and its outputs are not read. run() is the
  // blocking form, for where nothing runs in between.
  virtual bool splits() const { return false; }
  virtual void start(ExecContext& ctx) { run(ctx); }
  virtual void finish(ExecContext& ctx) { (void)ctx; }
  // Milliseconds its runs so far spent waiting for other ranks inside
  // finish(), where the kernel keeps count (the overlapped halo exchange,
  // cpu/halo_overlap.h); 0 otherwise.
  virtual double wait_ms() const { return 0; }

  // Values read (graph values of every fused node, without the fused
  // intermediates) and written; kNoValue entries are skipped.
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  // Position in `inputs` whose buffer outputs[0] may reuse when that input
  // dies here (element-wise kernels that read and write the same index).
  int in_place_input = -1;
  std::string node;  // the root node's name
  std::string op;    // "Conv" or "Conv+Add+Relu"
  bool fallback = false;
  // At most this many threads (0: the plan's count). Kernels with little work
  // are built and run on the calling thread: a fork-join costs more than it
  // saves there, and on shared cores every fork-join waits for a thread that
  // may not be scheduled.
  int max_threads = 0;
  // Bytes of constant weights a run streams from memory, once each (the
  // skinny products' K x N weight): --profile shows them over the kernel's
  // time against the host's DRAM read bandwidth. 0: not such a kernel.
  int64_t streamed_bytes = 0;
};

}  // namespace tessera::runtime
