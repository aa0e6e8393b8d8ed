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
// Then, for the first CPU with each other one, the cost of handing data
// between them: the round trip of one cache line bounced between two pinned
// threads (median of 20 blocks of 2000 trips, ns), and the rate at which one
// core reads 1 MB the other has just written (the fastest of 30 hand-overs,
// GB/s). Why: on the 2-vCPU Zen 5 guest (2026-12-04) the round trip was
// 73-110 ns for minutes, then 440-460 ns for minutes (the hand-over read 112
// GB/s, then 40), while the L2 loop above ran at the same speed throughout:
// the hypervisor moves the vCPUs between cores that share a last cache and
// cores that do not. In the second state the runtime's two-thread kernels
// that read what the other thread wrote ran up to 3x slower (the Winograd
// rule's output Transpose at 64ch 56px: 34 -> 100 us), and the parallel
// kernels of small models paid the slower fork and join.
//
// Usage: core_speed [--seconds S] (default 1: S / (CPUs + 1) per part)
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
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

// The median over blocks of a cache line's round trip between threads on
// cpus a and b (ns).
double round_trip_ns(int a, int b) {
  constexpr int kTrips = 2000, kBlocks = 20;
  alignas(128) std::atomic<int64_t> line{0};
  std::thread other([&] {
    pin(b);
    for (int64_t i = 0; i < int64_t{kTrips} * kBlocks; ++i) {
      while (line.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      line.store(2 * i + 2, std::memory_order_release);
    }
  });
  pin(a);
  std::vector<double> blocks;
  for (int64_t blk = 0, i = 0; blk < kBlocks; ++blk) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kTrips; ++k, ++i) {
      line.store(2 * i + 1, std::memory_order_release);
      while (line.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
    blocks.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kTrips);
  }
  other.join();
  std::sort(blocks.begin(), blocks.end());
  return blocks[blocks.size() / 2];
}

// The fastest of 30 hand-overs: the thread on cpu b writes 1 MB, then the
// one on cpu a reads a float of every line of it (GB/s of the 1 MB).
double handover_gbps(int a, int b) {
  constexpr int kRounds = 30;
  std::vector<float> buf(256 * 1024, 1.0f);
  std::atomic<int> phase{0};
  std::thread writer([&] {
    pin(b);
    for (int r = 0; r < kRounds; ++r) {
      while (phase.load(std::memory_order_acquire) != 2 * r) {
      }
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(r) + static_cast<float>(i);
      phase.store(2 * r + 1, std::memory_order_release);
    }
  });
  pin(a);
  double best = 1e30;
  for (int r = 0; r < kRounds; ++r) {
    while (phase.load(std::memory_order_acquire) != 2 * r + 1) {
    }
    auto t0 = std::chrono::steady_clock::now();
    float sum = 0;
    for (size_t i = 0; i < buf.size(); i += 16) sum += buf[i];
    asm volatile("" : : "x"(sum));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    phase.store(2 * r + 2, std::memory_order_release);
  }
  writer.join();
  return static_cast<double>(buf.size() * sizeof(float)) / best / 1e9;
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
  print("all", samples(cpus, part), cpus.size() < 2);
  if (cpus.size() >= 2) {
    std::printf("\"handoff\": {");
    for (size_t i = 1; i < cpus.size(); ++i)
      std::printf("%s\"cpu%d-cpu%d\": {\"round_trip_ns\": %.1f, \"read_gbps\": %.1f}", i > 1 ? ", " : "", cpus[0],
                  cpus[i], round_trip_ns(cpus[0], cpus[i]), handover_gbps(cpus[0], cpus[i]));
    std::printf("}");
  }
  std::printf("}\n");
  return 0;
}
