// What a CPU is, and what that implies for its compute rates.
//
// CpuIdentity is what the OS says about the host: /proc/cpuinfo (vendor,
// family/model/stepping or ARM implementer/part, model name, ISA flags,
// logical CPUs) and sysfs (cache sizes and which CPUs share them,
// hyper-thread siblings). The parsers take the files' text, so tests feed
// recorded identities of other machines; calibrate/host_identity.h reads this
// one (the probe of its clock is a measurement of the host).
//
// Microarch is what the identity implies that no flag says: how many FMA
// pipes a core has and how wide they are (AVX-512 registers say nothing
// about that: Zen 4 runs them on 256-bit pipes, a Xeon Silver has one
// 512-bit FMA unit, a Gold 6xxx two), and what the matrix extensions add
// (AMX tiles, AVX-512 BF16 pairs, VNNI). Every figure in the table
// (cpu_identity.cc) names the manual it comes from.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::cost {

struct CpuCache {
  int level = 0;
  int64_t bytes = 0;
  int64_t shared_cpus = 1;  // logical CPUs that share one instance (sysfs shared_cpu_list)
};

struct CpuIdentity {
  std::string arch;        // "x86_64", "aarch64"
  std::string vendor;      // x86 vendor_id ("GenuineIntel", "AuthenticAMD"); ARM "arm-0x41" (implementer)
  int family = 0;          // x86 "cpu family"; ARM: the architecture (8)
  int model = 0;           // x86 "model"; ARM "CPU part" (0xd0c: Neoverse N1)
  int stepping = 0;        // x86 "stepping"; ARM "CPU variant"
  std::string model_name;  // "model name"; a hypervisor may mask it ("Intel(R) Xeon(R) Processor")
  std::set<std::string> flags;  // x86 "flags", ARM "Features"
  // The clock the cores run at: calibrate::read_host_identity() probes it (a chain of
  // dependent adds); parse_cpuinfo() gives "cpu MHz". 0: unknown.
  double mhz = 0;
  double nominal_mhz = 0;       // what the OS states (cpufreq maximum, else "cpu MHz")
  int64_t logical_cpus = 0;     // online logical CPUs
  int64_t threads_per_core = 1; // sysfs thread_siblings_list of cpu0
  std::vector<CpuCache> caches; // data and unified caches, by level
  int64_t memory_bytes = 0;     // physical memory

  int64_t cores() const;
  bool has(std::string_view flag) const { return flags.count(std::string(flag)) != 0; }
  bool virtualized() const { return has("hypervisor"); }
  // What a cached profile was measured on: vendor, family/model/stepping,
  // model name and core count. Two hosts with one key get one profile.
  std::string cache_key() const;
  // "Intel(R) Xeon(R) Processor (family 6 model 207, 2 cores)".
  std::string summary() const;
};

// Parses /proc/cpuinfo text (x86 or ARM): the first processor's fields and
// the number of processor entries (logical_cpus). Unknown fields are skipped.
CpuIdentity parse_cpuinfo(std::string_view text);
// One sysfs cache index (cpu0/cache/indexN): its level, type, size ("48K")
// and shared_cpu_list ("0-3,8-11"). Instruction caches are skipped; the
// caches stay sorted by level.
void add_sysfs_cache(CpuIdentity& id, std::string_view level, std::string_view type, std::string_view size,
                     std::string_view shared_cpu_list);
// Logical CPUs in a sysfs list such as "0-3,8-11".
int64_t count_cpu_list(std::string_view list);
// "48K", "1024K", "32M" -> bytes.
int64_t parse_cache_size(std::string_view size);

struct Microarch {
  std::string name;           // "zen4", "emerald-rapids", "neoverse-n1", "generic-avx2"
  int fma_units = 1;          // FMA pipes per core
  int fma_bits = 128;         // lanes each pipe covers per cycle, in bits
  bool fp16_fma = false;      // native FP16 FMA at twice the f32 lanes (AVX512-FP16)
  bool bf16_dot = false;      // BF16 pair dot products at twice the f32 rate (AVX512-BF16, ARM BF16)
  bool int8_dot = false;      // INT8 dot products at four times the f32 rate (VNNI, ARM SDOT)
  double amx_bf16_flops_per_cycle = 0;  // per core, AMX tiles (0: none)
  double amx_int8_ops_per_cycle = 0;
  // The last level's share per core on the part (the slice a core owns);
  // 0: unknown. A virtual machine sees the whole socket's L3 but shares it.
  int64_t l3_bytes_per_core = 0;
  // What one core streams (an Add, as calibration measures it) from the
  // shared last level and from DRAM: bounded by the core's outstanding
  // misses over the latency of the mesh or fabric, a property of the
  // microarchitecture more than of the part. 0: unknown (the reference
  // host's figures, cost/profiles/cpu.json, are used).
  double l3_bytes_per_cycle = 0;
  double dram_bytes_per_s = 0;
  std::string source;         // the documents the figures above come from

  double f32_flops_per_cycle() const { return 2.0 * fma_units * (fma_bits / 32); }
};

// The microarchitecture the identity names, or a generic entry from its
// flags (stated as such in `name` and `source`).
Microarch classify(const CpuIdentity& id);

}  // namespace tessera::cost
