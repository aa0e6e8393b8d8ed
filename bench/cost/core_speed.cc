// How steadily this host runs each of its cores, for reading bench_host.py's
// two-thread figures. Each logical CPU in turn, a thread pinned to it times
// a fixed loop over a buffer that lives in its L2 (a scale-and-add pass over
// 256 KB); then every CPU at once, each on its own buffer. Prints one JSON
// object: per CPU, and for all at once (the slowest thread of each step), the
// samples' times in microseconds, in the order taken.
//
// Why: on a 2-vCPU guest (Zen 4, 2026-12-02) each vCPU ran the loop at one of
// two speeds, 19-20 us or 33-37 us, switching between them independently of
// the other within seconds; a kernel whose work oneDNN splits statically
// over both threads runs at the pace of the slower one, so a two-thread
// measurement taken while either vCPU is slow is too slow by up to 1.8x.
// The model prices the machine at full speed; this says how often it was.
//
// Usage: core_speed [--seconds S] (default 1: S / (CPUs + 1) per part)
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kFloats = 64 * 1024;  // 256 KB: inside any L2 this runs on

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Passes back to back for a window of 5 ms, the fastest one's time: the
// core kept busy, as a benchmark keeps it (between sleeps a vCPU is halted
// and resumes slower), and a pass cut by descheduling is not a sample.
double window_us(std::vector<float>& buf) {
  double best = 1e30;
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  for (auto t0 = std::chrono::steady_clock::now(); t0 < end;) {
    float* p = buf.data();
    for (size_t i = 0; i < buf.size(); ++i) p[i] = p[i] * 0.999f + 0.001f;
    asm volatile("" : : "r"(p) : "memory");
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count());
    t0 = t1;
  }
  return best;
}

// Samples on `cpus` at once until `seconds` have passed; each sample is the
// slowest thread's window (what a statically split kernel waits for).
std::vector<double> samples(const std::vector<int>& cpus, double seconds) {
  std::vector<std::vector<double>> per(cpus.size());
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < cpus.size(); ++t)
    threads.emplace_back([&, t] {
      pin(cpus[t]);
      std::vector<float> buf(kFloats, 0.5f);
      window_us(buf);  // first touch
      while (std::chrono::steady_clock::now() < end) per[t].push_back(window_us(buf));
    });
  for (std::thread& th : threads) th.join();
  size_t n = per[0].size();
  for (const auto& v : per) n = std::min(n, v.size());
  std::vector<double> out(n, 0.0);
  for (const auto& v : per)
    for (size_t i = 0; i < n; ++i) out[i] = std::max(out[i], v[i]);
  return out;
}

void print(const char* name, const std::vector<double>& v, bool last) {
  std::printf("\"%s\": [", name);
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%.1f", i ? ", " : "", v[i]);
  std::printf("]%s", last ? "" : ", ");
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::stod(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: core_speed [--seconds S]\n");
      return 1;
    }
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  double part = seconds / static_cast<double>(cpus.size() + 1);
  std::printf("{");
  for (int c : cpus) print(("cpu" + std::to_string(c)).c_str(), samples({c}, part), false);
  print("all", samples(cpus, part), true);
  std::printf("}\n");
  return 0;
}
