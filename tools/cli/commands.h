// One function per CLI verb: registers its flags on the app and returns the
// action to run after parsing. Actions throw tessera::Error on failure.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace tessera::cli {

using Action = std::function<int()>;

Action add_cost_command(CLI::App& app);
Action add_generate_command(CLI::App& app);
Action add_inspect_command(CLI::App& app);
Action add_optimize_command(CLI::App& app);
Action add_run_command(CLI::App& app);
Action add_verify_command(CLI::App& app);

}  // namespace tessera::cli
