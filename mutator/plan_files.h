// A plan folder's contract: plan.json names its format version and, for
// every program file it lists (model.onnx, or rank<i>.onnx for a mesh), the
// file's size and SHA-256, and so for each program's external data
// (rank<i>.onnx.data, and shared.data for weights several ranks hold) where
// it has one. `tessera run` checks both before it loads
// anything, so a folder whose files were edited, swapped or lost after
// `tessera optimize` wrote it is refused instead of run. The schema of
// plan.json is docs/plan.schema.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::mutator {

// The plan.json format this build writes, for both forms (one device, a
// mesh), written by one writer (report/plan_json.cc). Version 5 added the
// carried state ("carry", both forms) and a mesh plan's boundary
// ("sharding.inputs" and "sharding.outputs": how each graph input and
// output crosses it, a rank file's input or output being its block);
// version 4 gave both forms the same keys for what they share (the
// mutations, the rewrite search as "search", the sharding search as
// "sharding_search", predicted_cost with before, single-device and after);
// version 3 added "files"; versions 1 (one device) and 2 (a mesh) had none.
// This build reads versions 4 and 5: a version 4 plan carries nothing and
// its mesh inputs and outputs cross the boundary whole, which is what its
// rank files take and give (the readers default the two keys so). Other
// versions are refused.
inline constexpr int kPlanFormatVersion = 5;
inline constexpr int kOldestReadablePlanFormatVersion = 4;

// The external data that a mesh plan's rank files share: the weights two or
// more ranks hold the same bytes of, written once (tools/api Plan::save).
inline constexpr const char* kSharedDataFile = "shared.data";

// The name of rank r's file in a plan folder.
std::string rank_file(int64_t rank);

struct PlanFile {
  std::string name;    // relative to the folder: "model.onnx", "rank0.onnx"
  std::string sha256;  // 64 lowercase hex digits
  int64_t bytes = 0;
};

// The digests of `names` in `dir` as they are now. Throws Error(kIo) for a
// file that cannot be read.
std::vector<PlanFile> describe_plan_files(const std::string& dir, const std::vector<std::string>& names);

// `plan_json` (report::plan_json) with "files" set to
// `files`: what a writer puts in plan.json once the program files are on
// disk.
std::string with_plan_files(const std::string& plan_json, const std::vector<PlanFile>& files);

// Whether `path` is a folder with a plan.json (whatever else it holds).
bool has_plan_json(const std::string& path);

// Checks the plan folder `dir` against its plan.json: a known
// format_version, the program files the plan's form needs (model.onnx, or
// rank<i>.onnx for each rank) and the external data (NAME.onnx.data,
// shared.data) that "files" lists for them, present, and with the size and SHA-256 recorded
// there. Throws Error(kParse) naming plan.json or
// the file that does not match, in one line.
void check_plan_folder(const std::string& dir);

}  // namespace tessera::mutator
