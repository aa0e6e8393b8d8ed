#include "mutator/plan_files.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graph/error.h"
#include "graph/sha256.h"

namespace tessera::mutator {

namespace fs = std::filesystem;

std::string rank_file(int64_t rank) { return "rank" + std::to_string(rank) + ".onnx"; }

std::vector<PlanFile> describe_plan_files(const std::string& dir, const std::vector<std::string>& names) {
  std::vector<PlanFile> out;
  for (const std::string& name : names) {
    fs::path path = fs::path(dir) / name;
    std::error_code ec;
    auto size = fs::file_size(path, ec);
    if (ec) throw Error(ErrorKind::kIo, "cannot read the file: " + ec.message(), {path.string(), "", ""});
    out.push_back({name, sha256_file_hex(path.string()), static_cast<int64_t>(size)});
  }
  return out;
}

bool has_plan_json(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "plan.json", ec);
}

std::string with_plan_files(const std::string& plan_json, const std::vector<PlanFile>& files) {
  nlohmann::json j = nlohmann::json::parse(plan_json);
  TESSERA_CHECK(j.is_object(), "plan.json text is not an object");
  nlohmann::json out = nlohmann::json::object();
  for (const PlanFile& f : files) out[f.name] = {{"sha256", f.sha256}, {"bytes", f.bytes}};
  j["files"] = out;
  return j.dump(2) + "\n";
}

namespace {

[[noreturn]] void refuse(const fs::path& file, const std::string& why) {
  throw Error(ErrorKind::kParse, why, {file.string(), "", ""});
}

// The program files the plan's form needs.
std::vector<std::string> needed_files(const nlohmann::json& j, const fs::path& plan) {
  if (!j.contains("mesh")) return {"model.onnx"};
  if (!j.contains("ranks") || !j["ranks"].is_array() || j["ranks"].empty())
    refuse(plan, "a mesh plan without a \"ranks\" list");
  std::vector<std::string> out;
  for (size_t r = 0; r < j["ranks"].size(); ++r) out.push_back(rank_file(static_cast<int64_t>(r)));
  return out;
}

}  // namespace

void check_plan_folder(const std::string& dir) {
  fs::path plan = fs::path(dir) / "plan.json";
  std::ifstream in(plan);
  if (!in) throw Error(ErrorKind::kIo, "cannot read the plan", {plan.string(), "", ""});
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) refuse(plan, "not a plan: plan.json is not a JSON object");
  if (!j.contains("format_version") || !j["format_version"].is_number_integer())
    refuse(plan, "not a plan: no integer \"format_version\"");
  int64_t version = j["format_version"].get<int64_t>();
  if (version < kOldestReadablePlanFormatVersion || version > kPlanFormatVersion)
    refuse(plan, "plan format version " + std::to_string(version) + " is not one this Tessera reads (it reads " +
                     std::to_string(kOldestReadablePlanFormatVersion) + " to " + std::to_string(kPlanFormatVersion) +
                     "); write the plan again with `tessera optimize`");
  if (!j.contains("files") || !j["files"].is_object()) refuse(plan, "the plan lists no \"files\" with their SHA-256");
  const nlohmann::json& files = j["files"];
  std::vector<std::string> names = needed_files(j, plan);
  // A program's external data, where plan.json lists it (plans written
  // since the digests were taken while writing; older ones list none).
  for (size_t k = 0, n = names.size(); k < n; ++k)
    if (files.contains(names[k] + ".data")) names.push_back(names[k] + ".data");
  if (j.contains("mesh") && files.contains(kSharedDataFile)) names.push_back(kSharedDataFile);
  for (const std::string& name : names) {
    fs::path path = fs::path(dir) / name;
    if (!files.contains(name) || !files[name].is_object() || !files[name].contains("sha256") ||
        !files[name]["sha256"].is_string())
      refuse(plan, "the plan lists no SHA-256 for " + name);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) refuse(path, "missing; plan.json lists it as one of the plan's files");
    // The size first: a truncated file is named as one without reading it.
    if (files[name].contains("bytes") && files[name]["bytes"].is_number_integer()) {
      auto want = files[name]["bytes"].get<int64_t>();
      auto got = static_cast<int64_t>(fs::file_size(path, ec));
      if (!ec && got != want)
        refuse(path, "does not match the plan (" + std::to_string(got) + " bytes, plan.json records " +
                         std::to_string(want) + "): the file was truncated or changed after the plan was written");
    }
    std::string want = files[name]["sha256"].get<std::string>();
    std::string got = sha256_file_hex(path.string());
    if (got != want)
      refuse(path, "does not match the plan (SHA-256 " + got.substr(0, 12) + "..., plan.json records " +
                       want.substr(0, 12) + "...): the file was changed or swapped after the plan was written");
  }
}

}  // namespace tessera::mutator
