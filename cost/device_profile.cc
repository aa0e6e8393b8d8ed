#include "cost/device_profile.h"

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unistd.h>

#include "graph/error.h"

namespace tessera::cost {

namespace detail {
const std::vector<std::pair<std::string_view, std::string_view>>& builtin_profile_texts();
}  // namespace detail

namespace {

using nlohmann::json;

constexpr const char* kFormat = "tessera-device-profile";
constexpr int kVersion = 1;

// Field access that names the field and the file on failure, so that a
// hand-edited profile gets a message a user can act on.
class Reader {
 public:
  Reader(const json& j, std::string origin, std::string path)
      : j_(j), origin_(std::move(origin)), path_(std::move(path)) {}

  const json& at(const std::string& key) const {
    if (!j_.is_object()) fail(path_, "must be an object");
    auto it = j_.find(key);
    if (it == j_.end()) fail(child(key), "is missing");
    return *it;
  }
  bool has(const std::string& key) const { return j_.is_object() && j_.contains(key); }
  double number(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(child(key), "must be a number");
    return v.get<double>();
  }
  double number_or(const std::string& key, double fallback) const { return has(key) ? number(key) : fallback; }
  int64_t integer(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail(child(key), "must be an integer");
    return v.get<int64_t>();
  }
  std::string string(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_string()) fail(child(key), "must be a string");
    return v.get<std::string>();
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_boolean()) fail(child(key), "must be true or false");
    return v.get<bool>();
  }
  Reader sub(const std::string& key) const { return Reader(at(key), origin_, child(key)); }
  std::vector<Reader> array(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_array()) fail(child(key), "must be an array");
    std::vector<Reader> out;
    for (size_t i = 0; i < v.size(); ++i) out.emplace_back(v[i], origin_, child(key) + "[" + std::to_string(i) + "]");
    return out;
  }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    TESSERA_THROW(ErrorKind::kParse, origin_ << ": profile field '" << field << "' " << what);
  }
  const json& raw() const { return j_; }
  const std::string& path() const { return path_; }

 private:
  std::string child(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const json& j_;
  std::string origin_;
  std::string path_;
};

std::map<DType, double> read_peaks(const Reader& r, const std::string& key) {
  std::map<DType, double> out;
  Reader peaks = r.sub(key);
  if (!peaks.raw().is_object()) peaks.fail(peaks.path(), "must be an object of dtype -> TFLOP/s");
  for (auto it = peaks.raw().begin(); it != peaks.raw().end(); ++it) {
    DType t;
    try {
      t = dtype_from_name(it.key());
    } catch (const Error&) {
      peaks.fail(peaks.path() + "." + it.key(), "is not a dtype name (f32, f16, bf16, f64, i64, i32, i8, u8, bool)");
    }
    out[t] = peaks.number(it.key()) * 1e12;
  }
  return out;
}

void check(bool ok, const std::string& field, const std::string& what) {
  if (!ok) TESSERA_THROW(ErrorKind::kParse, "profile field '" << field << "' " << what);
}

// The profile's fitted scalar factors, one row each: the JSON section
// (nullptr: the top level) and key, the member, the unit the JSON holds it
// in (member = value x unit), the default where the key may be absent
// (nullopt, no default_from: required; default_from: that factor's value,
// read before it), and the valid range: at least `minimum`, or above it
// where `above_minimum`, and at most `maximum`. profile_from_json,
// profile_to_json and validate() read only this table for them, so a new
// factor is one row (and its member).
struct FactorRow {
  const char* section;
  const char* key;
  double DeviceProfile::*member;
  double unit;
  std::optional<double> default_value;
  double minimum;
  bool above_minimum = false;
  double maximum = std::numeric_limits<double>::infinity();
  double DeviceProfile::*default_from = nullptr;

  std::string field() const { return section ? std::string(section) + "." + key : std::string(key); }
  bool required() const { return !default_value && default_from == nullptr; }
};

const std::vector<FactorRow>& factor_rows() {
  constexpr const char* kEff = "efficiency";
  static const std::vector<FactorRow> rows = {
      {kEff, "gemm", &DeviceProfile::gemm_efficiency, 1, std::nullopt, 0, true, 1},
      {kEff, "conv", &DeviceProfile::conv_efficiency, 1, std::nullopt, 0, true, 1, &DeviceProfile::gemm_efficiency},
      {kEff, "vector", &DeviceProfile::vector_efficiency, 1, std::nullopt, 0, true, 1},
      {nullptr, "transcendental_ops", &DeviceProfile::transcendental_ops, 1, std::nullopt, 1},
      {nullptr, "permute_ops", &DeviceProfile::permute_ops, 1, 0.0, 0},
      {nullptr, "epilogue_ops_scale", &DeviceProfile::epilogue_ops_scale, 1, 1.0, 1},
      {nullptr, "epilogue_operand_ops", &DeviceProfile::epilogue_operand_ops, 1, 0.0, 0},
      {nullptr, "permute_run_ops", &DeviceProfile::permute_run_ops, 1, 0.0, 0},
      {nullptr, "softmax_ops", &DeviceProfile::softmax_ops, 1, 0.0, 0},
      {nullptr, "softmax_row_ops", &DeviceProfile::softmax_row_ops, 1, 0.0, 0},
      {nullptr, "launch_overhead_us", &DeviceProfile::launch_overhead_s, 1e-6, std::nullopt, 0},
      {nullptr, "cold_launch_us", &DeviceProfile::cold_launch_s, 1e-6, 0.0, 0},
      {nullptr, "parallel_overhead_us", &DeviceProfile::parallel_overhead_s, 1e-6, 0.0, 0},
      {nullptr, "spin_window_us", &DeviceProfile::spin_window_s, 1e-6, 0.0, 0},
      {nullptr, "wake_overhead_us", &DeviceProfile::wake_overhead_s, 1e-6, 0.0, 0},
      {nullptr, "gemm_overhead_us", &DeviceProfile::gemm_overhead_s, 1e-6, 0.0, 0},
      {nullptr, "conv_call_ns", &DeviceProfile::conv_call_s, 1e-9, 0.0, 0},
      {nullptr, "reorder_gbps", &DeviceProfile::reorder_bandwidth, 1e9, 0.0, 0},
  };
  return rows;
}

// What validate() says of a factor outside its row's range.
std::string range_text(const FactorRow& f) {
  std::ostringstream out;
  if (std::isfinite(f.maximum))
    out << "must be in " << (f.above_minimum ? "(" : "[") << f.minimum << ", " << f.maximum << "]";
  else if (f.above_minimum) out << "must be above " << f.minimum;
  else if (f.minimum == 0) out << "must not be negative";
  else out << "must be at least " << f.minimum;
  return out.str();
}

}  // namespace

double DeviceProfile::peak_flops(DType dtype, bool matrix) const {
  if (matrix) {
    auto it = matrix_flops.find(dtype);
    if (it != matrix_flops.end()) return it->second;
  }
  auto it = vector_flops.find(dtype);
  if (it != vector_flops.end()) return it->second;
  // Integer and narrow types the profile does not list run at the f32
  // vector rate: the same lanes, no wider.
  auto f32 = vector_flops.find(DType::kF32);
  TESSERA_CHECK(f32 != vector_flops.end(), "validated profile without an f32 vector peak");
  return f32->second;
}

size_t DeviceProfile::stored_size(DType dtype) const {
  return std::find(widened.begin(), widened.end(), dtype) != widened.end() ? dtype_size(DType::kF32)
                                                                           : dtype_size(dtype);
}

double DeviceProfile::stored_bytes(const TensorType& t) const {
  return static_cast<double>(t.numel()) * static_cast<double>(stored_size(t.dtype));
}

double DeviceProfile::core_bandwidth(size_t i) const {
  const MemoryLevel& m = memory.at(i);
  double even = m.effective_bandwidth() / static_cast<double>(std::max<int64_t>(units, 1));
  return m.core_bandwidth > 0 ? std::clamp(m.core_bandwidth, even, m.effective_bandwidth()) : even;
}

double DeviceProfile::conv_efficiency_at(double k) const {
  const auto& e = conv_efficiency_by_k;
  if (e.empty() || !(k > 0)) return conv_efficiency;
  if (k <= e.front().first) return e.front().second;
  if (k >= e.back().first) return e.back().second;
  auto hi = std::upper_bound(e.begin(), e.end(), k, [](double v, const auto& point) { return v < point.first; });
  auto lo = hi - 1;
  double t = std::log(k / lo->first) / std::log(hi->first / lo->first);
  return lo->second + t * (hi->second - lo->second);
}

void DeviceProfile::validate() const {
  check(!name.empty(), "name", "must not be empty");
  check(units >= 1, "units", "must be at least 1");
  check(clock_hz > 0, "clock_ghz", "must be positive");
  check(vector_flops.count(DType::kF32) != 0, "peak_tflops.vector.f32", "is required");
  for (const auto* peaks : {&matrix_flops, &vector_flops})
    for (const auto& [t, v] : *peaks)
      check(v > 0 && std::isfinite(v), std::string("peak_tflops.") + dtype_name(t), "must be positive");
  check(memory.size() >= 1, "memory", "must list at least main memory");
  for (size_t i = 0; i < memory.size(); ++i) {
    const MemoryLevel& m = memory[i];
    std::string f = "memory[" + std::to_string(i) + "]";
    check(!m.name.empty(), f + ".name", "must not be empty");
    check(m.capacity_bytes > 0, f + ".capacity_bytes", "must be positive");
    check(m.bandwidth > 0 && std::isfinite(m.bandwidth), f + ".bandwidth_gbps", "must be positive");
    check(m.efficiency > 0 && m.efficiency <= 1, f + ".efficiency", "must be in (0, 1]");
    check(m.core_bandwidth >= 0 && std::isfinite(m.core_bandwidth), f + ".core_bandwidth_gbps",
          "must be positive or absent");
    if (i > 0) {
      // Ordered fastest first: a level further out is at least as large.
      int64_t inner = memory[i - 1].capacity_bytes * (memory[i - 1].per_unit ? units : 1);
      int64_t outer = m.capacity_bytes * (m.per_unit ? units : 1);
      check(outer >= inner, f + ".capacity_bytes", "must not be smaller than the level before it (fastest first)");
    }
  }
  check(register_tile[0] >= 1 && register_tile[1] >= 1, "register_tile", "must be two positive sizes");
  check(register_vector >= 0 && register_vector <= register_tile[1], "register_vector",
        "must be between 0 and the register tile's columns");
  for (size_t i = 0; i < conv_efficiency_by_k.size(); ++i) {
    std::string f = "efficiency.conv_by_k[" + std::to_string(i) + "]";
    const auto& [k, e] = conv_efficiency_by_k[i];
    check(k >= 1 && std::isfinite(k), f, "must have a reduction length of at least 1");
    check(i == 0 || k > conv_efficiency_by_k[i - 1].first, f, "must come after a shorter reduction (K ascending)");
    // Relative to a peak fitted to the probes' geometric mean: a long
    // reduction may run above it, but not at twice it.
    check(e > 0 && e <= 2, f, "must have an efficiency in (0, 2]");
  }
  for (const FactorRow& f : factor_rows()) {
    double v = this->*f.member / f.unit;
    bool low_ok = f.above_minimum ? v > f.minimum : v >= f.minimum;
    check(low_ok && v <= f.maximum && std::isfinite(v), f.field(), range_text(f));
  }
  for (size_t i = 0; i < interconnect.size(); ++i) {
    const Interconnect& c = interconnect[i];
    std::string f = "interconnect[" + std::to_string(i) + "]";
    check(!c.name.empty(), f + ".name", "must not be empty");
    check(c.devices_per_node >= 0, f + ".devices_per_node", "must not be negative");
    check(c.bandwidth > 0, f + ".bandwidth_gbps", "must be positive");
    check(c.latency_s >= 0, f + ".latency_us", "must not be negative");
  }
}

DeviceProfile profile_from_json(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    TESSERA_THROW(ErrorKind::kParse, origin << ": not valid JSON: " << e.what());
  }
  Reader r(j, origin, "");
  if (r.string("format") != kFormat) r.fail("format", std::string("must be \"") + kFormat + "\"");
  if (r.integer("version") != kVersion) r.fail("version", "must be " + std::to_string(kVersion));
  DeviceProfile p;
  p.name = r.string("name");
  p.description = r.has("description") ? r.string("description") : p.name;
  std::string kind = r.string("kind");
  if (kind == "cpu") p.kind = DeviceKind::kCpu;
  else if (kind == "gpu") p.kind = DeviceKind::kGpu;
  else r.fail("kind", "must be \"cpu\" or \"gpu\"");
  p.units = r.integer("units");
  p.clock_hz = r.number("clock_ghz") * 1e9;
  const json& tile = r.at("register_tile");
  if (!tile.is_array() || tile.size() != 2 || !tile[0].is_number_integer() || !tile[1].is_number_integer())
    r.fail("register_tile", "must be [rows, cols]");
  p.register_tile = {tile[0].get<int64_t>(), tile[1].get<int64_t>()};
  p.register_vector = static_cast<int64_t>(r.number_or("register_vector", 0.0));
  Reader peaks = r.sub("peak_tflops");
  p.matrix_flops = read_peaks(peaks, "matrix");
  p.vector_flops = read_peaks(peaks, "vector");
  for (const FactorRow& f : factor_rows()) {
    Reader in = f.section ? r.sub(f.section) : r;
    double fallback = f.default_from ? p.*f.default_from / f.unit : f.default_value.value_or(0.0);
    p.*f.member = (f.required() ? in.number(f.key) : in.number_or(f.key, fallback)) * f.unit;
  }
  Reader eff = r.sub("efficiency");
  if (eff.has("conv_by_k")) {
    for (const Reader& point : eff.array("conv_by_k")) {
      const json& v = point.raw();
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number())
        point.fail(point.path(), "must be [K, efficiency]");
      p.conv_efficiency_by_k.emplace_back(v[0].get<double>(), v[1].get<double>());
    }
  }
  for (const Reader& m : r.array("memory")) {
    MemoryLevel level;
    level.name = m.string("name");
    level.capacity_bytes = m.integer("capacity_bytes");
    level.per_unit = m.boolean_or("per_unit", false);
    level.bandwidth = m.number("bandwidth_gbps") * 1e9;
    level.efficiency = m.number_or("efficiency", 1.0);
    level.core_bandwidth = m.number_or("core_bandwidth_gbps", 0.0) * 1e9;
    p.memory.push_back(level);
  }
  if (r.has("interconnect")) {
    for (const Reader& c : r.array("interconnect")) {
      Interconnect tier;
      tier.name = c.string("name");
      tier.devices_per_node = c.integer("devices_per_node");
      tier.latency_s = c.number("latency_us") * 1e-6;
      tier.bandwidth = c.number("bandwidth_gbps") * 1e9;
      p.interconnect.push_back(tier);
    }
  }
  if (r.has("widened")) {
    const json& w = r.at("widened");
    if (!w.is_array()) r.fail("widened", "must be an array of dtype names");
    for (const json& t : w) {
      if (!t.is_string()) r.fail("widened", "must be an array of dtype names");
      p.widened.push_back(dtype_from_name(t.get<std::string>()));
    }
  }
  p.calibrated = r.boolean_or("calibrated", false);
  p.source = r.has("source") ? r.string("source") : "";
  if (r.has("host")) {
    Reader h = r.sub("host");
    p.host_key = h.string("key");
    p.host_summary = h.has("summary") ? h.string("summary") : "";
  }
  try {
    p.validate();
  } catch (const Error& e) {
    TESSERA_THROW(ErrorKind::kParse, origin << ": " << e.message());
  }
  return p;
}

std::string profile_to_json(const DeviceProfile& p) {
  auto peaks = [](const std::map<DType, double>& m) {
    json out = json::object();
    for (const auto& [t, v] : m) out[dtype_name(t)] = v / 1e12;
    return out;
  };
  json memory = json::array();
  for (const MemoryLevel& m : p.memory) {
    json level = {{"name", m.name},
                  {"capacity_bytes", m.capacity_bytes},
                  {"per_unit", m.per_unit},
                  {"bandwidth_gbps", m.bandwidth / 1e9},
                  {"efficiency", m.efficiency}};
    if (m.core_bandwidth > 0) level["core_bandwidth_gbps"] = m.core_bandwidth / 1e9;
    memory.push_back(level);
  }
  json tiers = json::array();
  for (const Interconnect& c : p.interconnect)
    tiers.push_back({{"name", c.name},
                     {"devices_per_node", c.devices_per_node},
                     {"latency_us", c.latency_s * 1e6},
                     {"bandwidth_gbps", c.bandwidth / 1e9}});
  json efficiency = json::object();
  if (!p.conv_efficiency_by_k.empty()) {
    json points = json::array();
    for (const auto& [k, e] : p.conv_efficiency_by_k) points.push_back({k, e});
    efficiency["conv_by_k"] = points;
  }
  json j = {{"format", kFormat},
            {"version", kVersion},
            {"name", p.name},
            {"description", p.description},
            {"kind", p.kind == DeviceKind::kCpu ? "cpu" : "gpu"},
            {"units", p.units},
            {"clock_ghz", p.clock_hz / 1e9},
            {"register_tile", {p.register_tile[0], p.register_tile[1]}},
            {"register_vector", p.register_vector},
            {"peak_tflops", {{"matrix", peaks(p.matrix_flops)}, {"vector", peaks(p.vector_flops)}}},
            {"efficiency", efficiency},
            {"memory", memory},
            {"interconnect", tiers},
            {"calibrated", p.calibrated},
            {"source", p.source}};
  for (const FactorRow& f : factor_rows()) (f.section ? j[f.section] : j)[f.key] = p.*f.member / f.unit;
  if (!p.host_key.empty()) j["host"] = {{"key", p.host_key}, {"summary", p.host_summary}};
  if (!p.widened.empty()) {
    json w = json::array();
    for (DType t : p.widened) w.push_back(dtype_name(t));
    j["widened"] = w;
  }
  return j.dump(2) + "\n";
}

DeviceProfile load_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) TESSERA_THROW(ErrorKind::kIo, "cannot read device profile '" << path << "'");
  std::stringstream text;
  text << in.rdbuf();
  return profile_from_json(text.str(), path);
}

void save_profile(const DeviceProfile& profile, const std::string& path) {
  namespace fs = std::filesystem;
  profile.validate();
  fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  fs::path tmp = target;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) TESSERA_THROW(ErrorKind::kIo, "cannot write device profile '" << path << "'");
    out << profile_to_json(profile);
    if (!out) TESSERA_THROW(ErrorKind::kIo, "cannot write device profile '" << path << "'");
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    TESSERA_THROW(ErrorKind::kIo, "cannot write device profile '" << path << "'");
  }
}

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : detail::builtin_profile_texts()) names.emplace_back(name);
  return names;
}

DeviceProfile builtin_profile(std::string_view name) {
  for (const auto& [n, text] : detail::builtin_profile_texts())
    if (n == name) return profile_from_json(std::string(text), "cost/profiles/" + std::string(n) + ".json");
  std::string known;
  for (const std::string& n : builtin_profile_names()) known += (known.empty() ? "" : ", ") + n;
  TESSERA_THROW(ErrorKind::kUsage, "unknown device '" << name << "' (known: " << known << ", or a profile .json file)");
}

DeviceProfile resolve_device(const std::string& spec) {
  if (spec == "cpu")
    TESSERA_THROW(ErrorKind::kUsage, "device 'cpu' is this host: resolve it with calibrate::prepare_device (the "
                                     "reference host's profile is cost/profiles/cpu.json)");
  if (spec.find('/') != std::string::npos || spec.ends_with(".json")) return load_profile(spec);
  return builtin_profile(spec);
}

int64_t ranks_per_node(const DeviceProfile& device, int64_t devices) {
  if (device.interconnect.empty() || device.interconnect[0].devices_per_node <= 0) return 1;
  return std::max<int64_t>(1, std::min(devices, device.interconnect[0].devices_per_node));
}

DeviceProfile scale_to_cores(const DeviceProfile& host, double cores, CoreSharing sharing) {
  if (host.kind != DeviceKind::kCpu || host.units <= 0 || cores <= 0) return host;
  // A socket's DRAM bandwidth (host_cpu.cc): what scaling up stops at.
  constexpr double kSocketDramBandwidth = 307.2e9;
  DeviceProfile p = host;
  const double k = cores / static_cast<double>(host.units);
  p.units = std::max<int64_t>(1, static_cast<int64_t>(cores));
  for (auto* peaks : {&p.matrix_flops, &p.vector_flops})
    for (auto& [t, f] : *peaks) f *= k;
  for (MemoryLevel& m : p.memory) {
    m.bandwidth *= k;
    if (!m.per_unit && sharing == CoreSharing::kRanks)
      m.capacity_bytes = static_cast<int64_t>(static_cast<double>(m.capacity_bytes) * k);
  }
  p.reorder_bandwidth *= k;
  if (k > 1 && !p.memory.empty()) {
    MemoryLevel& dram = p.memory.back();
    dram.bandwidth = std::min(dram.bandwidth, std::max(kSocketDramBandwidth, host.main_memory().bandwidth));
  }
  if (sharing == CoreSharing::kAlone && k < 1) {
    for (size_t i = 0; i < p.memory.size(); ++i) {
      MemoryLevel& m = p.memory[i];
      if (m.per_unit || m.core_bandwidth <= 0) continue;
      double alone = std::min(host.memory[i].effective_bandwidth(), cores * host.core_bandwidth(i));
      m.bandwidth = alone / m.efficiency;
    }
  }
  return p;
}

DeviceProfile rank_share(const DeviceProfile& host, int64_t ranks) {
  if (host.kind != DeviceKind::kCpu || ranks <= 1) return host;
  // More ranks than cores: each still runs on one core's worth.
  const auto k = static_cast<double>(std::min(ranks, host.units));
  DeviceProfile p = scale_to_cores(host, static_cast<double>(host.units) / k, CoreSharing::kRanks);
  p.units = std::max<int64_t>(1, host.units / ranks);
  p.description = host.description + " (one of " + std::to_string(ranks) + " ranks sharing it)";
  return p;
}

DeviceProfile thread_share(const DeviceProfile& host, int64_t threads) {
  if (host.kind != DeviceKind::kCpu || threads <= 0 || threads >= host.units) return host;
  DeviceProfile p = scale_to_cores(host, static_cast<double>(threads), CoreSharing::kAlone);
  p.description = host.description + " (" + std::to_string(p.units) + " of its cores)";
  return p;
}

}  // namespace tessera::cost
