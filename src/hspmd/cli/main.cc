// The hspmd executable. Each sub-command lives in its own file under cli/ and registers itself
// in commands.h; main only dispatches and turns every exception into one line + exit code 1.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <string_view>

#include "hspmd/cli/commands.h"
#include "hspmd/core/error.h"

namespace {

// --verbose, or HSPMD_VERBOSE=1 in the environment (how worker processes started by a verbose
// run inherit it).
bool verbose_from_environment() {
  const char* v = std::getenv("HSPMD_VERBOSE");
  return v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hspmd: hierarchical and heterogeneous SPMD training"};
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("--verbose", verbose,
               "on errors, also print where in hspmd's source the error was raised (or set HSPMD_VERBOSE=1)");
  // Before any sub-command runs, so workers it starts inherit the setting.
  app.parse_complete_callback([&] {
    if (verbose) ::setenv("HSPMD_VERBOSE", "1", 1);
  });
  hspmd::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const hspmd::Error& e) {
    std::cerr << "hspmd: error: " << e.what() << "\n";
    if ((verbose || verbose_from_environment()) && !e.origin().empty()) {
      std::cerr << "hspmd: raised at " << e.origin() << "\n";
    }
    return 1;
  } catch (const std::exception& e) {
    // Not raised by hspmd's checks: a filesystem error, an allocation failure, a library error.
    std::cerr << "hspmd: error: " << e.what() << "\n";
    return 1;
  } catch (...) {
    std::cerr << "hspmd: error: unknown exception\n";
    return 1;
  }
  return 0;
}
