#include "runtime/thread_scope.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace tessera::runtime {

PinnedTeam::PinnedTeam(int threads) {
  if (threads < 2 || omp_get_proc_bind() != omp_proc_bind_false || omp_in_parallel()) return;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0 || CPU_COUNT(&mask) < threads) return;
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) allowed.push_back(c);
  // The caller stays where it is; the others take the CPUs after it.
  const int here = sched_getcpu();
  auto first = std::find(allowed.begin(), allowed.end(), here);
  const size_t start = first == allowed.end() ? 0 : static_cast<size_t>(first - allowed.begin());
  for (int t = 0; t < threads; ++t) cpus_.push_back(allowed[(start + static_cast<size_t>(t)) % allowed.size()]);
  saved_.assign(static_cast<size_t>(threads), mask);
  bool all = true;
#pragma omp parallel num_threads(threads) reduction(&& : all)
  {
    const auto t = static_cast<size_t>(omp_get_thread_num());
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus_[t], &one);
    all = omp_get_num_threads() == threads && sched_getaffinity(0, sizeof saved_[t], &saved_[t]) == 0 &&
          sched_setaffinity(0, sizeof one, &one) == 0;
  }
  if (!all) {  // a smaller team (nested, or a limit): leave every thread as it was
#pragma omp parallel num_threads(threads)
    {
      const auto t = static_cast<size_t>(omp_get_thread_num());
      if (t < saved_.size()) sched_setaffinity(0, sizeof saved_[t], &saved_[t]);
    }
    cpus_.clear();
  }
}

PinnedTeam::~PinnedTeam() {
  if (!cpus_.empty()) sched_setaffinity(0, sizeof saved_[0], &saved_[0]);
}

int own_running_threads() {
  int running = 0;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    // "tid (comm) S ...": comm may hold spaces and parentheses, the state
    // follows the last ')'.
    size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'R') ++running;
  }
  closedir(dir);
  return running;
}

bool cores_oversubscribed(int cores) {
  std::ifstream in("/proc/loadavg");
  double avg1 = 0, avg5 = 0, avg15 = 0;
  int running = 0;
  if (!(in >> avg1 >> avg5 >> avg15 >> running)) return false;
  if (running <= cores) return false;
  return running - own_running_threads() >= cores;
}

}  // namespace tessera::runtime
