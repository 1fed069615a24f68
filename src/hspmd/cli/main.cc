// The hspmd executable. Each sub-command lives in its own file under cli/ and registers itself
// in commands.h; main only dispatches and turns hspmd::Error into one clear line + exit code 1.
#include <CLI/CLI.hpp>

#include <iostream>

#include "hspmd/cli/commands.h"
#include "hspmd/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"hspmd: hierarchical and heterogeneous SPMD training"};
  app.require_subcommand(1);
  hspmd::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const hspmd::Error& e) {
    std::cerr << "hspmd: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
