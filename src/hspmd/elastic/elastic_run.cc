#include "hspmd/elastic/elastic_run.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <numeric>
#include <sstream>
#include <thread>

#include "hspmd/comm/store_values.h"
#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/elastic/store_records.h"
#include "hspmd/runtime/sharded_checkpoint.h"

namespace hspmd::elastic {

using Clock = std::chrono::steady_clock;

namespace {

std::vector<int> all_ranks(int world) {
  std::vector<int> r(world);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

// Whether `dir` holds a complete checkpoint (an interrupted save leaves the previous one in place).
bool complete_checkpoint(const std::string& dir) {
  if (dir.empty()) return false;
  try {
    runtime::ShardedCheckpoint::open(dir);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

ElasticRun::ElasticRun(std::shared_ptr<comm::Store> store, int rank, int world, comm::GroupCache& groups,
                       const planner::Planner& planner, ElasticOptions options,
                       const Admission* admitted)
    : store_(std::move(store)),
      rank_(rank),
      world_(world),
      groups_(groups),
      planner_(planner),
      options_(std::move(options)),
      membership_(store_, rank, admitted ? admitted->members : all_ranks(world), admitted ? admitted->generation : 0) {
  if (admitted) strategy_ = admitted->strategy;
  start_heartbeat();
}

namespace {

std::string members_key(int generation) { return "gen" + std::to_string(generation) + "/members"; }
std::string join_request_key(int rank) { return "join-request/" + std::to_string(rank); }

std::vector<int> parse_members(const std::string& text, int generation) {
  return comm::parse_rank_list(text, members_key(generation));
}

// Polls `key` until it exists; Error naming `what` after the deadline.
std::string wait_for(comm::Store& store, const std::string& key, Clock::time_point deadline, const std::string& what) {
  while (true) {
    if (auto v = store.try_get(key)) return *v;
    HSPMD_CHECK(Clock::now() < deadline) << "timed out waiting for " << what << " (store key " << key << ")";
    std::this_thread::sleep_for(comm::Millis(10));
  }
}

}  // namespace

Admission ElasticRun::join(comm::Store& store, int rank, int world, comm::Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int generation = 0;
    while (store.try_get(members_key(generation + 1))) ++generation;
    const std::vector<int> members =
        generation == 0 ? all_ranks(world) : parse_members(*store.try_get(members_key(generation)), generation);
    if (std::binary_search(members.begin(), members.end(), rank)) {
      // The others have not yet agreed that this rank's earlier incarnation died. If every one of
      // them died too, nobody ever will (a failure every worker shares, e.g. a bad input).
      const bool all_dead = std::all_of(members.begin(), members.end(), [&](int r) {
        return r == rank || store.try_get(comm::dead_key(r)).has_value();
      });
      HSPMD_CHECK(!all_dead) << "rank " << rank << ": every other worker of the run died too, so there is no "
                             << "running worker to rejoin; see the first failure above";
      HSPMD_CHECK(Clock::now() < deadline) << "rank " << rank << ": the running workers never noticed its death";
      std::this_thread::sleep_for(comm::Millis(20));
      continue;
    }
    // Its death is settled: from now on its heartbeat counts again, and it asks to join.
    store.erase(comm::dead_key(rank));
    const std::string next = "gen" + std::to_string(generation + 1) + "/";
    store.set(next + "join/" + std::to_string(rank), "1");
    store.set(join_request_key(rank), std::to_string(generation + 1));
    // Every member may die while this rank waits (one after another, each restarted): then nobody
    // admits it, and it stops instead of waiting out the deadline.
    std::optional<std::string> decision;
    while (!(decision = store.try_get(members_key(generation + 1)))) {
      const bool all_dead = std::all_of(members.begin(), members.end(), [&](int r) {
        return store.try_get(comm::dead_key(r)).has_value();
      });
      HSPMD_CHECK(!all_dead) << "rank " << rank << ": every member of generation " << generation << " (["
                             << comm::group_key(members) << "]) died while it waited to be admitted, so there is no "
                             << "running worker to rejoin; see the failures above";
      HSPMD_CHECK(Clock::now() < deadline) << "rank " << rank << ": timed out waiting for admission by the running "
                                           << "workers (store key " << members_key(generation + 1) << ")";
      std::this_thread::sleep_for(comm::Millis(10));
    }
    const std::vector<int> admitted = parse_members(*decision, generation + 1);
    if (!std::binary_search(admitted.begin(), admitted.end(), rank)) continue;  // decided without it: ask again
    const ProgressRecord progress =
        parse_progress_record(wait_for(store, next + "progress", deadline, "the run's progress"), next + "progress");
    Admission a;
    a.members = admitted;
    a.generation = generation + 1;
    a.strategy = sharding::Strategy::from_json_text(progress.strategy_text, "the run's strategy (store key " + next +
                                                                                "progress)");
    a.step = progress.step;
    a.loader = data::LoaderState::from_json(progress.loader_json);
    return a;
  }
}

bool ElasticRun::admission_due(int64_t step) {
  return store_->try_get(generation_key("admit/" + std::to_string(step))).has_value();
}

int ElasticRun::leader(const std::vector<int>& before) const {
  for (int r : membership_.members()) {
    if (std::binary_search(before.begin(), before.end(), r)) return r;
  }
  HSPMD_THROW() << "generation " << membership_.generation() << " keeps none of the earlier members";
}

planner::Plan ElasticRun::shared_plan(bool is_leader, const std::vector<int>& dead, std::vector<int>* dead_out) {
  const std::string key = generation_key("plan");
  if (is_leader) {
    nlohmann::json record = {{"dead", dead}};
    try {
      planner::Plan plan = planner_.replan(strategy_, membership_.members());
      plan.strategy.name = "elastic-gen" + std::to_string(membership_.generation());  // one name per re-plan
      record["strategy"] = plan.strategy.to_json_text();
      record["predicted_step_seconds"] = plan.prediction.step_seconds;
    } catch (const Error& e) {
      record["error"] = e.what();
    }
    store_->set(key, record.dump());
  }
  const PlanRecord record =
      parse_plan_record(wait_for(*store_, key, Clock::now() + options_.agreement_timeout, "the re-planned strategy"), key);
  if (record.error) {
    throw Unrecoverable("no plan for the ranks [" + comm::group_key(membership_.members()) + "]: " + *record.error);
  }
  planner::Plan plan;
  plan.strategy =
      sharding::Strategy::from_json_text(record.strategy_text, "the re-planned strategy (store key " + key + ")");
  plan.prediction.step_seconds = record.predicted_step_seconds;
  *dead_out = record.dead;
  return plan;
}

ElasticRun::~ElasticRun() = default;

void ElasticRun::start_heartbeat() {
  comm::HeartbeatOptions h;
  h.timeout = options_.heartbeat_timeout;
  h.interval = std::max(comm::Millis(20), options_.heartbeat_timeout / 10);
  // A death releases this rank at once from any wait on communication (a pipeline peer may wait
  // on the dead rank only indirectly, through this one).
  h.on_death = [this](int rank, const std::string& how) {
    groups_.abort("rank " + std::to_string(rank) + " died (" + how + ")");
  };
  // Fencing: cut off from the store, this rank is dead to the others; it stops communicating now
  // and recover() refuses to write anything more (see fenced()).
  h.on_cut_off = [this](const std::string& why) {
    std::cerr << why << std::endl;  // the decision, when it is made (the step that fails comes later)
    groups_.abort(why);
  };
  // One Heartbeat per generation, watching its members: a death is final for it.
  heartbeat_ = std::make_unique<comm::Heartbeat>(store_, rank_, membership_.members(), h);
}

std::string ElasticRun::generation_key(const std::string& key) const {
  return "gen" + std::to_string(membership_.generation()) + "/" + key;
}

void ElasticRun::attach(runtime::DistTrainer& trainer, const sharding::Strategy& strategy) {
  strategy_ = strategy;
  trainer.set_commits({.step = [this](int64_t step, const std::vector<double>& totals) { commit_step(step, totals); },
                       .switch_done = [this, &trainer] { commit_switch(trainer.step_count()); }});
}

void ElasticRun::throw_if_fenced() const {
  if (heartbeat_ && heartbeat_->cut_off()) {
    throw Unrecoverable("rank " + std::to_string(rank_) + " was cut off from the store for longer than the heartbeat "
                        "timeout: the others count it dead, so it stops without writing to the run again");
  }
}

void ElasticRun::commit_step(int64_t step, const std::vector<double>& totals) {
  throw_if_fenced();
  // Every rank writes the same value; the first write is the commit.
  store_->set(generation_key("commit/" + std::to_string(step)), step_totals_text(totals));
  // Cut off while the write was under way: the step is not applied here (the others settle it
  // from the store, where the write may or may not have landed).
  throw_if_fenced();
  if (rank_ != membership_.members().front()) return;
  // Restarted workers asking to join are admitted after the NEXT step: every member learns it then
  // from this key, written before this rank could take part in that step's totals.
  std::vector<int> asking;
  const std::string next_generation = std::to_string(membership_.generation() + 1);
  for (int r = 0; r < world_; ++r) {
    if (std::binary_search(membership_.members().begin(), membership_.members().end(), r)) continue;
    if (store_->try_get(join_request_key(r)) == next_generation) asking.push_back(r);
  }
  if (!asking.empty()) store_->set(generation_key("admit/" + std::to_string(step + 1)), comm::group_key(asking));
}

void ElasticRun::commit_switch(int64_t step) {
  const std::string prefix = generation_key("switched/" + std::to_string(switches_) + "/");
  store_->set(prefix + std::to_string(rank_), "1");
  auto all_there = [&] {
    for (int r : membership_.members()) {
      if (!store_->try_get(prefix + std::to_string(r))) return false;
    }
    return true;
  };
  const auto deadline = Clock::now() + options_.agreement_timeout;
  while (!all_there()) {
    // Aborted means a member died: its key is final now, so one more look decides for every
    // survivor alike.
    if (!groups_.aborted().empty()) {
      HSPMD_CHECK(all_there()) << "rank " << rank_ << ": the switch after step " << step
                               << " did not complete on every member (" << groups_.aborted() << ")";
      break;
    }
    HSPMD_CHECK(Clock::now() < deadline) << "rank " << rank_ << ": members did not confirm the switch after step "
                                         << step << " within " << options_.agreement_timeout.count() << " ms";
    std::this_thread::sleep_for(comm::Millis(5));
  }
  ++switches_;
  strategy_ = pending_strategy_;
}

runtime::SwitchReport ElasticRun::switch_to(runtime::DistTrainer& trainer, const sharding::Strategy& strategy,
                                            const sharding::AnnotationPlan& plan) {
  pending_strategy_ = strategy;
  return trainer.switch_to(plan, strategy.name);
}

RecoveryReport ElasticRun::recover(runtime::DistTrainer& trainer, const std::string& cause) {
  const auto start = Clock::now();
  RecoveryReport report;
  report.cause = cause;
  throw_if_fenced();
  // Whatever this rank still waits on goes, and peers blocked on this rank are released too.
  groups_.abort(cause);

  const std::vector<int> before = membership_.members();
  const std::string commit_key = generation_key("commit/" + std::to_string(trainer.step_count() + 1));
  std::vector<int> members;
  try {
    std::vector<int> outside;  // restarted workers that asked to join take part too
    for (int r = 0; r < world_; ++r) {
      if (!std::binary_search(before.begin(), before.end(), r)) outside.push_back(r);
    }
    members = membership_.regroup(*heartbeat_, options_.agreement_timeout, outside);
  } catch (const Error& e) {
    throw Unrecoverable(e.what());
  }
  std::set_difference(before.begin(), before.end(), members.begin(), members.end(), std::back_inserter(report.dead));
  std::set_difference(members.begin(), members.end(), before.begin(), before.end(), std::back_inserter(report.joined));
  if (report.dead.empty() && report.joined.empty()) {
    throw Unrecoverable("no worker died, so elastic training cannot help: " + cause);
  }
  report.members = members;
  report.generation = membership_.generation();
  // The old generation's heartbeat goes first: a death it noticed only now must not abort the new
  // generation's communicators (its thread is joined here, so no callback can follow).
  heartbeat_.reset();
  groups_.reset(report.generation);
  switches_ = 0;  // switch commits are numbered per generation (a joining rank starts at 0)
  start_heartbeat();
  report.agreed = seconds_since(start);

  // Settle the interrupted step: every survivor reads the same commit, now final.
  std::optional<std::vector<double>> committed;
  if (auto text = store_->try_get(commit_key)) committed = parse_step_totals(*text, commit_key);
  const runtime::InterruptedStep settled = trainer.finish_interrupted_step(members, committed);
  report.interrupted_step = settled.in_progress;
  report.rolled_forward = settled.rolled_forward;
  if (settled.rolled_forward) report.settled_step = settled.metrics;

  // The leader publishes where the run stands (for restarted workers) and re-plans for everyone,
  // preferring plans that move little state.
  const bool is_leader = rank_ == leader(before);
  if (is_leader) {
    store_->set(generation_key("progress"), nlohmann::json{{"step", trainer.step_count()},
                                                           {"loader", trainer.loader_state().to_json()},
                                                           {"strategy", strategy_.to_json_text()}}
                                                .dump());
  }
  const planner::Plan plan = shared_plan(is_leader, report.dead, &report.dead);
  report.planned = seconds_since(start);
  move_state(trainer, plan, report);
  report.moved = seconds_since(start);
  report.resume_step = trainer.step_count();
  return report;
}

void ElasticRun::move_state(runtime::DistTrainer& trainer, const planner::Plan& plan, RecoveryReport& report) {
  report.plan = plan.strategy.name;
  report.predicted_step_seconds = plan.prediction.step_seconds;
  pending_strategy_ = plan.strategy;
  const sharding::AnnotationPlan annotations = trainer.model().compile_plan(plan.strategy);
  try {
    // The full state moves even with bf16-only switches: the dead ranks' master slices and a
    // joining rank's whole share exist only in the base layout, which the re-plan replaces.
    report.switched =
        trainer.switch_state_to(annotations, plan.strategy.name, resolve::BsrAlgorithm::kFusedHeuristic, report.dead);
  } catch (const runtime::StateLost& e) {
    if (!complete_checkpoint(options_.checkpoint_dir)) {
      throw Unrecoverable(std::string(e.what()) + "; and there is no complete checkpoint to fall back to (give --save DIR "
                          "--save-every N)");
    }
    trainer.restore_under(annotations, plan.strategy.name, options_.checkpoint_dir);
    strategy_ = plan.strategy;
    report.from_checkpoint = true;
  }
}

RecoveryReport ElasticRun::complete_join(runtime::DistTrainer& trainer) {
  const auto start = Clock::now();
  RecoveryReport report;
  report.cause = "rank " + std::to_string(rank_) + " rejoins";
  report.members = membership_.members();
  report.generation = membership_.generation();
  report.joined = {rank_};
  const planner::Plan plan = shared_plan(false, {}, &report.dead);
  report.planned = seconds_since(start);
  move_state(trainer, plan, report);
  report.moved = seconds_since(start);
  report.resume_step = trainer.step_count();
  return report;
}

nlohmann::json RecoveryReport::to_json() const {
  nlohmann::json j = {{"event", "recovery"},
                      {"cause", cause},
                      {"dead", dead},
                      {"joined", joined},
                      {"members", members},
                      {"generation", generation},
                      {"interrupted_step", !interrupted_step ? "none" : rolled_forward ? "applied" : "discarded"},
                      {"state_from", from_checkpoint ? "checkpoint" : "survivors"},
                      {"resume_step", resume_step},
                      {"plan", plan},
                      {"predicted_step_seconds", predicted_step_seconds},
                      {"agreed_seconds", agreed},
                      {"planned_seconds", planned},
                      {"moved_seconds", moved}};
  if (switched) j["switch"] = switched->to_json();
  return j;
}

std::string RecoveryReport::to_string() const {
  std::ostringstream out;
  char times[160];
  std::snprintf(times, sizeof times, "%.3fs agreement, %.3fs re-plan, %.3fs state (%.3fs in all)", agreed,
                planned - agreed, moved - planned, moved);
  out << "recovery: ";
  if (!dead.empty()) out << "ranks [" << comm::group_key(dead) << "] lost (" << cause << "); ";
  if (!joined.empty()) out << "ranks [" << comm::group_key(joined) << "] join; ";
  out << "members [" << comm::group_key(members) << "] agreed on generation " << generation << "; "
      << (!interrupted_step ? "no step was in progress"
          : rolled_forward  ? "the interrupted step was committed: applied by every survivor"
                            : "the interrupted step is discarded and redone on the same tokens")
      << "\n"
      << "recovery: re-planned " << plan << " (predicted step " << predicted_step_seconds << " s); state "
      << (from_checkpoint ? "restored from the newest checkpoint" : "moved from surviving replicas")
      << "; resumes after step " << resume_step << "; " << times;
  if (switched) out << "\n" << switched->to_string();
  return out.str();
}

}  // namespace hspmd::elastic
