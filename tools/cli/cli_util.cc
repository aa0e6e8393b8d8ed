#include "tools/cli/cli_util.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <sstream>

#include "graph/error.h"
#include "graph/memory_limit.h"
#include "onnx_import/onnx_import.h"
#include "onnx_import/tensor_proto.h"
#include "tools/api/run_detail.h"

namespace tessera::cli {

namespace {

// CLI11's formatter with each description broken into lines that end
// before kHelpColumns (format_help indents every line after a newline to
// the description column).
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_desc(const CLI::Option* opt) const override {
    size_t width = kHelpColumns - get_column_width();
    std::string out, line;
    std::istringstream words(opt->get_description());
    for (std::string word; words >> word;) {
      if (!line.empty() && line.size() + 1 + word.size() > width) {
        out += line + "\n";
        line.clear();
      }
      line += (line.empty() ? "" : " ") + word;
    }
    return out + line;
  }
};

}  // namespace

std::shared_ptr<CLI::Formatter> help_formatter() { return std::make_shared<HelpFormatter>(); }

std::string guide_footer(const std::string& pages) {
  return "The user guide, with examples: " + pages;
}

void add_load_flags(CLI::App* cmd, LoadFlags& flags) {
  cmd->add_option("--input-shape", flags.input_shapes,
                  "Fix an input's shape: NAME=1x3x224x224, NAME may be a glob: 'past.*' (repeatable)");
  cmd->add_option("--input-value", flags.input_values,
                  "Fix an input to a constant at import: NAME=VALUE, e.g. use_cache_branch=1 (repeatable)");
  cmd->add_flag("--allow-unused-inputs", flags.allow_unused_inputs,
                "Keep graph inputs that no node reads (the plan ignores them)");
  cmd->add_flag("--initializers-as-constants", flags.initializers_as_constants,
                "Fold graph inputs that are also initializers as constants");
  cmd->add_option("--memory-limit", flags.memory_limit,
                  "Refuse work over this much memory: 8G, 512M (default 3/4 of RAM)");
}

api::LoadOptions load_options(const LoadFlags& flags) {
  ImportOptions import;
  if (!flags.memory_limit.empty()) {
    try {
      set_memory_limit(parse_bytes(flags.memory_limit));
    } catch (const Error& e) {
      throw Error(ErrorKind::kUsage, "--memory-limit: " + e.message());
    }
  }
  for (const std::string& flag : flags.input_shapes) parse_input_shape_flag(flag, import);
  for (const std::string& flag : flags.input_values) parse_input_value_flag(flag, import);
  api::LoadOptions options;
  options.input_shapes = import.input_shapes;
  options.input_values = import.input_values;
  options.allow_unused_inputs = flags.allow_unused_inputs;
  options.initializers_as_constants = flags.initializers_as_constants;
  return options;
}

std::string human_count(double value, const char* unit) { return api::detail::human_count(value, unit); }

std::vector<Tensor> bind_input_files(const Graph& g, const std::vector<std::string>& specs, uint64_t seed) {
  std::vector<Tensor> inputs = api::random_inputs(g, seed);
  size_t positional = 0;
  for (const std::string& spec : specs) {
    size_t eq = spec.find('=');
    std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
    std::string stored_name;
    Tensor t = read_tensor_file(path, &stored_name);
    std::string name = eq == std::string::npos ? stored_name : spec.substr(0, eq);
    size_t index = g.inputs().size();
    for (size_t i = 0; i < g.inputs().size(); ++i)
      if (g.value(g.inputs()[i]).name == name) index = i;
    if (index == g.inputs().size()) {
      if (eq != std::string::npos)
        TESSERA_THROW(ErrorKind::kUsage, "--input " << spec << ": the model has no input '" << name << "'");
      index = positional;  // unnamed tensor file: bind in order
    }
    if (index >= g.inputs().size())
      TESSERA_THROW(ErrorKind::kUsage, "--input " << spec << ": more input files than model inputs");
    ++positional;
    const TensorType& want = g.type(g.inputs()[index]);
    if (t.type() != want)
      TESSERA_THROW(ErrorKind::kUsage, "--input " << spec << ": tensor is " << type_str(t.type()) << " but input '"
                                                  << g.value(g.inputs()[index]).name << "' is " << type_str(want));
    inputs[index] = std::move(t);
  }
  return inputs;
}

std::vector<std::vector<Tensor>> test_data_sets(const std::string& model_path, const Graph& g) {
  namespace fs = std::filesystem;
  std::vector<std::vector<Tensor>> sets;
  std::error_code ec;
  fs::path dir = fs::path(model_path).parent_path();
  if (dir.empty()) dir = ".";
  std::vector<fs::path> folders;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) folders.push_back(e.path());
  std::sort(folders.begin(), folders.end());
  for (const fs::path& folder : folders) {
    std::vector<std::string> specs;
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      fs::path file = folder / ("input_" + std::to_string(i) + ".pb");
      if (fs::exists(file)) specs.push_back(file.string());
    }
    if (specs.size() != g.inputs().size()) continue;  // a set for other inputs (or outputs only)
    sets.push_back(bind_input_files(g, specs, 0));
  }
  return sets;
}

}  // namespace tessera::cli
