// The runtime: compiles a typed Graph into an executable plan (kernels in
// topological order over buffers that a liveness-based planner places in one
// arena) and runs it on a backend. A plan is one rank's program; collective
// ops call the Communicator the plan was compiled with (communicator.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/fusion_groups.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace tessera::runtime {

class Communicator;

enum class Backend { kCpu, kCuda, kReference };
const char* backend_name(Backend backend);
// "cpu" | "cuda" | "reference"; throws Error(kUsage) otherwise.
Backend backend_from_name(std::string_view name);

struct RunOptions {
  Backend backend = Backend::kCpu;
  int threads = 0;        // 0: one per core
  bool profile = false;   // time every kernel (adds a little overhead)
  bool fuse = true;       // post-op fusion at plan compile
  // CPU: kernels under this line run on one thread (graph/fusion_groups.h).
  // The default is a conservative one for an unknown host; the API layer
  // sets the host's own from its profile (cost::one_thread_line).
  OneThreadLine one_thread_line;
  // CPU, threads > 1: when a run drops to one thread. Kernels keep a
  // one-thread form for it (oneDNN fixes a primitive's thread count at
  // creation). kWhenOversubscribed: a run that starts while more threads are
  // runnable than there are cores, as ONNX Runtime's pool falls back to its
  // calling thread. oneDNN splits work statically over OpenMP threads, so
  // every parallel region otherwise waits for a descheduled thread (measured
  // with one other busy process on 2 cores: llama_small at 2 threads 416 ms
  // against 39 ms for ORT and 12 ms on a quiet machine). The price: on a
  // loaded machine the summation order, and so the last bits of a result,
  // can differ from a quiet run's. kNever keeps the count strict; kAlways is
  // for tests and measurements.
  enum class OneThreadRuns : uint8_t { kWhenOversubscribed, kNever, kAlways };
  OneThreadRuns one_thread_runs = OneThreadRuns::kWhenOversubscribed;
  // The run's OpenMP threads each bound to a CPU of the caller's affinity
  // mask while it runs (runtime/thread_scope.h: PinnedTeam says why and when
  // it does nothing). Single-rank plans only (ranks sharing CPUs could bind
  // two teams to the same ones); off: the threads stay where the scheduler
  // puts them.
  bool pin_threads = true;
  bool allow_tf32 = false;  // CUDA: TF32 tensor cores for f32 matmul/conv
  // The ranks this plan's collectives talk to; nullptr: a single rank, and a
  // graph with collectives is rejected.
  Communicator* communicator = nullptr;
  // Collectives run while the kernels that do not depend on them do
  // (runtime/schedule.h); off: each collective blocks its rank where the
  // kernel order has it. The results are the same either way.
  bool overlap = true;
};

struct MemoryReport {
  int64_t arena_bytes = 0;         // the one arena of intermediates
  int64_t intermediate_bytes = 0;  // sum of all intermediate tensors' sizes
  int64_t scratch_bytes = 0;       // kernels' temporary buffers (also in the arena)
  int64_t weight_bytes = 0;        // constants as the kernels hold them (prepacked)
  int64_t io_bytes = 0;            // graph inputs and outputs
  int64_t peak_bytes = 0;          // arena + weights + io
  int64_t buffers = 0;             // intermediate tensors placed in the arena
  int64_t in_place = 0;            // outputs that reuse an input's buffer
  int64_t aliases = 0;             // reshapes that share their input's buffer
  int64_t carried_in_place = 0;    // outputs that can be written into a donated input (in_place_inputs)
};

struct KernelProfile {
  std::string node;
  std::string op;      // e.g. "Conv+Add+Relu" for a fused kernel
  std::string impl;    // e.g. "onednn:jit:avx512_core", "native", "reference"
  bool fallback = false;  // runs the reference interpreter's kernel
  double total_ms = 0;
  int64_t calls = 0;
  int64_t streamed_bytes = 0;  // weight bytes read from memory per run (Kernel::streamed_bytes)
  // Of total_ms, the time spent waiting for other ranks (Kernel::wait_ms:
  // the overlapped halo exchange's wait after its window op's interior).
  double wait_ms = 0;
  double median_ms = 0;  // the median over runs of its time in one run (the warm-up's included)
};

struct Profile {
  std::vector<KernelProfile> kernels;  // slowest first
  int64_t runs = 0;
  // Where some kernel streams its weights: the plan's thread count, at
  // which table() measures this host's DRAM read bandwidth (the median of
  // cpu::dram_read_bandwidth's passes) unless dram_read_gbs is set; else 0.
  int dram_threads = 0;
  double dram_read_gbs = 0;
  // One line per kernel: ms per run (the mean) and the median run's, share,
  // op, impl, node; fallbacks marked; a weight-streaming kernel's GB/s in
  // its median run and its share of the DRAM read bandwidth after the node,
  // and their sum (of medians, and of means) after the total. Medians:
  // one preempted call in 21 moved a 4 MB product's mean from 0.9 of the
  // bandwidth to 0.25.
  std::string table() const;
};

class ExecutablePlan {
 public:
  // Throws Error(kUnsupported) for an op no kernel handles and
  // Error(kUsage) for a backend this build or machine cannot run.
  static ExecutablePlan compile(const Graph& g, const RunOptions& options = {});
  // Takes the graph and frees each constant as soon as the kernels that read
  // it hold prepacked copies, so that peak memory holds the weights once.
  static ExecutablePlan compile(Graph&& g, const RunOptions& options = {});

  ExecutablePlan(ExecutablePlan&&) noexcept;
  ExecutablePlan& operator=(ExecutablePlan&&) noexcept;
  ~ExecutablePlan();

  // One tensor per graph input, in order, types must match; returns the
  // graph outputs. Not reentrant: one run at a time per plan. The plan keeps
  // a reference to the outputs it returned and writes the next run's into
  // the same storage where the caller has dropped every copy of them (no
  // new allocation); outputs the caller still holds are never overwritten.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);

  // Per graph output, the input whose buffer it can be computed in, or -1:
  // the output is made by a kernel that may write in place over (a view
  // of) that input, of its type, and nothing reads the input after that
  // kernel (a fixed-length KV cache written at cache_position by
  // ScatterElements or ScatterND: only the updates are written, the cache
  // is not copied). JAX's donate_argnums, decided per plan.
  const std::vector<int64_t>& in_place_inputs() const;
  // As run(inputs), with the inputs for which `donated` is true given up by
  // the caller: each output that in_place_inputs() pairs with one of them
  // is returned in that input's storage (the same Tensor storage, no copy),
  // and the input's value is lost. A donated tensor whose storage is shared
  // (another copy of the Tensor, a view of a file) is copied first, so that
  // nothing else the caller holds changes.
  std::vector<Tensor> run(std::vector<Tensor>& inputs, const std::vector<bool>& donated);

  MemoryReport memory() const;
  Profile profile() const;  // empty unless compiled with profile = true
  const RunOptions& options() const;
  int64_t num_kernels() const;
  // When the plan starts, finishes and runs its collectives, one line each
  // (describe_collective_steps in runtime/schedule.h); empty without any.
  std::string collective_steps() const;

  class Impl;

 private:
  explicit ExecutablePlan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::runtime
