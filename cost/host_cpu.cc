// Host CPU detection: a profile from what the CPU is, no measurement.
//
// Where each figure comes from:
//   cores                 /proc/cpuinfo, sysfs topology (CpuIdentity)
//   clock                 a ~6 ms probe of dependent adds (calibrate::read_host_identity);
//                         the OS's figure (cpufreq, "cpu MHz") where it cannot run
//   FLOP per cycle        the microarchitecture table (classify(), cpu_identity.cc,
//                         which names the vendor manual of each entry): FMA pipes
//                         x their width, not the width of the ISA's registers
//   BF16/INT8/FP16 rates  AMX, AVX512-BF16, VNNI, AVX512-FP16 flags with the
//                         table's per-cycle throughput
//   cache sizes           sysfs (per core or shared, from shared_cpu_list); in a
//                         virtual machine the last level is capped at the part's
//                         share per core (the table), as the socket's other
//                         tenants use the rest
//   cache bandwidths      bytes per cycle per core of the reference host
//                         (cpu.json, measured), times this host's cores x clock;
//                         the L3's from the table where it states one (Intel's mesh)
//   DRAM bandwidth        per core from the table, else the reference host's, times
//                         the cores (capped at a socket's eight DDR5-4800 channels)
//   overheads, per-op     the reference host's (launch, parallel wake-up,
//   costs                 transcendental and permute costs): per-cycle properties
//                         of the runtime's kernels more than of the CPU
// Calibration (calibrate/calibrate.h) measures the rates and
// overwrites them.
#include <algorithm>
#include <sstream>

#include "cost/cpu_identity.h"
#include "cost/device_profile.h"
#include "graph/error.h"

namespace tessera::cost {

namespace {

// The reference host of cpu.json is a Zen 5 with the 512-bit datapath: two
// FMA-512 pipes, 64 f32 FLOP per cycle (AMD 58455). Its measured peak over
// that gives the clock it ran at (boost, above the nominal clock_ghz), the
// clock its measured bytes per cycle are per.
constexpr double kReferenceF32FlopsPerCycle = 64;
// Eight DDR5-4800 channels, 8 bytes each: 307 GB/s, what one socket of the
// parts in the table can stream at most.
constexpr double kSocketDramBandwidth = 307.2e9;

void set_peaks(DeviceProfile& p, const Microarch& a, double clock_hz) {
  double cores = static_cast<double>(p.units);
  double f32 = cores * clock_hz * a.f32_flops_per_cycle();
  // Vector and narrow types run on the same pipes: f64 at half the lanes,
  // 64-bit integers at a quarter (no 64-bit multiply-add), bool and i8 at
  // the f32 rate of element-wise work (the reference's ratios).
  p.vector_flops = {{DType::kF32, f32},        {DType::kF16, f32},        {DType::kBF16, f32},
                    {DType::kBool, f32},       {DType::kI8, f32},         {DType::kF64, f32 / 2},
                    {DType::kI32, f32 / 2},    {DType::kI64, f32 / 4}};
  p.matrix_flops = {{DType::kF32, f32}, {DType::kF64, f32 / 2}, {DType::kI32, f32 / 2}};
  // f16 at f32's rate even with AVX512-FP16: the CPU runtime computes f16
  // over f32 copies on every host (oneDNN 2.6 has no f16 CPU kernels), and
  // stores them so (DeviceProfile::widened).
  p.matrix_flops[DType::kF16] = f32;
  p.widened = {DType::kF16};
  p.matrix_flops[DType::kBF16] = a.amx_bf16_flops_per_cycle > 0 ? cores * clock_hz * a.amx_bf16_flops_per_cycle
                                 : a.bf16_dot                   ? 2 * f32
                                                                : f32;
  p.matrix_flops[DType::kI8] = a.amx_int8_ops_per_cycle > 0 ? cores * clock_hz * a.amx_int8_ops_per_cycle
                               : a.int8_dot                  ? 4 * f32
                                                             : 2 * f32;
}

}  // namespace

DeviceProfile detect_host_cpu(const CpuIdentity& id) {
  DeviceProfile ref = builtin_profile("cpu");
  DeviceProfile p = ref;
  Microarch a = classify(id);
  p.units = id.cores();
  p.clock_hz = id.mhz > 0 ? id.mhz * 1e6 : ref.clock_hz;
  set_peaks(p, a, p.clock_hz);
  // The micro-kernel's register block: 6 rows of 4 vectors with 32
  // registers (AVX-512, SVE), of 2 with 16 (AVX2, the oneDNN/BLIS 6x16).
  int64_t lanes = (id.has("avx512f") ? 512 : id.has("avx2") || id.has("avx") ? 256 : 128) / 32;
  p.register_tile = {6, lanes * (lanes >= 16 ? 4 : 2)};
  p.register_vector = lanes;

  double ref_clock = ref.peak_flops(DType::kF32, true) / (kReferenceF32FlopsPerCycle * static_cast<double>(ref.units));
  double core_cycles = static_cast<double>(p.units) * p.clock_hz / (static_cast<double>(ref.units) * ref_clock);
  // A reorder is a copy the cores run: its rate scales with them and the clock.
  p.reorder_bandwidth = ref.reorder_bandwidth * core_cycles;
  if (!id.caches.empty()) {
    std::vector<MemoryLevel> levels;
    for (const CpuCache& c : id.caches) {
      // The reference level with the same depth gives the bytes per cycle.
      size_t ri = std::min(static_cast<size_t>(std::max(1, c.level) - 1), ref.memory.size() - 2);
      MemoryLevel m = ref.memory[ri];
      m.name = "l" + std::to_string(c.level);
      m.per_unit = c.shared_cpus <= id.threads_per_core && p.units > 1;
      m.capacity_bytes = c.bytes;
      if (!m.per_unit && id.virtualized() && a.l3_bytes_per_core > 0 && c.level >= 3)
        m.capacity_bytes = std::min(c.bytes, a.l3_bytes_per_core * p.units);
      m.bandwidth = ref.memory[ri].bandwidth * core_cycles;
      if (c.level >= 3 && a.l3_bytes_per_cycle > 0)
        m.bandwidth = a.l3_bytes_per_cycle * p.clock_hz * static_cast<double>(p.units);
      if (!levels.empty() && !m.per_unit) {
        // Sizes must not shrink outward: a capped, non-inclusive L3 under
        // larger L2s (Sapphire Rapids: 1.875 MB of L3 per 2 MB L2) holds
        // at least what they do.
        const MemoryLevel& inner = levels.back();
        m.capacity_bytes = std::max(m.capacity_bytes, inner.capacity_bytes * (inner.per_unit ? p.units : 1));
      }
      levels.push_back(m);
    }
    p.memory = levels;
  }
  MemoryLevel dram = ref.main_memory();
  double dram_per_core = a.dram_bytes_per_s > 0 ? a.dram_bytes_per_s
                                                 : ref.main_memory().bandwidth / static_cast<double>(ref.units);
  dram.bandwidth = std::min(kSocketDramBandwidth, dram_per_core * static_cast<double>(p.units));
  if (id.memory_bytes > 0) dram.capacity_bytes = id.memory_bytes;
  if (id.caches.empty()) p.memory.back() = dram;
  else p.memory.push_back(dram);
  p.calibrated = false;
  std::ostringstream d;
  d << id.summary() << ", " << a.name << ": " << a.fma_units << " x " << a.fma_bits << "-bit FMA per core, "
    << a.f32_flops_per_cycle() << " f32 FLOP/cycle at " << p.clock_hz / 1e9 << " GHz";
  if (a.amx_bf16_flops_per_cycle > 0) d << ", AMX";
  if (a.bf16_dot) d << ", AVX512-BF16";
  d << "; detected";
  p.description = d.str();
  p.source = "detected: " + a.source + "; cores and caches from /proc/cpuinfo and sysfs, clock " +
             (id.mhz != id.nominal_mhz && id.nominal_mhz > 0 ? "probed" : "as the OS states it") + "; cache and DRAM "
             "bytes per cycle from the reference host (cost/profiles/cpu.json)";
  p.host_key.clear();
  p.host_summary = id.summary();
  p.validate();
  return p;
}

}  // namespace tessera::cost
