// Host detection from recorded identities (the /proc/cpuinfo and sysfs text
// of other machines): the microarchitecture each names, the FMA throughput
// it implies (not the SIMD width of its flags), the matrix extensions and
// the caches per core, and the profile detect_host_cpu builds from them.
#include "cost/cpu_identity.h"

#include <gtest/gtest.h>

#include "cost/device_profile.h"

namespace tessera::cost {
namespace {

// The first processor's lines as /proc/cpuinfo prints them, repeated for
// `cpus` processors.
std::string x86_cpuinfo(const std::string& vendor, int family, int model, int stepping, const std::string& name,
                        double mhz, const std::string& flags, int cpus) {
  std::string out;
  for (int i = 0; i < cpus; ++i) {
    out += "processor\t: " + std::to_string(i) + "\nvendor_id\t: " + vendor + "\ncpu family\t: " +
           std::to_string(family) + "\nmodel\t\t: " + std::to_string(model) + "\nmodel name\t: " + name +
           "\nstepping\t: " + std::to_string(stepping) + "\ncpu MHz\t\t: " + std::to_string(mhz) +
           "\ncache size\t: 1024 KB\nflags\t\t: " + flags + "\n\n";
  }
  return out;
}

const char* kBase = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
                    "sse2 ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid "
                    "pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand "
                    "hypervisor lahf_lm abm bmi1 avx2 smep bmi2 erms";
const char* kAvx512 = " avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512vbmi avx512_vbmi2 gfni vaes "
                      "vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq";

// The caches sysfs lists for two vCPUs of one AMD CCX: L1 and L2 per core,
// the L3 shared.
void add_ccx_caches(CpuIdentity& id, const std::string& l1d) {
  add_sysfs_cache(id, "1", "Data", l1d, "0");
  add_sysfs_cache(id, "1", "Instruction", "32K", "0");
  add_sysfs_cache(id, "2", "Unified", "1024K", "0");
  add_sysfs_cache(id, "3", "Unified", "32768K", "0-1");
}

// AWS m7a.large: AMD EPYC 9R14 (Genoa, Zen 4), 2 vCPUs, no SMT.
CpuIdentity zen4() {
  CpuIdentity id = parse_cpuinfo(x86_cpuinfo("AuthenticAMD", 25, 17, 1, "AMD EPYC 9R14 96-Core Processor", 3699.9,
                                             std::string(kBase) + kAvx512 + " avx512_bf16", 2));
  add_ccx_caches(id, "32K");
  id.memory_bytes = int64_t{8} << 30;
  return id;
}

// A 2-vCPU Firecracker guest on AMD EPYC Turin (Zen 5, family 26 model 2), the
// model name masked by the hypervisor, cpuinfo's MHz the nominal 2596 while
// the core runs at about 4.1 GHz (the clock is probed, cost/host_cpu.cc).
CpuIdentity zen5_turin() {
  CpuIdentity id = parse_cpuinfo(x86_cpuinfo("AuthenticAMD", 26, 2, 1, "AMD EPYC", 2596.12,
                                             std::string(kBase) + kAvx512 +
                                                 " avx_vnni avx512_bf16 avx512_vp2intersect",
                                             2));
  add_ccx_caches(id, "48K");
  id.memory_bytes = int64_t{24} << 30;
  return id;
}

// AWS m7i.xlarge: Xeon Platinum 8488C (Sapphire Rapids), 4 vCPUs, 2 per core.
CpuIdentity sapphire_rapids() {
  CpuIdentity id = parse_cpuinfo(x86_cpuinfo(
      "GenuineIntel", 6, 143, 8, "Intel(R) Xeon(R) Platinum 8488C", 2400.0,
      std::string(kBase) + kAvx512 + " avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8 avx_vnni", 4));
  id.threads_per_core = 2;
  add_sysfs_cache(id, "1", "Data", "48K", "0,2");
  add_sysfs_cache(id, "2", "Unified", "2048K", "0,2");
  add_sysfs_cache(id, "3", "Unified", "107520K", "0-3");
  id.memory_bytes = int64_t{16} << 30;
  return id;
}

// AWS c6g.large: Graviton2 (Arm Neoverse N1), 2 cores; ARM's cpuinfo has
// no vendor_id, model name or MHz.
CpuIdentity neoverse_n1() {
  std::string text;
  for (int i = 0; i < 2; ++i)
    text += "processor\t: " + std::to_string(i) +
            "\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp "
            "cpuid asimdrdm lrcpc dcpop asimddp ssbs\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
            "CPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n";
  CpuIdentity id = parse_cpuinfo(text);
  add_sysfs_cache(id, "1", "Data", "64K", "0");
  add_sysfs_cache(id, "2", "Unified", "1024K", "0");
  add_sysfs_cache(id, "3", "Unified", "32768K", "0-1");
  id.mhz = 2500;
  return id;
}

// An AVX2-only part: AMD EPYC 7R13 (Milan, Zen 3).
CpuIdentity zen3() {
  return parse_cpuinfo(x86_cpuinfo("AuthenticAMD", 25, 1, 1, "AMD EPYC 7R13 Processor", 2650.0, kBase, 2));
}

TEST(CpuIdentity, ParsesX86Cpuinfo) {
  CpuIdentity id = sapphire_rapids();
  EXPECT_EQ(id.arch, "x86_64");
  EXPECT_EQ(id.vendor, "GenuineIntel");
  EXPECT_EQ(id.family, 6);
  EXPECT_EQ(id.model, 143);
  EXPECT_EQ(id.stepping, 8);
  EXPECT_EQ(id.model_name, "Intel(R) Xeon(R) Platinum 8488C");
  EXPECT_DOUBLE_EQ(id.mhz, 2400.0);
  EXPECT_EQ(id.logical_cpus, 4);
  EXPECT_EQ(id.cores(), 2);
  EXPECT_TRUE(id.has("amx_tile"));
  EXPECT_TRUE(id.virtualized());
  ASSERT_EQ(id.caches.size(), 3u);  // the instruction cache is not a data level
  EXPECT_EQ(id.caches[1].bytes, 2048 << 10);
  EXPECT_EQ(id.caches[1].shared_cpus, 2);
  EXPECT_EQ(id.caches[2].shared_cpus, 4);
}

TEST(CpuIdentity, ParsesArmCpuinfo) {
  CpuIdentity id = neoverse_n1();
  EXPECT_EQ(id.arch, "aarch64");
  EXPECT_EQ(id.vendor, "arm-0x41");
  EXPECT_EQ(id.model, 0xd0c);
  EXPECT_EQ(id.logical_cpus, 2);
  EXPECT_TRUE(id.has("asimddp"));
  EXPECT_FALSE(id.has("avx2"));
}

TEST(CpuIdentity, SizesAndCpuLists) {
  EXPECT_EQ(parse_cache_size("48K"), 48 << 10);
  EXPECT_EQ(parse_cache_size("32M"), 32 << 20);
  EXPECT_EQ(parse_cache_size(""), 0);
  EXPECT_EQ(count_cpu_list("0-3,8-11"), 8);
  EXPECT_EQ(count_cpu_list("0,2"), 2);
  EXPECT_EQ(count_cpu_list("5"), 1);
}

// The host: AVX-512 flags on 256-bit pipes, half of what the SIMD
// width of its flags suggests.
// An AMD part of two FMA pipes `bits` wide, BF16 dot products and no AMX,
// its entry citing the optimization guide `manual`.
void expect_two_amd_pipes(const Microarch& a, const std::string& name, int bits, const std::string& manual) {
  EXPECT_EQ(a.name, name);
  EXPECT_EQ(a.fma_units, 2);
  EXPECT_EQ(a.fma_bits, bits);
  EXPECT_DOUBLE_EQ(a.f32_flops_per_cycle(), 2.0 * 2 * bits / 32);
  EXPECT_TRUE(a.bf16_dot);
  EXPECT_EQ(a.amx_bf16_flops_per_cycle, 0);
  EXPECT_NE(a.source.find(manual), std::string::npos) << a.source;
}

TEST(Microarch, Zen4RunsAvx512OnTwo256BitPipes) {
  Microarch a = classify(zen4());
  expect_two_amd_pipes(a, "zen4", 256, "57647");
  EXPECT_DOUBLE_EQ(a.f32_flops_per_cycle(), 32);
}

// Measured on that guest: the quick calibration's f32 GEMM peak was 261-270
// GFLOP/s per core, 64 FLOP per cycle at its 4.1-4.2 GHz.
TEST(Microarch, Zen5TurinHasTheFull512BitDatapath) {
  Microarch a = classify(zen5_turin());
  expect_two_amd_pipes(a, "zen5", 512, "58455");
  EXPECT_DOUBLE_EQ(a.f32_flops_per_cycle(), 64);
  EXPECT_TRUE(a.int8_dot);
  DeviceProfile p = detect_host_cpu(zen5_turin());
  EXPECT_EQ(p.units, 2);
  EXPECT_NEAR(p.peak_flops(DType::kF32, true), 2 * 2596.12e6 * 64, 1e6);
  EXPECT_EQ(p.register_tile[1], 64);
  EXPECT_EQ(p.register_vector, 16);  // one 512-bit vector of f32
  EXPECT_NO_THROW(p.validate());
}

TEST(Microarch, SapphireRapidsHasTwoFma512UnitsAndAmx) {
  Microarch a = classify(sapphire_rapids());
  EXPECT_EQ(a.name, "sapphire-rapids");
  EXPECT_DOUBLE_EQ(a.f32_flops_per_cycle(), 64);
  EXPECT_DOUBLE_EQ(a.amx_bf16_flops_per_cycle, 1024);
  EXPECT_DOUBLE_EQ(a.amx_int8_ops_per_cycle, 2048);
  EXPECT_TRUE(a.fp16_fma);
}

TEST(Microarch, XeonScalableFmaUnitsFollowTheSku) {
  auto skx = [](const std::string& name) {
    return classify(parse_cpuinfo(x86_cpuinfo("GenuineIntel", 6, 85, 4, name, 2200, std::string(kBase) + kAvx512, 2)));
  };
  EXPECT_DOUBLE_EQ(skx("Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz").f32_flops_per_cycle(), 32);
  EXPECT_DOUBLE_EQ(skx("Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz").f32_flops_per_cycle(), 32);
  EXPECT_DOUBLE_EQ(skx("Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz").f32_flops_per_cycle(), 64);
  EXPECT_DOUBLE_EQ(skx("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz").f32_flops_per_cycle(), 64);
  EXPECT_DOUBLE_EQ(skx("Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz").f32_flops_per_cycle(), 64);
}

TEST(Microarch, Avx2AndArmParts) {
  Microarch z3 = classify(zen3());
  EXPECT_EQ(z3.name, "zen3");
  EXPECT_DOUBLE_EQ(z3.f32_flops_per_cycle(), 32);
  Microarch n1 = classify(neoverse_n1());
  EXPECT_EQ(n1.name, "neoverse-n1");
  EXPECT_DOUBLE_EQ(n1.f32_flops_per_cycle(), 16);
  EXPECT_TRUE(n1.int8_dot);
  // Zen 5 server parts have the full 512-bit datapath; the mobile ones not.
  auto zen5 = [](int model) {
    return classify(parse_cpuinfo(x86_cpuinfo("AuthenticAMD", 26, model, 0, "AMD", 3000, std::string(kBase) + kAvx512, 2)));
  };
  EXPECT_DOUBLE_EQ(zen5(0x02).f32_flops_per_cycle(), 64);
  EXPECT_DOUBLE_EQ(zen5(0x24).f32_flops_per_cycle(), 32);
}

TEST(CpuIdentity, CacheKeyNamesTheModelAndCores) {
  CpuIdentity a = zen4(), b = zen4();
  EXPECT_EQ(a.cache_key(), b.cache_key());
  b.logical_cpus = 4;
  EXPECT_NE(a.cache_key(), b.cache_key());
  CpuIdentity c = zen4();
  c.model_name = "AMD EPYC 9654 96-Core Processor";
  EXPECT_NE(a.cache_key(), c.cache_key());
  CpuIdentity d = zen4();
  d.mhz = 2000;  // the clock a VM reports varies; the key does not
  EXPECT_EQ(a.cache_key(), d.cache_key());
  for (char ch : a.cache_key()) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_');
}

TEST(DetectHostCpu, PeaksFollowTheFmaPipesNotTheFlags) {
  DeviceProfile z4 = detect_host_cpu(zen4());
  EXPECT_EQ(z4.units, 2);
  EXPECT_DOUBLE_EQ(z4.clock_hz, 3699.9e6);
  // 2 cores x 3.7 GHz x 32 FLOP/cycle: 237 GFLOP/s, not the 474 of 512-bit pipes.
  EXPECT_NEAR(z4.peak_flops(DType::kF32, true), 2 * 3699.9e6 * 32, 1e6);
  EXPECT_NEAR(z4.peak_flops(DType::kBF16, true), 2 * z4.peak_flops(DType::kF32, true), 1e6);
  DeviceProfile spr = detect_host_cpu(sapphire_rapids());
  EXPECT_EQ(spr.units, 2);
  EXPECT_NEAR(spr.peak_flops(DType::kF32, true), 2 * 2.4e9 * 64, 1e6);
  EXPECT_NEAR(spr.peak_flops(DType::kBF16, true), 2 * 2.4e9 * 1024, 1e6);  // AMX
  EXPECT_NEAR(spr.peak_flops(DType::kI8, true), 2 * 2.4e9 * 2048, 1e6);
  DeviceProfile n1 = detect_host_cpu(neoverse_n1());
  EXPECT_NEAR(n1.peak_flops(DType::kF32, true), 2 * 2.5e9 * 16, 1e6);
  EXPECT_EQ(n1.register_tile[1], 8);  // 128-bit vectors
  for (const DeviceProfile* p : {&z4, &spr, &n1}) {
    EXPECT_NO_THROW(p->validate());
    EXPECT_FALSE(p->calibrated);
    EXPECT_NE(p->source.find("detected"), std::string::npos);
  }
}

TEST(DetectHostCpu, CachesPerCoreFromSysfs) {
  DeviceProfile z4 = detect_host_cpu(zen4());
  ASSERT_EQ(z4.memory.size(), 4u);
  EXPECT_EQ(z4.memory[0].name, "l1");
  EXPECT_TRUE(z4.memory[0].per_unit);
  EXPECT_EQ(z4.memory[1].capacity_bytes, 1 << 20);
  EXPECT_TRUE(z4.memory[1].per_unit);
  // A VM sees the CCD's 32 MB L3 but shares it: its 2 cores' share, 4 MB each.
  EXPECT_FALSE(z4.memory[2].per_unit);
  EXPECT_EQ(z4.memory[2].capacity_bytes, 8 << 20);
  EXPECT_EQ(z4.main_memory().capacity_bytes, int64_t{8} << 30);
  // Hyper-threads that share a core's L2 keep it per core.
  DeviceProfile spr = detect_host_cpu(sapphire_rapids());
  EXPECT_TRUE(spr.memory[1].per_unit);
  EXPECT_EQ(spr.memory[1].capacity_bytes, 2048 << 10);
  // Bare metal: the last level as the OS states it.
  CpuIdentity metal = zen4();
  metal.flags.erase("hypervisor");
  EXPECT_EQ(detect_host_cpu(metal).memory[2].capacity_bytes, 32 << 20);
}

}  // namespace
}  // namespace tessera::cost
