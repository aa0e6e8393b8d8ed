// Pieces the CLI verbs share: flag parsing helpers and output formatting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tools/api/tessera.h"

namespace CLI {
class App;
class Formatter;
}

namespace tessera::cli {

// Every verb's --help fits a terminal page: at most kHelpLines lines of at
// most kHelpColumns columns (a terminal on half a laptop's screen), the
// flags' descriptions wrapped under their column; the rest is in the user
// guide, which each verb's footer names (tests/tools/cli_help_test.cc).
inline constexpr int kHelpColumns = 120;
inline constexpr int kHelpLines = 40;
std::shared_ptr<CLI::Formatter> help_formatter();

// The footer of a verb's --help: the pages of the user guide that say the
// rest, e.g. "docs/cli.md#run, docs/sharding.md#running-the-ranks".
std::string guide_footer(const std::string& pages);

// The flags of every verb that loads a model.
struct LoadFlags {
  std::vector<std::string> input_shapes;  // --input-shape NAME=DIMS (repeatable; NAME may be a glob)
  std::vector<std::string> input_values;  // --input-value NAME=VALUE (repeatable)
  bool allow_unused_inputs = false;       // --allow-unused-inputs
  bool initializers_as_constants = false; // --initializers-as-constants
  std::string memory_limit;               // --memory-limit BYTES (8G, 512M)
};
void add_load_flags(CLI::App* cmd, LoadFlags& flags);

// Parses the flags (--input-shape NAME=DIMS, --input-value NAME=VALUE), and sets the process's memory
// limit (graph/memory_limit.h) from --memory-limit. Throws Error(kUsage).
api::LoadOptions load_options(const LoadFlags& flags);

// Binds --input NAME=FILE.pb (or FILE.pb, by the name stored in the file, or
// else in order) flags to graph inputs; unbound inputs get seeded random
// data. Throws Error(kUsage) for an unknown name or a tensor of another type.
std::vector<Tensor> bind_input_files(const Graph& g, const std::vector<std::string>& specs, uint64_t seed);

// The model's own test inputs, as ONNX's test data sets lay them out beside
// the model: test_data_set_<k>/input_<i>.pb, one set per folder that holds a
// file for every graph input. Throws Error as bind_input_files does.
std::vector<std::vector<Tensor>> test_data_sets(const std::string& model_path, const Graph& g);

// "1.23 GFLOP", "4.5 MB": human-readable counts.
std::string human_count(double value, const char* unit);

}  // namespace tessera::cli
