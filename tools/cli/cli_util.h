// Pieces the CLI verbs share: flag parsing helpers and output formatting.
#pragma once

#include <string>
#include <vector>

#include "tools/api/tessera.h"

namespace tessera::cli {

// Parses repeated --input-shape NAME=DIMS flags. Throws Error(kUsage).
api::LoadOptions load_options(const std::vector<std::string>& input_shapes);

// "1.23 GFLOP", "4.5 MB": human-readable counts.
std::string human_count(double value, const char* unit);

}  // namespace tessera::cli
