// The tessera command: parses the verb and its flags, runs it, and maps
// failures to exit codes: 0 success, 1 failure (one line on stderr naming the
// file, node and op), 2 usage error.
#include <CLI/CLI.hpp>
#include <iostream>
#include <map>

#include "graph/error.h"
#include "tools/api/interrupt.h"
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  tessera::api::install_interrupt_handlers();
  CLI::App app{"Tessera: a superoptimizer for ONNX models", "tessera"};
  app.formatter(tessera::cli::help_formatter());  // the verbs inherit it
  app.footer("Every verb takes --help. " + tessera::cli::guide_footer("README.md, docs/cli.md (the verbs)"));
  app.require_subcommand(1);
  std::map<std::string, tessera::cli::Action> actions = {
      {"inspect", tessera::cli::add_inspect_command(app)},
      {"run", tessera::cli::add_run_command(app)},
      {"verify", tessera::cli::add_verify_command(app)},
      {"cost", tessera::cli::add_cost_command(app)},
      {"optimize", tessera::cli::add_optimize_command(app)},
      {"generate", tessera::cli::add_generate_command(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) return actions.at(sub->get_name())();
  } catch (const tessera::Error& e) {
    std::cerr << "tessera: error: " << e.what() << "\n";
    return e.kind() == tessera::ErrorKind::kUsage ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "tessera: internal error: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
