// tessera inspect MODEL [--json] [--input-shape NAME=DIMS]...
#include <CLI/CLI.hpp>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

namespace tessera::cli {

namespace {

struct InspectFlags {
  std::string model;
  bool json = false;
  LoadFlags load;
};

nlohmann::json values_json(const std::vector<api::ValueSummary>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& v : values)
    out.push_back({{"name", v.name}, {"dtype", dtype_name(v.type.dtype)}, {"shape", v.type.shape}});
  return out;
}

void print_text(const api::ModelSummary& s) {
  std::cout << "model: " << s.name << "\n";
  std::cout << "inputs:\n";
  for (const auto& v : s.inputs) std::cout << "  " << v.name << ": " << type_str(v.type) << "\n";
  std::cout << "outputs:\n";
  for (const auto& v : s.outputs) std::cout << "  " << v.name << ": " << type_str(v.type) << "\n";
  std::cout << "ops (" << s.nodes << " nodes):\n";
  std::vector<std::pair<std::string, int64_t>> ops(s.ops_by_kind.begin(), s.ops_by_kind.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [kind, count] : ops) std::cout << "  " << std::left << std::setw(22) << kind << count << "\n";
  std::cout << "parameters: " << s.parameters << " (" << human_count(static_cast<double>(s.parameter_bytes), "B")
            << ")\n";
  std::cout << "flops: " << s.flops << " (" << human_count(static_cast<double>(s.flops), "FLOP") << ")\n";
}

}  // namespace

Action add_inspect_command(CLI::App& app) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model: ops, inputs/outputs, parameters, FLOPs");
  cmd->footer(guide_footer("docs/cli.md#inspect"));
  cmd->add_option("model", flags->model, "ONNX model file")->required();
  cmd->add_flag("--json", flags->json, "Print JSON instead of text");
  add_load_flags(cmd, flags->load);
  return [flags] {
    Graph g = api::load(flags->model, load_options(flags->load));
    api::ModelSummary s = api::summarize(g);
    if (!flags->json) {
      print_text(s);
      return 0;
    }
    nlohmann::json j = {{"model", s.name},
                        {"inputs", values_json(s.inputs)},
                        {"outputs", values_json(s.outputs)},
                        {"nodes", s.nodes},
                        {"ops", s.ops_by_kind},
                        {"parameters", s.parameters},
                        {"parameter_bytes", s.parameter_bytes},
                        {"flops", s.flops}};
    std::cout << j.dump(2) << "\n";
    return 0;
  };
}

}  // namespace tessera::cli
