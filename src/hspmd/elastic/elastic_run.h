// Elastic training (docs/elastic.md): when a worker dies, the survivors detect it, agree on who
// survived, settle the interrupted step, re-plan for themselves with the planner and move the
// training state with one fused BSR that leaves the dead ranks out — no restart. When some slice of
// the state has no surviving holder (no data parallelism for it), every survivor restores the
// newest complete checkpoint under the new plan instead and replays the data from there.
//
//   ElasticRun elastic(store, rank, world, groups, planner, config, {.checkpoint_dir = "runs/ckpt"});
//   elastic.attach(trainer, initial_strategy);
//   ElasticHook hook(elastic);   // elastic/elastic_hook.h: recover() when an Error escapes a step
//   loop.add_hook(hook);         // runtime/training_loop.h
//
// Detection: a Heartbeat (comm/heartbeat.h) aborts this rank's communication (GroupCache::abort)
// the moment it declares a peer dead, so a rank blocked on a live peer that itself waits on the
// dead one is released too; a communication error does the same through recover().
// Agreement: comm::Membership. Consistency: every step publishes its global totals in the store
// ("gen<G>/commit/<step>") before any rank updates its weights, so afterwards every survivor knows
// whether some rank may have applied the step: then all apply it (they all hold their synced
// gradients), else all discard it and redo it on the same tokens. A switch commits the same way:
// no rank adopts the new layout until every member has its part ("gen<G>/switched/<step>/<rank>").
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/comm/group_cache.h"
#include "hspmd/comm/heartbeat.h"
#include "hspmd/comm/membership.h"
#include "hspmd/comm/store.h"
#include "hspmd/planner/planner.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::elastic {

// A failure elastic training cannot get past: this rank was excluded by the others or cut off from
// the store (fenced), no worker died (e.g. out of memory), the planner found no plan for the survivors, or state was lost with
// no checkpoint to fall back to. Any other Error from recover() is a further failure during the
// recovery: call recover() again.
class Unrecoverable : public Error {
 public:
  using Error::Error;
};

struct ElasticOptions {
  comm::Millis heartbeat_timeout{5'000};   // a silent peer is dead after this long
  comm::Millis agreement_timeout{60'000};  // bound on the survivors' agreement
  std::string checkpoint_dir;              // the fallback when state is lost ("" = none)
};

// What a restarted worker learns when the running workers admit it (ElasticRun::join).
struct Admission {
  std::vector<int> members;  // of the new generation, this rank included
  int generation = 0;
  sharding::Strategy strategy;  // the state's current layout (this rank holds nothing of it)
  int64_t step = 0;             // optimizer steps taken
  data::LoaderState loader;     // the data position
};

// One recovery (or admission of restarted workers), with the time of each phase (seconds since the failure surfaced on this rank).
struct RecoveryReport {
  std::vector<int> dead, joined, members;  // members: the new generation, sorted
  int generation = 0;
  bool interrupted_step = false;   // the failure came during a step (not a save or a switch)
  bool rolled_forward = false;     // the interrupted step was applied (else discarded and redone)
  std::optional<runtime::StepMetrics> settled_step;  // the rolled-forward step's metrics
  bool from_checkpoint = false;    // state restored from checkpoint_dir, not moved by BSR
  int64_t resume_step = 0;         // optimizer steps done when training goes on
  std::string plan;                // the re-planned strategy's name
  double predicted_step_seconds = 0;
  std::optional<runtime::SwitchReport> switched;  // the fused BSR (unless from_checkpoint)
  double agreed = 0, planned = 0, moved = 0;      // phase ends
  std::string cause;

  nlohmann::json to_json() const;  // {"event": "recovery", ...}
  std::string to_string() const;   // the log lines
};

class ElasticRun {
 public:
  // Starts this rank's heartbeat; the planner plans the survivors' strategies (it must outlive
  // this object). Every rank 0..world-1 is a member at first, or those of `admitted` for a
  // restarted worker.
  ElasticRun(std::shared_ptr<comm::Store> store, int rank, int world, comm::GroupCache& groups,
             const planner::Planner& planner, const models::LlamaConfig& config, ElasticOptions options,
             const Admission* admitted = nullptr);

  // A restarted worker (HSPMD_RESTART_COUNT > 0), before it builds anything: waits until the
  // running workers have noticed its earlier death, asks to join, and returns once they admitted it
  // (at their next step boundary but one). Its trainer is then built on admission.strategy with
  // DistOptions::members = admission.members, and complete_join() takes part in the switch that
  // gives it state.
  static Admission join(comm::Store& store, int rank, int world, comm::Millis timeout);
  RecoveryReport complete_join(runtime::DistTrainer& trainer);
  // After step `step` completed: whether restarted workers asked to join, as every member sees it
  // alike (the lowest member decided it one step earlier). Then call admit().
  bool admission_due(int64_t step);
  RecoveryReport admit(runtime::DistTrainer& trainer) { return recover(trainer, "restarted workers ask to join"); }
  ~ElasticRun();

  // Installs the trainer's step and switch commits; `strategy` is the one it trains under.
  void attach(runtime::DistTrainer& trainer, const sharding::Strategy& strategy);
  // Call after an Error escaped the trainer (a step, a save, a switch) on this rank. Returns once
  // the survivors train under a new plan; throws Unrecoverable (see above) or, when another worker
  // fails meanwhile, Error (then call it again).
  RecoveryReport recover(runtime::DistTrainer& trainer, const std::string& cause);
  // A strategy switch the run asked for (--switch), committed like a recovery's; `plan` is
  // `strategy` compiled for the model.
  runtime::SwitchReport switch_to(runtime::DistTrainer& trainer, const sharding::Strategy& strategy,
                                  const sharding::AnnotationPlan& plan);

  const std::vector<int>& members() const { return membership_.members(); }
  const sharding::Strategy& strategy() const { return strategy_; }

 private:
  std::string generation_key(const std::string& key) const;
  // The lowest member of the new generation that was a member before (it publishes progress and
  // the plan, so every member — restarted ones too — uses the same).
  int leader(const std::vector<int>& before) const;
  // The re-planned strategy, from the leader: planned there, read everywhere else.
  planner::Plan shared_plan(bool is_leader, const std::vector<int>& dead, std::vector<int>* dead_out);
  // Unrecoverable once the heartbeat found this rank cut off from the store (it is fenced).
  void throw_if_fenced() const;
  void commit_step(int64_t step, const std::vector<double>& totals);
  void commit_switch(int64_t step);
  void start_heartbeat();

  // Switches to `plan` with one fused BSR without report.dead, or restores the checkpoint.
  void move_state(runtime::DistTrainer& trainer, const planner::Plan& plan, RecoveryReport& report);

  std::shared_ptr<comm::Store> store_;
  int rank_, world_;
  comm::GroupCache& groups_;
  const planner::Planner& planner_;
  models::LlamaConfig config_;
  ElasticOptions options_;
  comm::Membership membership_;
  std::unique_ptr<comm::Heartbeat> heartbeat_;
  sharding::Strategy strategy_;          // the strategy the trainer's state is laid out in
  sharding::Strategy pending_strategy_;  // the target of the switch in progress
  int switches_ = 0;  // committed switches, numbering their store keys
};

}  // namespace hspmd::elastic
