// Fuzz target: plan.json and a plan folder's files, as `tessera run DIR`
// reads them. The input is the folder: plan.json, then the program files,
// separated by kSeparator (pack_plan in fuzz/gather_corpus.sh writes such
// inputs from a real folder). The program files are model.onnx, or rank0.onnx, rank1.onnx,
// ... when plan.json names a mesh.
//
// Each input is tried twice: as given, where the check of the folder against
// plan.json (format version, file list, SHA-256) is what runs; and with
// plan.json's "files" rewritten to the files' real digests, so that the
// fuzzer also reaches what a folder that passes the check goes through
// (reading the mesh, importing every rank's program).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "mutator/plan_files.h"
#include "mutator/optimize.h"
#include "tools/api/tessera.h"

namespace {

namespace fs = std::filesystem;
namespace fz = tessera::fuzz;

constexpr std::string_view kSeparator = "\n--tessera-plan-file--\n";

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> parts;
  for (size_t at = s.find(kSeparator); at != std::string_view::npos; at = s.find(kSeparator)) {
    parts.push_back(s.substr(0, at));
    s.remove_prefix(at + kSeparator.size());
  }
  parts.push_back(s);
  return parts;
}

void write(const fs::path& path, std::string_view bytes) {
  fz::write_file(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// What `tessera run DIR` does with the folder before it runs anything.
void load_folder(const fs::path& dir) {
  if (tessera::api::is_sharded_plan_folder(dir.string())) {
    tessera::api::MeshPlan plan = tessera::api::read_mesh_plan(dir.string());
    for (int64_t r = 0; r < plan.ranks; ++r) tessera::api::load_rank(plan, r, {});
  } else {
    tessera::api::load(dir.string());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = fz::scratch_dir();
  fz::clear_folder(dir);
  std::vector<std::string_view> parts = split({reinterpret_cast<const char*>(data), size});
  write(dir / "plan.json", parts[0]);
  nlohmann::json plan = nlohmann::json::parse(parts[0], nullptr, /*allow_exceptions=*/false);
  bool mesh = plan.is_object() && plan.contains("mesh");
  // A handful of ranks is enough to reach every path; more only slows the run.
  std::vector<std::string> names;
  for (size_t i = 1; i < parts.size() && i <= 8; ++i) {
    names.push_back(mesh ? tessera::mutator::rank_file(static_cast<int64_t>(i - 1)) : "model.onnx");
    write(dir / names.back(), parts[i]);
    if (!mesh) break;
  }
  fz::expect_user_errors_only([&] { load_folder(dir); });
  if (!plan.is_object() || plan.is_discarded()) return 0;
  fz::expect_user_errors_only([&] {
    std::string fixed = tessera::mutator::with_plan_files(plan.dump(), tessera::mutator::describe_plan_files(dir.string(), names));
    write(dir / "plan.json", fixed);
    load_folder(dir);
  });
  return 0;
}
