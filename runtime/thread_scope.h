// The OpenMP thread count (which oneDNN's primitives use) for a scope, restored
// after: a plan compiles and runs under its own count, and a kernel built for
// one thread runs under one. And, for a run, the team's threads each on a core
// of its own.
#pragma once

#include <omp.h>
#include <sched.h>

#include <chrono>
#include <vector>

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

// Binds the first `threads` threads of the OpenMP pool, the calling thread
// first, each to one CPU of the calling thread's affinity mask: the CPUs the
// caller's last scope gave them where those are still allowed, else the
// caller to the CPU it is on and the others to the next ones of the mask in
// turn. The caller gets its mask back at the scope's end; the pool's workers
// stay where they were put.
//
// Why: libgomp's idle threads sleep after a short spin, and on a virtual
// machine the scheduler often wakes a sleeping worker on the waking thread's
// own vCPU (likely because the idle one reads as preempted): the two then
// share one core, the worker spinning at every barrier, until the load
// balancer moves one, milliseconds later. Measured on this project's 2-vCPU
// host, 200 two-thread regions of 20 us each after a 50 ms idle gap: 3.6 ms
// bound, 14 ms unbound in most rounds (the first region alone 6 ms, both
// threads on one CPU);
// SqueezeNet at 2 threads, single runs 50 ms apart, 3.9-4.2 ms bound against
// 4-16 ms unbound (ONNX Runtime, 4.0-4.7: its parallel loops hand out
// blocks from a shared counter to the caller and whichever workers run, so a
// late worker holds nothing up).
// Why the workers stay bound: one set free at the end of a run is woken on
// its waker's CPU at the next one, and the scope's own first region pays
// for it (after a 50 ms gap: median 0.17 ms but 4-8 ms in one run of ten;
// 0.07 ms, at most 0.11, with the worker left on its CPU).
//
// Does nothing where binding cannot help or is not ours to choose: one
// thread, fewer CPUs in the mask than threads, or an OpenMP runtime that
// binds already (OMP_PROC_BIND / OMP_PLACES set by the user).
class PinnedTeam {
 public:
  explicit PinnedTeam(int threads);
  ~PinnedTeam();
  PinnedTeam(const PinnedTeam&) = delete;
  PinnedTeam& operator=(const PinnedTeam&) = delete;

  // The CPU each team thread was bound to, by thread number; empty when the
  // scope did nothing.
  const std::vector<int>& cpus() const { return cpus_; }

 private:
  std::vector<int> cpus_;
  std::vector<cpu_set_t> saved_;
};

// Whether other processes' runnable threads fill the cores, for a run about
// to start: as many of them as cores, or more (Linux's /proc/loadavg, fourth
// field "running/total", less this process's own runnable threads). Then
// every fork-join of a multi-threaded run waits for a thread that shares
// its core: on 2 cores with two compilers running, bert_base at 2 threads
// took 1142 ms against 131 ms at 1. With one other runnable thread, two
// threads still paid off on the suite (the woken worker preempts it): the
// test counts others, not free cores.
//
// The file is read at the end of each run, where the run's team is what
// runs of this process (its workers spin for a while after the last
// region): others = running - team. A run starting within a second of that
// takes its verdict, one inter-run gap old, and reads nothing. Reading at
// the start instead cost 50-90 us after an idle gap (the first system call
// of a run on this VM), and telling the pool's still-spinning workers from
// other load there took a scan of /proc/self/task, 60-130 us (reading a
// thread's stat on another CPU): MNASNet at 2 threads, single runs 50 ms
// apart, 2.59 ms with the check at the start against 2.45 without it.
// Older than a second, or never taken: the file is read at the start, the
// workers asleep by then (others = running - 1).
class LoadWatch {
 public:
  // `running` reads the fourth field's first number; -1 where unknown.
  explicit LoadWatch(int (*running)() = &loadavg_running) : running_(running) {}

  bool oversubscribed_at_start(int cores);
  // After a run whose `team` threads are this process's runnable ones.
  void sample_at_end(int cores, int team);

  static int loadavg_running();

 private:
  bool verdict(int cores, int own) const;

  int (*running_)();
  std::chrono::steady_clock::time_point sampled_{};
  bool sampled_once_ = false;
  bool oversubscribed_ = false;
};

}  // namespace tessera::runtime
