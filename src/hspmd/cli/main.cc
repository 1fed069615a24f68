// The hspmd executable. Each sub-command lives in its own file under cli/ and registers itself
// in commands.h; main only dispatches and turns every exception into one line + exit code 1.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <string>
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

// Writes "hspmd: error: <what>" (and the origin line) in one write. std::cerr is unbuffered, so
// `cerr << "hspmd: error: " << what` is several writes, and a worker stopped by the launcher's
// SIGTERM between them (another rank failed first) left a bare "hspmd: error:" line behind.
void report(const std::string& what, const std::string& origin = {}) {
  std::string text = "hspmd: error: " + (what.empty() ? std::string("(an error without a message)") : what) + "\n";
  if (!origin.empty()) text += "hspmd: raised at " + origin + "\n";
  std::cerr.flush();
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(2, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // nowhere left to report to
    done += static_cast<size_t>(n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hspmd: hierarchical and heterogeneous SPMD training", "hspmd"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hspmd " HSPMD_VERSION, "print hspmd's version and exit");
  bool verbose = false;
  app.add_flag("--verbose", verbose,
               "on errors, also print where in hspmd's source the error was raised (or set HSPMD_VERBOSE=1)");
  // Before any sub-command runs, so workers it starts inherit the setting.
  app.parse_complete_callback([&] {
    if (verbose) ::setenv("HSPMD_VERBOSE", "1", 1);
  });
  hspmd::cli::register_commands(app);
  if (argc == 1) {  // no command: say which there are, rather than only that one is missing
    std::cout << app.help();
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const hspmd::Error& e) {
    report(e.what(), verbose || verbose_from_environment() ? e.origin() : std::string());
    return 1;
  } catch (const std::exception& e) {
    // Not raised by hspmd's checks: a filesystem error, an allocation failure, a library error.
    report(e.what());
    return 1;
  } catch (...) {
    report("unknown exception");
    return 1;
  }
  return 0;
}
