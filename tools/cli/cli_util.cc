#include "tools/cli/cli_util.h"

#include <cstdio>

#include "onnx_import/onnx_import.h"

namespace tessera::cli {

api::LoadOptions load_options(const std::vector<std::string>& input_shapes) {
  ImportOptions import;
  for (const std::string& flag : input_shapes) parse_input_shape_flag(flag, import);
  api::LoadOptions options;
  options.input_shapes = import.input_shapes;
  return options;
}

std::string human_count(double value, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int p = 0;
  while (value >= 1000.0 && p < 5) {
    value /= 1000.0;
    ++p;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), p == 0 ? "%.0f %s%s" : "%.2f %s%s", value, prefixes[p], unit);
  return buf;
}

}  // namespace tessera::cli
