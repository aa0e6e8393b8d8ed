// PinnedTeam (runtime/thread_scope.h): a run's OpenMP threads each on a CPU
// of their own while it lasts, the caller's affinity as it was after.
#include "runtime/thread_scope.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <random>

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

// A caller that drifted onto its worker's CPU between two runs moves back
// to its own: the team keeps its CPUs, so the worker wakes where it is
// bound and not on the caller's core.
TEST(PinnedTeam, ACallerOnItsWorkersCpuMovesBack) {
  if (allowed_cpus() < 2) GTEST_SKIP() << "one CPU in this process's affinity mask: nothing to bind";
  if (omp_get_proc_bind() != omp_proc_bind_false) GTEST_SKIP() << "OMP_PROC_BIND set: the OpenMP runtime binds";
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  std::vector<int> first;
  {
    PinnedTeam pinned(2);
    first = pinned.cpus();
  }
  ASSERT_EQ(first.size(), 2u);
  cpu_set_t on_worker;
  CPU_ZERO(&on_worker);
  CPU_SET(first[1], &on_worker);
  ASSERT_EQ(sched_setaffinity(0, sizeof on_worker, &on_worker), 0);  // the drift
  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);        // its mask as before, still on first[1]
  {
    PinnedTeam pinned(2);
    EXPECT_EQ(pinned.cpus(), first);
    EXPECT_EQ(sched_getcpu(), first[0]);
  }
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

// What /proc/loadavg's running count reads in the LoadWatch tests, and how
// often it was read.
int fake_running = 0;
int fake_reads = 0;
int read_fake() {
  ++fake_reads;
  return fake_running;
}

// At a run's end the team's threads are this process's runnable ones: on 2
// cores, 3 running with a team of 2 is one other thread (not
// oversubscribed), 4 is two. A run starting right after takes that verdict
// without reading the file again.
TEST(LoadWatch, CountsTheTeamOutAtARunsEnd) {
  LoadWatch w(&read_fake);
  fake_running = 3;
  w.sample_at_end(2, 2);
  fake_reads = 0;
  EXPECT_FALSE(w.oversubscribed_at_start(2));
  EXPECT_EQ(fake_reads, 0);
  fake_running = 4;
  w.sample_at_end(2, 2);
  EXPECT_TRUE(w.oversubscribed_at_start(2));
  EXPECT_EQ(fake_reads, 1);
}

// With no sample taken, the start reads the file, the caller its only
// runnable thread: 3 running on 2 cores is two others.
TEST(LoadWatch, ReadsAtTheStartWithoutASample) {
  LoadWatch w(&read_fake);
  fake_reads = 0;
  fake_running = 3;
  EXPECT_TRUE(w.oversubscribed_at_start(2));
  fake_running = 2;
  EXPECT_FALSE(w.oversubscribed_at_start(2));
  fake_running = -1;  // unknown: not oversubscribed
  EXPECT_FALSE(w.oversubscribed_at_start(2));
  EXPECT_EQ(fake_reads, 3);
}

TEST(LoadWatch, ReadsThisHostsLoad) {
  int running = LoadWatch::loadavg_running();
  EXPECT_GE(running, 1) << "this thread at least";
}

}  // namespace
}  // namespace tessera::runtime
