// PinnedTeam (runtime/thread_scope.h): a run's OpenMP threads each on a CPU
// of their own while it lasts, the caller's affinity as it was after.
#include "runtime/thread_scope.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <atomic>
#include <random>
#include <thread>

#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

int allowed_cpus() {
  cpu_set_t mask;
  return sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 0;
}

// Each team thread's affinity mask, by thread number.
std::vector<cpu_set_t> team_masks(int threads) {
  std::vector<cpu_set_t> masks(static_cast<size_t>(threads));
  int team = 0;
#pragma omp parallel num_threads(threads)
  {
    sched_getaffinity(0, sizeof(cpu_set_t), &masks[static_cast<size_t>(omp_get_thread_num())]);
#pragma omp single
    team = omp_get_num_threads();
  }
  EXPECT_EQ(team, threads);
  return masks;
}

TEST(PinnedTeam, BindsEachThreadToItsOwnCpuAndGivesTheCallerItsMaskBack) {
  if (allowed_cpus() < 2) GTEST_SKIP() << "one CPU in this process's affinity mask: nothing to bind";
  if (omp_get_proc_bind() != omp_proc_bind_false) GTEST_SKIP() << "OMP_PROC_BIND set: the OpenMP runtime binds";
  std::vector<cpu_set_t> before = team_masks(2);
  {
    PinnedTeam pinned(2);
    ASSERT_EQ(pinned.cpus().size(), 2u);
    EXPECT_NE(pinned.cpus()[0], pinned.cpus()[1]);
    std::vector<cpu_set_t> inside = team_masks(2);
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_EQ(CPU_COUNT(&inside[t]), 1) << "thread " << t;
      EXPECT_TRUE(CPU_ISSET(pinned.cpus()[t], &inside[t])) << "thread " << t;
    }
  }
  // The caller's mask is its own again; the worker stays on its CPU, where
  // the next run's wake finds it.
  std::vector<cpu_set_t> after = team_masks(2);
  EXPECT_TRUE(CPU_EQUAL(&before[0], &after[0]));
  EXPECT_EQ(CPU_COUNT(&after[1]), 1);
}

TEST(PinnedTeam, LeavesThreadsAloneWhereBindingCannotHelp) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  for (int threads : {1, allowed_cpus() + 1}) {
    PinnedTeam pinned(threads);
    EXPECT_TRUE(pinned.cpus().empty()) << threads << " threads";
    cpu_set_t now;
    ASSERT_EQ(sched_getaffinity(0, sizeof now, &now), 0);
    EXPECT_TRUE(CPU_EQUAL(&before, &now)) << threads << " threads";
  }
}

// A run binds its team and gives the caller its mask back; the results are
// the reference's with and without binding.
TEST(PinnedTeam, ARunGivesTheCallerItsMaskBack) {
  std::mt19937 rng(21);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {64, 256}});
  ValueId m = g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {256, 256}, rng))});
  g.set_outputs({g.add(OpKind::kRelu, {m})});
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  for (bool pin : {true, false}) {
    RunOptions o;
    o.threads = 2;
    o.one_thread_runs = RunOptions::OneThreadRuns::kNever;
    o.pin_threads = pin;
    expect_matches_reference(g, o);
    cpu_set_t now;
    ASSERT_EQ(sched_getaffinity(0, sizeof now, &now), 0);
    EXPECT_TRUE(CPU_EQUAL(&before, &now)) << "pin_threads " << pin;
  }
}

// The oversubscription test leaves this process's own runnable threads out
// (a run's workers still spinning from the last run are not load): two
// spinning threads count, and stop counting once they end.
TEST(OwnRunningThreads, CountsThisProcesssSpinningThreads) {
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 2; ++i)
    spinners.emplace_back([&] {
      started.fetch_add(1);
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  while (started.load() < 2) {
  }
  int with = own_running_threads();
  stop = true;
  for (std::thread& t : spinners) t.join();
  int after = own_running_threads();
  EXPECT_GE(with, 3);  // the spinners and this thread
  EXPECT_LE(after, with - 2);
  EXPECT_GE(after, 1);
}

}  // namespace
}  // namespace tessera::runtime
