#include "runtime/thread_scope.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace tessera::runtime {

PinnedTeam::PinnedTeam(int threads) {
  if (threads < 2 || omp_get_proc_bind() != omp_proc_bind_false || omp_in_parallel()) return;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0 || CPU_COUNT(&mask) < threads) return;
  // The caller's pool keeps its workers bound between scopes: where the
  // last scope's CPUs are all still allowed, the team takes them again, the
  // caller moving back to its own first (a caller that had drifted onto a
  // worker's CPU would otherwise wake that worker onto its own core, the
  // placement the binding is for). Else the caller stays where it is and the
  // others take the CPUs after it.
  thread_local std::vector<int> last;
  bool again = static_cast<int>(last.size()) == threads;
  for (int c : last) again = again && CPU_ISSET(c, &mask);
  if (again) {
    cpus_ = last;
  } else {
    std::vector<int> allowed;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mask)) allowed.push_back(c);
    const int here = sched_getcpu();
    auto first = std::find(allowed.begin(), allowed.end(), here);
    const size_t start = first == allowed.end() ? 0 : static_cast<size_t>(first - allowed.begin());
    for (int t = 0; t < threads; ++t) cpus_.push_back(allowed[(start + static_cast<size_t>(t)) % allowed.size()]);
  }
  saved_.assign(static_cast<size_t>(threads), mask);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  CPU_SET(cpus_[0], &mine);
  if (sched_setaffinity(0, sizeof mine, &mine) != 0) {
    cpus_.clear();
    return;
  }
  bool all = true;
#pragma omp parallel num_threads(threads) reduction(&& : all)
  {
    const auto t = static_cast<size_t>(omp_get_thread_num());
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus_[t], &one);
    all = omp_get_num_threads() == threads &&
          (t == 0 || (sched_getaffinity(0, sizeof saved_[t], &saved_[t]) == 0 &&
                      sched_setaffinity(0, sizeof one, &one) == 0));
  }
  if (!all) {  // a smaller team (nested, or a limit): leave every thread as it was
#pragma omp parallel num_threads(threads)
    {
      const auto t = static_cast<size_t>(omp_get_thread_num());
      if (t < saved_.size()) sched_setaffinity(0, sizeof saved_[t], &saved_[t]);
    }
    cpus_.clear();
    last.clear();
    return;
  }
  last = cpus_;
}

PinnedTeam::~PinnedTeam() {
  if (!cpus_.empty()) sched_setaffinity(0, sizeof saved_[0], &saved_[0]);
}

int LoadWatch::loadavg_running() {
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  double avg1 = 0, avg5 = 0, avg15 = 0;
  int running = 0;
  return std::sscanf(buf, "%lf %lf %lf %d", &avg1, &avg5, &avg15, &running) == 4 ? running : -1;
}

bool LoadWatch::verdict(int cores, int own) const {
  int running = running_();
  return running >= 0 && running - own >= cores;
}

bool LoadWatch::oversubscribed_at_start(int cores) {
  if (sampled_once_ && std::chrono::steady_clock::now() - sampled_ < std::chrono::seconds(1)) return oversubscribed_;
  return verdict(cores, 1);
}

void LoadWatch::sample_at_end(int cores, int team) {
  oversubscribed_ = verdict(cores, team);
  sampled_ = std::chrono::steady_clock::now();
  sampled_once_ = true;
}

}  // namespace tessera::runtime
