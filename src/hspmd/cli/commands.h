// Registration of the hspmd sub-commands. Each add_*_command (one file each under cli/) adds one
// sub-command to `app` whose callback runs it; errors propagate as hspmd::Error to main.
#pragma once

#include <CLI/CLI.hpp>

namespace hspmd::cli {

inline void register_commands(CLI::App& app) { (void)app; }

}  // namespace hspmd::cli
