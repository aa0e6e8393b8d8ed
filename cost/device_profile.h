// Device profiles: the hardware rates the cost model divides by. A profile is
// data (a JSON file, see cost/profiles/): compute peaks per data type for the
// matrix units (tensor cores, or the FMA pipes a GEMM micro-kernel keeps busy)
// and the vector units, the memory hierarchy from the fastest level (L1 or
// shared memory) to main memory, launch overhead, and the interconnect tiers
// collectives run over. Calibration (tessera cost --calibrate) rewrites the
// efficiency factors and bandwidths from measurements and marks the profile
// calibrated.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/dtype.h"
#include "graph/tensor.h"

namespace tessera::cost {

enum class DeviceKind { kCpu, kGpu };

struct MemoryLevel {
  std::string name;         // "l1", "smem", "l2", "l3", "dram", "hbm"
  int64_t capacity_bytes = 0;
  bool per_unit = false;    // capacity is per core / per SM (private level)
  double bandwidth = 0;     // bytes/s, the whole device, as the spec states it
  double efficiency = 1.0;  // achievable share of `bandwidth`
  // What one core alone streams from a shared level, bytes/s as measured
  // (efficiency included); 0: bandwidth / units (linear in the cores). On
  // the 2-vCPU Zen 5 guest the calibration's Add probes streamed 1.75-1.8x
  // one core's rate from L3 with both cores, 1.4-2.0x from DRAM, not 2x.
  double core_bandwidth = 0;
  double effective_bandwidth() const { return bandwidth * efficiency; }
};

// One tier of the network collectives cross: NVLink within a node, the
// cluster network across nodes. Tiers are ordered innermost first.
struct Interconnect {
  std::string name;
  int64_t devices_per_node = 0;  // devices this tier connects directly; 0: unbounded
  double latency_s = 0;          // alpha: per message step
  double bandwidth = 0;          // bytes/s per device, one direction (nccl-tests bus bandwidth)
};

struct DeviceProfile {
  std::string name;         // short name: "h100", "cpu"
  std::string description;  // "NVIDIA H100 SXM5 80GB"
  DeviceKind kind = DeviceKind::kCpu;
  int64_t units = 1;        // cores or SMs
  double clock_hz = 0;
  // FLOP/s of the whole device per dtype; matrix: GEMM/convolution units,
  // vector: everything else. A dtype missing from `matrix` uses `vector`.
  std::map<DType, double> matrix_flops;
  std::map<DType, double> vector_flops;
  std::vector<MemoryLevel> memory;  // fastest first; the last is main memory
  // The GEMM micro-kernel's output block (rows x cols) held in registers:
  // operands are read from the fastest memory level once per block.
  std::array<int64_t, 2> register_tile = {8, 32};
  // The narrowest column block the micro-kernel takes (one vector of f32,
  // CPU): a GEMM with few columns runs blocks of cols/2, cols/4 ... down to
  // this, with rows x cols, the accumulator registers, kept (oneDNN's
  // brgemm picks its row and column blocks so). 0: the tile is fixed.
  int64_t register_vector = 0;
  double gemm_efficiency = 0.8;    // achievable share of the matrix peak
  // The same for convolutions (implicit GEMMs with their own kernels);
  // a profile without one uses gemm_efficiency.
  double conv_efficiency = 0.8;
  // CPU, calibrated: the convolution efficiency by the reduction length K
  // (input channels per group x window) of the calibration's convolutions,
  // K ascending. A convolution between two points takes the efficiency
  // interpolated in log K, outside them the nearest point's; empty: every
  // convolution runs at conv_efficiency. On a Zen 4 core (oneDNN's jit
  // convolutions, one thread) the calibration's probes read 0.95 at K = 64,
  // 0.98 at 576 and 1.07 at 2304 of the fitted peak: the micro-kernel's
  // per-output work (loading and storing the accumulators, the post-ops) is
  // spread over K multiply-adds. Entries are relative to
  // the profile's peak, which the calibration fits to the dense probes'
  // geometric mean, so a long reduction's can exceed 1.
  std::vector<std::pair<double, double>> conv_efficiency_by_k;
  double conv_efficiency_at(double k) const;
  double vector_efficiency = 0.8;  // achievable share of the vector peak
  // Vector operations one transcendental (exp, tanh, erf...) costs.
  double transcendental_ops = 8;
  // CPU Softmax and LogSoftmax: vector operations per element (0: four
  // arithmetic ones and a transcendental), and per reduced row (the
  // horizontal max and sum, and the row's loop). Calibrated; measured alone
  // on a Zen 5 core, 65536 elements in L2: rows of 2048 20 us, of 512 19,
  // of 128 30, priced 12.2 with neither.
  double softmax_ops = 0;
  double softmax_row_ops = 0;
  // Vector operations per element a permuting copy (Transpose) costs on top
  // of its bytes: element-wise index arithmetic and strided accesses
  // (calibrated; 0: a transpose is a streaming copy).
  double permute_ops = 0;
  // CPU: a post-op in a MatMul's or Gemm's epilogue (oneDNN's brgemm
  // matmul applies the chain to each finished accumulator tile, with the
  // registers the tile leaves free, after its arithmetic and not hidden
  // behind it): its vector ops cost this many times what a streaming
  // kernel's do, and each binary link's operand, loaded row by row of the
  // tile, epilogue_operand_ops more per element. Calibrated (1 and 0: priced
  // as the same ops in a streaming kernel). Measured on a Zen 4 core at one
  // thread, 256x64x1024 with oneDNN 2.6: Relu +0 us, Add of a full operand
  // +40, Exp +93, Sigmoid +150, Gelu +190 on 330 us.
  double epilogue_ops_scale = 1.0;
  double epilogue_operand_ops = 0;
  // Vector operations each contiguous run of a permuting copy costs (index
  // arithmetic and the call that copies the run; calibrated, 0: none).
  double permute_run_ops = 0;
  double launch_overhead_s = 0;    // per kernel
  // CPU: added to a kernel whose code and state the program's other kernels
  // have pushed out of the last cache since it last ran (graph_cost: a
  // program that touches more bytes per run than the last cache holds,
  // every kernel running once a run). Calibrated: the median run of a tiny
  // kernel after a stream through twice the last cache against one of a
  // tiny kernel right after it (1.9-2.3 us on a Zen 4 core); 0: not known.
  double cold_launch_s = 0;
  // CPU: added to a kernel that spreads over several cores (waking the
  // pool's sleeping threads and joining them); kernels too small for that
  // run on one core at 1/units of the device's rates (runs_on_one_thread in
  // graph/fusion_groups.h). GPUs: 0.
  double parallel_overhead_s = 0;
  // CPU: the pool's idle threads spin this long after a parallel region,
  // then sleep; a parallel kernel that starts after more one-thread work
  // than that pays wake_overhead_s to wake them (graph_cost). Calibrated
  // (runtime/pool_probe.h); 0: not known, no wakes.
  double spin_window_s = 0;
  double wake_overhead_s = 0;
  // Added to every GEMM and convolution call (primitive dispatch, operand
  // and scratch setup) on top of launch_overhead_s.
  double gemm_overhead_s = 0;
  // CPU: one core's time per call of a convolution's micro-kernel, one per
  // image, output row and kernel position (oneDNN's brgconv); a parallel
  // convolution splits its calls over the cores. Negligible for a model's
  // convolutions; it dominates one over many small single-channel images.
  double conv_call_s = 0;
  // CPU: the rate (bytes of the value per second) of a blocked -> row-major
  // reorder, whatever cache holds the data: it scatters each channel block
  // to as many planes (calibrated; 0: priced as an element-wise pass). The
  // whole device's, as the levels' bandwidths are: a reorder of fewer than
  // kOneThreadElements runs on one core at 1/units of it.
  double reorder_bandwidth = 0;
  std::vector<Interconnect> interconnect;
  bool calibrated = false;
  std::string source;  // where the numbers come from
  // CPU profiles of a host (detected or calibrated): the machine they
  // describe, CpuIdentity::cache_key() and summary(). Empty for the shipped
  // profiles. A cached profile whose key is not the host's is stale.
  std::string host_key;
  std::string host_summary;

  // 16-bit types the device's runtime stores and computes as f32 copies:
  // the CPU runtime's f16 (oneDNN 2.6 has no f16 CPU kernels; weights are
  // widened at compile and f16 results stay f32 between its kernels,
  // runtime/cpu/cpu_compiler.cc). Their tensors are priced at 4 bytes.
  std::vector<DType> widened;

  // Peak FLOP/s for `dtype` on the matrix (true) or vector (false) units.
  double peak_flops(DType dtype, bool matrix) const;
  // Bytes per element as the device holds a tensor of `dtype`, and a
  // tensor's bytes (`widened` types at f32's size).
  size_t stored_size(DType dtype) const;
  double stored_bytes(const TensorType& t) const;
  const MemoryLevel& main_memory() const { return memory.back(); }
  // The rate one core alone streams from level i: its core_bandwidth where
  // measured (at most the whole level's), else an even share of the level.
  double core_bandwidth(size_t i) const;
  // Throws Error(kParse) naming the field when a value is out of range.
  void validate() const;
};

// Parses a profile; `origin` names the file in error messages. Throws
// Error(kParse) for invalid JSON, missing fields, or values out of range.
DeviceProfile profile_from_json(const std::string& text, const std::string& origin);
std::string profile_to_json(const DeviceProfile& profile);
DeviceProfile load_profile(const std::string& path);
// Writes atomically (temporary file, then rename).
void save_profile(const DeviceProfile& profile, const std::string& path);

// The profiles shipped in cost/profiles/, compiled in: "cpu" (the reference
// host the CPU defaults were measured on), "a100", "h100", "h200".
std::vector<std::string> builtin_profile_names();
// Throws Error(kUsage) for an unknown name.
DeviceProfile builtin_profile(std::string_view name);

// The host CPU as its identity describes it (cpu_identity.h): cores, clock,
// FMA pipes and caches, no measurement (host_cpu.cc says where each figure
// comes from). Reading this host's identity, and its cached or calibrated
// profile, is calibrate/'s (host_identity.h, host_profile_cache.h).
struct CpuIdentity;
DeviceProfile detect_host_cpu(const CpuIdentity& id);

// The one scaling of a CPU profile to part (or more) of its cores: `cores`
// of its `units` (fractional where ranks do not divide the cores) get that
// share of its FLOP/s and of every level's bandwidth (each is the whole
// device's); units becomes max(1, floor(cores)). What the cores left out do
// decides the shared levels: other ranks (kRanks) take their share of the
// shared caches' capacity; nothing (kAlone) leaves the process the whole
// capacity and a shared level streams what its cores draw from it alone
// (their core_bandwidth where measured, up to the level's). Scaled up (a
// profile fitted on fewer cores than the host has), main memory's
// bandwidth grows at most to a socket's (host_cpu.cc). A GPU profile is
// returned as it is.
enum class CoreSharing { kRanks, kAlone };
DeviceProfile scale_to_cores(const DeviceProfile& host, double cores, CoreSharing sharing);

// One rank's share of a CPU host that `ranks` ranks of a mesh share (the
// innermost interconnect tier's devices_per_node say how many do):
// scale_to_cores(host, units / ranks, kRanks), at least one core's. A GPU
// profile, or one rank, is returned as it is: each GPU rank has its device
// to itself.
DeviceProfile rank_share(const DeviceProfile& host, int64_t ranks);

// The host as one process running `threads` of its threads sees it, alone:
// scale_to_cores(host, threads, kAlone).
DeviceProfile thread_share(const DeviceProfile& host, int64_t threads);
// How many ranks of a mesh of `devices` share a node on `device`.
int64_t ranks_per_node(const DeviceProfile& device, int64_t devices);

// A profile as a value: a builtin name or a path to a profile JSON file.
// "cpu" (this host) is not resolved here: the host's cached, calibrated or
// detected profile is calibrate::prepare_device's, at the API boundary, so
// no cost or mutator entry point reads process-wide state. Throws
// Error(kUsage) for "cpu" and for an unknown name.
DeviceProfile resolve_device(const std::string& spec);

}  // namespace tessera::cost
