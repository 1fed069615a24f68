// Registration of the hspmd sub-commands. Each add_*_command (one file each under cli/) adds one
// sub-command to `app` whose callback runs it; errors propagate as hspmd::Error to main.
#pragma once

#include <CLI/CLI.hpp>

namespace hspmd::cli {

void add_launch_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_selfcheck_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_explain_command(CLI::App& app);
void add_model_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_cluster_command(CLI::App& app);
void add_checkpoint_command(CLI::App& app);
void add_simulate_command(CLI::App& app);

inline void register_commands(CLI::App& app) {
  add_launch_command(app);
  add_data_command(app);
  add_selfcheck_command(app);
  add_train_command(app);
  add_eval_command(app);
  add_explain_command(app);
  add_model_command(app);
  add_profile_command(app);
  add_plan_command(app);
  add_cluster_command(app);
  add_checkpoint_command(app);
  add_simulate_command(app);
}

}  // namespace hspmd::cli
