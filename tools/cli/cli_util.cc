#include "tools/cli/cli_util.h"

#include "onnx_import/onnx_import.h"
#include "tools/api/run_detail.h"

namespace tessera::cli {

api::LoadOptions load_options(const std::vector<std::string>& input_shapes) {
  ImportOptions import;
  for (const std::string& flag : input_shapes) parse_input_shape_flag(flag, import);
  api::LoadOptions options;
  options.input_shapes = import.input_shapes;
  return options;
}

std::string human_count(double value, const char* unit) { return api::detail::human_count(value, unit); }

}  // namespace tessera::cli
