// One process's part of a training run, set up from `hspmd train`'s options the way the CLI sets
// up a worker: its model and data, the strategies it trains under (--strategy, each --switch, or
// dispatch by length), emulated device, communicators, elastic recovery, and the one training
// loop (runtime/training_loop.h) with the hooks those options ask for. `hspmd train --strategy`
// runs the loop to the end (cli/train_dist.cc); the Python API's hspmd.Trainer drives it a step at
// a time with batches of its own (DistTrainer::give_batch), so both train through the same code.
#pragma once

#include <memory>
#include <optional>
#include <ostream>

#include "hspmd/cli/train_args.h"
#include "hspmd/comm/env.h"
#include "hspmd/models/model.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/training_loop.h"

namespace hspmd::cli {

class TrainWorker {
 public:
  // `model` is the run's (args.model is not read); args.data may be empty when every step is given
  // its batch. `env`: this process's place in the run (rank, world, store); nullopt: a run of one
  // process (the strategy, if any, must use rank 0 only). What rank 0 reports goes to `out`.
  TrainWorker(const TrainArgs& args, std::shared_ptr<const models::Model> model, std::optional<comm::WorkerEnv> env,
              std::ostream& out);
  ~TrainWorker();
  TrainWorker(const TrainWorker&) = delete;
  TrainWorker& operator=(const TrainWorker&) = delete;

  runtime::DistTrainer& trainer();
  runtime::TrainingLoop& loop();
  const models::Model& model() const;
  int rank() const;
  int world_size() const;
  // Whether this process reports (the lowest live rank; rank 0 may die in an elastic run).
  bool is_lead() const;
  // The strategy of the run's first plan ("single-process" for one process without --strategy).
  const sharding::Strategy& strategy() const;

  // Collective: moves the run to `strategy` before the next step, as a --switch does (the
  // --switch-bsr algorithm; with --elastic through the elastic run, which refuses a strategy that
  // uses a dead rank). Throws runtime::SwitchRefused when the plan does not fit; nothing moved then.
  runtime::SwitchReport switch_to(const sharding::Strategy& strategy);

  // `hspmd train`'s end of a worker: runs the loop to the last step, writes the --trace and runs
  // the --check-single comparison.
  void run_to_end();

 private:
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

}  // namespace hspmd::cli
