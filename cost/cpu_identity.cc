#include "cost/cpu_identity.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

namespace tessera::cost {

namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// "0xd0c" or "207" -> integer; 0 when it is neither.
int parse_int(const std::string& s) { return static_cast<int>(std::strtol(s.c_str(), nullptr, 0)); }

bool in(int v, int lo, int hi) { return v >= lo && v <= hi; }

// Xeon Scalable (Skylake-SP, Cascade Lake) SKUs with one 512-bit FMA unit:
// Bronze 31xx, Silver 41xx and Gold 51xx but the 5122 (Intel ARK, "# of
// AVX-512 FMA Units"). A masked name gives no SKU: the table assumes two,
// as on the Platinum 8xxx and Gold 6xxx parts cloud hosts mostly run.
bool one_fma512_unit_sku(const std::string& name) {
  if (name.find("Bronze") != std::string::npos || name.find("Silver") != std::string::npos) return true;
  auto gold = name.find("Gold 5");
  return gold != std::string::npos && name.compare(gold, 9, "Gold 5122") != 0;
}

Microarch intel(const CpuIdentity& id) {
  const int m = id.model;
  const std::string manual = "Intel 64 and IA-32 Architectures Optimization Reference Manual (248966)";
  Microarch a;
  a.int8_dot = id.has("avx512_vnni") || id.has("avx_vnni");
  a.bf16_dot = id.has("avx512_bf16");
  a.fp16_fma = id.has("avx512_fp16");
  if (id.family == 6 && (m == 0x8F || m == 0xCF || m == 0xAD || m == 0xAE)) {
    // Sapphire, Emerald and Granite Rapids: two 512-bit FMA units per core
    // (ports 0+1 fused and port 5) on every SKU; AMX TMUL: TDPBF16PS
    // computes a 16x16 f32 tile from 16x32 bf16 operands (16*16*32 MACs)
    // in 16 cycles, 1024 BF16 FLOP per cycle; TDPBSSD twice that in int8.
    a.name = m == 0x8F ? "sapphire-rapids" : m == 0xCF ? "emerald-rapids" : "granite-rapids";
    a.fma_units = 2;
    a.fma_bits = 512;
    if (id.has("amx_bf16")) a.amx_bf16_flops_per_cycle = 1024;
    if (id.has("amx_int8")) a.amx_int8_ops_per_cycle = 2048;
    // L3 per core: 1.875 MB on Sapphire Rapids, 5 MB on Emerald Rapids
    // (320 MB over 64 cores on the 8592+), Granite Rapids 504 MB / 128.
    a.l3_bytes_per_core = m == 0x8F ? 1966080 : m == 0xCF ? 5 << 20 : 4128768;
    // One core through the mesh: 10.5 bytes per cycle from L3 and 10 GB/s
    // from DRAM, measured by `tessera cost --calibrate` on an Emerald
    // Rapids VM (2.5 GHz; L3 25-27 GB/s, DRAM 8-14 GB/s over five runs),
    // about a third of what a Zen core streams from its CCX (the reference).
    a.l3_bytes_per_cycle = 10.5;
    a.dram_bytes_per_s = 10e9;
    a.source = manual + ", ch. 'Sapphire Rapids' (two FMA-512 units) and 'Intel AMX' (TMUL throughput); "
               "Intel ARK (L3 per SKU)";
    return a;
  }
  if (id.family == 6 && (m == 0x6A || m == 0x6C)) {
    a.name = "ice-lake-sp";
    a.fma_units = 2;  // every 3rd-generation Xeon Scalable SKU (ARK: 2 AVX-512 FMA units)
    a.fma_bits = 512;
    a.l3_bytes_per_core = 1572864;  // 1.5 MB per core
    a.source = manual + ", ch. 'Ice Lake Server'; Intel ARK";
    return a;
  }
  if (id.family == 6 && m == 0x55) {
    a.name = "skylake-sp";  // and Cascade/Cooper Lake, which share the model number
    a.fma_units = one_fma512_unit_sku(id.model_name) ? 1 : 2;
    a.fma_bits = 512;
    a.l3_bytes_per_core = 1441792;  // 1.375 MB per core
    a.source = manual + ", §'Skylake Server Microarchitecture' (port 0+1 FMA, second FMA on port 5 by SKU); "
               "Intel ARK '# of AVX-512 FMA Units'";
    return a;
  }
  if (id.family == 6 && (m == 0x7D || m == 0x7E || m == 0x8C || m == 0x8D || m == 0xA7) && id.has("avx512f")) {
    // Ice Lake, Tiger Lake, Rocket Lake clients: AVX-512 on the fused
    // port 0+1 unit only, the same FLOP per cycle as two 256-bit FMAs.
    a.name = "ice-lake-client";
    a.fma_units = 1;
    a.fma_bits = 512;
    a.source = manual + ", ch. 'Ice Lake Client' (one FMA-512 on ports 0+1)";
    return a;
  }
  if (id.has("avx512f")) {
    a.name = "generic-intel-avx512";
    a.fma_units = id.model_name.find("Xeon") != std::string::npos ? 2 : 1;
    a.fma_bits = 512;
    a.source = "unlisted Intel AVX-512 part: two FMA-512 units on a Xeon, one elsewhere (assumed)";
    return a;
  }
  if (id.has("fma") && id.has("avx2")) {
    // Haswell through Alder/Raptor Lake performance cores: ports 0 and 1.
    a.name = "intel-avx2";
    a.fma_units = 2;
    a.fma_bits = 256;
    a.source = manual + ", ch. 'Haswell Microarchitecture' (two FMA-256 on ports 0 and 1)";
    return a;
  }
  a.name = "generic-intel-sse";
  a.fma_units = 1;  // separate multiply and add ports: one multiply-add per cycle
  a.fma_bits = id.has("avx") ? 256 : 128;
  a.source = "Intel part without FMA: one multiply and one add per cycle (assumed)";
  return a;
}

Microarch amd(const CpuIdentity& id) {
  const int f = id.family, m = id.model;
  Microarch a;
  a.int8_dot = id.has("avx512_vnni") || id.has("avx_vnni");
  a.bf16_dot = id.has("avx512_bf16");
  a.fma_units = 2;
  a.fma_bits = 256;
  if (f == 0x17 && m < 0x30) {
    // Zen, Zen+: four 128-bit FP pipes, two of them FMA; a 256-bit
    // instruction is two ops.
    a.name = "zen1";
    a.fma_bits = 128;
    a.l3_bytes_per_core = 2 << 20;
    a.source = "AMD Software Optimization Guide for AMD Family 17h Processors (55723), §2.11 'Floating-Point Unit'";
    return a;
  }
  if (f == 0x17) {
    a.name = "zen2";
    a.l3_bytes_per_core = 4 << 20;
    a.source = "AMD Software Optimization Guide for AMD Family 17h Models 30h and Greater (56305), §2.11: "
               "two 256-bit FMA pipes";
    return a;
  }
  if (f == 0x19 && id.has("avx512f")) {
    // Genoa, Raphael, Phoenix, Bergamo: AVX-512 on the 256-bit datapath,
    // a 512-bit op takes each FMA pipe for two cycles.
    a.name = "zen4";
    a.l3_bytes_per_core = 4 << 20;  // 32 MB per 8-core CCD
    a.source = "Software Optimization Guide for the AMD Zen4 Microarchitecture (57647), §2.11: "
               "512-bit instructions execute as two 256-bit halves on the two FMA pipes";
    return a;
  }
  if (f == 0x19) {
    a.name = "zen3";
    a.l3_bytes_per_core = 4 << 20;
    a.source = "Software Optimization Guide for AMD EPYC 7003 Processors (56665), §2.11: two 256-bit FMA pipes";
    return a;
  }
  if (f == 0x1A) {
    // Zen 5: Turin (models 00h-1Fh) and Granite Ridge (40h-4Fh) have the
    // full 512-bit datapath; the mobile APUs (Strix 20h-2Fh, Krackan and
    // Strix Halo 60h-7Fh) keep 256-bit pipes.
    bool narrow = in(m, 0x20, 0x2F) || in(m, 0x60, 0x7F);
    a.name = narrow ? "zen5-mobile" : "zen5";
    a.fma_bits = narrow || !id.has("avx512f") ? 256 : 512;
    a.l3_bytes_per_core = 4 << 20;
    a.source = "Software Optimization Guide for the AMD Zen5 Microarchitecture (58455), §2.11: "
               "two FMA pipes, 512 bits wide on desktop and server parts";
    return a;
  }
  a.name = id.has("avx2") ? "generic-amd-avx2" : "generic-amd";
  a.fma_bits = id.has("avx2") ? 256 : 128;
  a.source = "unlisted AMD part: two FMA pipes of its widest vector (assumed)";
  return a;
}

Microarch arm(const CpuIdentity& id) {
  Microarch a;
  a.int8_dot = id.has("asimddp");
  a.bf16_dot = id.has("bf16");
  a.fp16_fma = id.has("asimdhp");
  a.fma_bits = 128;
  bool arm_ltd = id.vendor == "arm-0x41";
  switch (arm_ltd ? id.model : -1) {
    case 0xd0c:  // Graviton2, Ampere Altra
      a.name = "neoverse-n1";
      a.fma_units = 2;
      a.source = "Arm Neoverse N1 Software Optimization Guide: ASIMD FMA Q-form throughput 2 (pipes V0, V1)";
      return a;
    case 0xd49:
      a.name = "neoverse-n2";
      a.fma_units = 2;
      a.source = "Arm Neoverse N2 Software Optimization Guide: two 128-bit ASIMD/SVE2 FMA pipes";
      return a;
    case 0xd40:  // Graviton3
      a.name = "neoverse-v1";
      a.fma_units = 4;
      a.source = "Arm Neoverse V1 Software Optimization Guide: four 128-bit ASIMD FMA pipes (two 256-bit SVE)";
      return a;
    case 0xd4f:  // Graviton4, Grace
      a.name = "neoverse-v2";
      a.fma_units = 4;
      a.source = "Arm Neoverse V2 Software Optimization Guide: four 128-bit ASIMD/SVE2 FMA pipes";
      return a;
    default:
      a.name = "generic-arm";
      a.fma_units = 2;
      a.source = "unlisted ARM part: two 128-bit ASIMD FMA pipes (assumed)";
      return a;
  }
}

// Cycles per second of a chain of dependent register adds (one cycle each
// on every core in the table; add-immediate chains are not used, as Golden
// Cove folds them at rename and runs them faster than one per cycle). The
// fastest of 40 windows of 0.4 M adds (~150 us each, ~6 ms in all): on a
// busy machine most windows run undisturbed. 0 where there is no probe.
}  // namespace

int64_t CpuIdentity::cores() const {
  return std::max<int64_t>(1, logical_cpus / std::max<int64_t>(1, threads_per_core));
}

std::string CpuIdentity::cache_key() const {
  std::ostringstream k;
  k << (vendor.empty() ? "unknown" : vendor) << "-" << family << "-" << model << "-" << stepping << "-";
  for (char c : model_name) k << (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  k << "-" << cores() << "c";
  return k.str();
}

std::string CpuIdentity::summary() const {
  std::ostringstream s;
  s << (model_name.empty() ? vendor : model_name) << " (family " << family << " model " << model << ", " << cores()
    << (cores() == 1 ? " core)" : " cores)");
  return s.str();
}

int64_t count_cpu_list(std::string_view list) {
  int64_t n = 0;
  std::stringstream ss{std::string(list)};
  std::string part;
  while (std::getline(ss, part, ',')) {
    part = trim(part);
    if (part.empty()) continue;
    auto dash = part.find('-');
    if (dash == std::string::npos) n += 1;
    else n += std::atoll(part.substr(dash + 1).c_str()) - std::atoll(part.substr(0, dash).c_str()) + 1;
  }
  return n;
}

int64_t parse_cache_size(std::string_view size) {
  std::string s = trim(size);
  if (s.empty()) return 0;
  int64_t v = std::atoll(s.c_str());
  switch (s.back()) {
    case 'K': return v << 10;
    case 'M': return v << 20;
    case 'G': return v << 30;
    default: return v;
  }
}

CpuIdentity parse_cpuinfo(std::string_view text) {
  CpuIdentity id;
  std::stringstream in{std::string(text)};
  std::string line;
  int processors = 0;
  bool first = true;  // fields of the first processor entry only
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = trim(std::string_view(line).substr(0, colon));
    std::string value = trim(std::string_view(line).substr(colon + 1));
    if (key == "processor") {
      first = processors == 0;
      ++processors;
      continue;
    }
    if (!first) continue;
    if (key == "vendor_id") id.vendor = value;
    else if (key == "cpu family") id.family = parse_int(value);
    else if (key == "model") id.model = parse_int(value);
    else if (key == "stepping") id.stepping = parse_int(value);
    else if (key == "model name") id.model_name = value;
    else if (key == "cpu MHz") id.mhz = std::atof(value.c_str());
    else if (key == "CPU implementer") id.vendor = "arm-" + value;
    else if (key == "CPU architecture") id.family = parse_int(value);
    else if (key == "CPU part") id.model = parse_int(value);
    else if (key == "CPU variant") id.stepping = parse_int(value);
    else if (key == "flags" || key == "Features") {
      std::stringstream ss(value);
      std::string f;
      while (ss >> f) id.flags.insert(f);
    }
  }
  id.logical_cpus = std::max(1, processors);
  id.arch = id.vendor.rfind("arm-", 0) == 0 ? "aarch64" : "x86_64";
  return id;
}

void add_sysfs_cache(CpuIdentity& id, std::string_view level, std::string_view type, std::string_view size,
                     std::string_view shared_cpu_list) {
  if (trim(type) == "Instruction") return;
  CpuCache c;
  c.level = parse_int(trim(level));
  c.bytes = parse_cache_size(size);
  c.shared_cpus = std::max<int64_t>(1, count_cpu_list(shared_cpu_list));
  if (c.level <= 0 || c.bytes <= 0) return;
  id.caches.push_back(c);
  std::stable_sort(id.caches.begin(), id.caches.end(),
                   [](const CpuCache& a, const CpuCache& b) { return a.level < b.level; });
}

Microarch classify(const CpuIdentity& id) {
  if (id.arch == "aarch64") return arm(id);
  if (id.vendor == "AuthenticAMD" || id.vendor == "HygonGenuine") return amd(id);
  return intel(id);
}

}  // namespace tessera::cost
