#include "hspmd/tuning/profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <ctime>
#include <thread>
#include <tuple>

#include <unistd.h>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/core/tensor.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/model.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/memory_fit.h"
#include "hspmd/runtime/dist_trainer.h"

namespace hspmd::tuning {

using planner::ActivationFit;
using planner::DeviceKindProfile;
using planner::LayerTimeFit;
using planner::LinearFit;
using planner::LinkProfile;
using planner::ModelShape;
using planner::Profile;
using planner::TpProfile;

namespace {

std::string temp_dataset(const models::Model& model, int64_t longest) {
  namespace fs = std::filesystem;
  const std::string dir =
      (fs::temp_directory_path() / ("hspmd-profile-" + std::to_string(model.vocab_size()) + "-" +
                                    std::to_string(longest) + "-" + std::to_string(::getpid())))
          .string();
  data::TokenDatasetWriter w(dir, {.vocab_size = static_cast<uint32_t>(model.vocab_size()), .tokenizer_id = "random"});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.vocab_size()) - 1);
  std::vector<int32_t> doc(static_cast<size_t>(longest) + 1);
  for (int d = 0; d < 64; ++d) {
    for (int32_t& t : doc) t = token(rng);
    w.add_document(doc);
  }
  w.finish();
  return dir;
}

// The ranks of a profile on devices (ProfiledDevices): made once and reused by every measurement,
// so a pool keeps its blocks from one point to the next as it does from step to step in training.
struct DeviceRanks {
  const ProfiledDevices& spec;
  std::vector<graph::ComputeDevice> computes;  // by rank

  DeviceRanks(const ProfiledDevices& s, int ranks) : spec(s) {
    for (int r = 0; r < ranks; ++r) computes.push_back(spec.compute(r));
  }
  std::function<comm::Backend(int)> backends() const {
    return [this](int rank) { return spec.backend(rank, computes[static_cast<size_t>(rank)]); };
  }
};

// Returns once the device has finished the work queued on it: a copy to the host waits for it.
void wait_for(graph::ComputeDevice& device) {
  (void)Tensor::zeros(Shape{1}, DType::kFloat32, &device.allocator).to_host();
}

// Times of training steps of rank 0, in all and the share the emulated device stretches.
struct StepTimes {
  std::vector<double> cpu;      // the rank thread's CPU time over each step (on devices: wall time)
  std::vector<double> compute;  // of it, compute (forward, backward, optimizer: runtime::ComputePacer's)
  std::vector<double> post;     // wall time of the step's post phase (gradient sync, clipping, optimizer)
  std::vector<double> pass_comm;  // wall time of the Reshards in its passes (not the gradient buckets)
  double reserved_bytes = 0;    // on devices: the driver's used bytes beyond rank 0's pool, largest seen
  void add(const StepTimes& o) {
    cpu.insert(cpu.end(), o.cpu.begin(), o.cpu.end());
    compute.insert(compute.end(), o.compute.begin(), o.compute.end());
    post.insert(post.end(), o.post.begin(), o.post.end());
    pass_comm.insert(pass_comm.end(), o.pass_comm.begin(), o.pass_comm.end());
    reserved_bytes = std::max(reserved_bytes, o.reserved_bytes);
  }
};

double median(std::vector<double> v) {
  HSPMD_ASSERT(!v.empty()) << "profile: no step was timed";
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The medians of a point's steps. The median, not the best: a training run meets the host's
// typical state (caches shared with other processes), not its luckiest, and the benchmark of the
// cost model measures runs by their median step.
struct StepTime {
  double cpu = 0, compute = 0, post = 0;
  explicit StepTime(const StepTimes& t) : cpu(median(t.cpu)), compute(median(t.compute)), post(median(t.post)) {}
};

// `repeats` steps of rank 0 after a warm-up step: CPU times of the rank's thread (its kernels run on
// it, one kernel thread), so other processes on the host do not inflate them much and waiting for
// a TP peer does not count. `speed` < 1 runs the rank as an emulated device of that speed (its
// compute paced, see runtime/emulation.h); the times are CPU times all the same. On devices
// (`on`): wall times from a finished device to a finished step (the header).
// `cp` > 1: the stage is context-parallel, tp x cp ranks (CP outer, TP inner).
StepTimes time_steps(const std::shared_ptr<const models::Model>& model, const data::TokenDataset& ds, int tp,
                     int64_t seq_len, int micro_batch_size, int repeats, DType precision, double speed = 1.0,
                     DeviceRanks* on = nullptr, int micro_batches = 1, int cp = 1) {
  sharding::Strategy strategy =
      planner::single_stage_strategy(tp * cp, model->num_layers(), micro_batch_size, 1, false, micro_batches);
  strategy.pipelines[0].stages[0].cp = cp;
  const sharding::AnnotationPlan plan = model->compile_plan(strategy);
  const int world = tp * cp;
  StepTimes out;
  auto body = [&](int rank, comm::GroupCache& groups) {
    runtime::DistOptions o;
    o.train.steps = 1 + repeats;
    o.train.seq_len = seq_len;
    o.train.global_batch_tokens = micro_batch_size * seq_len * micro_batches;
    o.train.threads = 1;
    o.train.warmup = 1;
    o.train.precision = precision;
    o.device.rank = rank;
    o.device.speed = speed;
    o.trace = true;
    if (on) {
      o.compute = [on](int r) { return on->computes[static_cast<size_t>(r)]; };
      o.comm_on_device = true;
    }
    runtime::DistTrainer t(model, ds, plan, o, rank, world, groups);
    for (int s = 0; s <= repeats; ++s) {
      t.tracer().clear();
      if (on) {
        graph::ComputeDevice& device = on->computes[static_cast<size_t>(rank)];
        wait_for(device);
        const auto start = std::chrono::steady_clock::now();
        t.step();
        wait_for(device);
        const double wall = seconds_since(start);
        if (rank == 0 && s > 0) {
          out.cpu.push_back(wall);
          out.compute.push_back(wall);
          out.post.push_back(0);  // from steps of two micro-batches (device_post_seconds_per_parameter)
        }
        continue;
      }
      const runtime::ComputeClock start = runtime::ComputeClock::now();
      const double compute = t.compute_time().cpu;
      t.step();
      const double cpu = runtime::ComputeClock::now().since(start).cpu;
      if (rank == 0 && s > 0) {
        out.cpu.push_back(cpu);
        out.compute.push_back(t.compute_time().cpu - compute);
        const runtime::TraceSummary sum = t.tracer().summary();
        out.post.push_back(sum.seconds.count("optimizer") ? sum.seconds.at("optimizer") : 0.0);
        double comm = 0;
        for (const runtime::TraceEvent& e : t.tracer().events()) {
          if (e.category == "comm" && !e.name.starts_with("grad-")) comm += 1e-6 * e.duration_us;
        }
        out.pass_comm.push_back(comm);
      }
    }
    if (on && rank == 0 && on->spec.memory) {
      // While the trainer and its communicators hold what they hold.
      const DeviceMemoryInfo m = on->spec.memory(0);
      const Allocator& pool = on->computes[0].allocator;
      const double used = static_cast<double>(m.total_bytes) - static_cast<double>(m.free_bytes);
      out.reserved_bytes = std::max(0.0, used - static_cast<double>(pool.current_bytes() + pool.cached_bytes()));
    }
  };
  comm::run_thread_ranks(world, body, comm::Millis(on ? 60'000 : 10'000),
                         on ? on->backends() : std::function<comm::Backend(int)>{});
  return out;
}

void say(const ProfilerOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

// Between two thread ranks over Gloo, or between devices 0 and 1 (`on`) on their buffers.
LinkProfile measure_links(const ProfilerOptions& o, DeviceRanks* on) {
  // floats: 4 KiB, and 16 MiB (64 MiB between devices, whose links are an order faster)
  const int64_t kSmall = 1024, kLarge = on ? 16 << 20 : 4 << 20;
  constexpr int kRounds = 5;
  double p2p_small = 1e30, p2p_large = 1e30, ar_small = 1e30, ar_large = 1e30;
  auto body = [&](int rank, comm::GroupCache& groups) {
    auto comm = groups.get({0, 1});
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<float> host;
      Tensor device;
      if (on) {
        device = Tensor::full(Shape{count}, DType::kFloat32, 1.0, &on->computes[static_cast<size_t>(rank)].allocator);
      } else {
        host.assign(static_cast<size_t>(count), 1.0f);
      }
      const comm::CommBuffer buf = on ? comm::CommBuffer::of(device) : comm::CommBuffer::of(host);
      for (int round = 0; round <= kRounds; ++round) {
        comm->barrier().wait();
        auto t0 = std::chrono::steady_clock::now();
        // Ping-pong: 0 -> 1, then 1 -> 0; half the round trip is one message.
        if (rank == 0) {
          comm->send_recv({.sends = {{1, buf}}}).wait();
          comm->send_recv({.recvs = {{1, buf}}}).wait();
        } else {
          comm->send_recv({.recvs = {{0, buf}}}).wait();
          comm->send_recv({.sends = {{0, buf}}}).wait();
        }
        const double ping = seconds_since(t0) / 2;
        comm->barrier().wait();
        t0 = std::chrono::steady_clock::now();
        comm->allreduce({.data = buf}).wait();
        const double ar = seconds_since(t0);
        if (rank == 0 && round > 0) {
          (count == kSmall ? p2p_small : p2p_large) = std::min(count == kSmall ? p2p_small : p2p_large, ping);
          (count == kSmall ? ar_small : ar_large) = std::min(count == kSmall ? ar_small : ar_large, ar);
        }
      }
    }
  };
  comm::run_thread_ranks(2, body, comm::Millis(on ? 60'000 : 10'000),
                         on ? on->backends() : std::function<comm::Backend(int)>{});
  LinkProfile l;
  l.latency = p2p_small;
  const double bytes = kLarge * 4.0;
  l.p2p_bandwidth = bytes / std::max(p2p_large - p2p_small, 1e-9);
  // Two ranks: a ring all-reduce sends bytes / 2 twice, paying the latency twice.
  l.allreduce_bandwidth = bytes / std::max(ar_large - ar_small, 1e-9);
  char line[200];
  std::snprintf(line, sizeof line,
                "profile: links (%s): latency %.1f us, p2p %.2f GB/s, all-reduce bus %.2f GB/s\n",
                on ? "devices 0 and 1, their communicators" : "2 thread ranks, Gloo", l.latency * 1e6,
                l.p2p_bandwidth / 1e9, l.allreduce_bandwidth / 1e9);
  say(o, line);
  return l;
}

}  // namespace

namespace {

// What profile_host times: every TP degree x sequence length x micro-batch size.
struct Grid {
  std::vector<int> tps;
  std::vector<int64_t> seqs;
  std::vector<int> micro_batch_sizes;
  std::vector<int> cps;  // CP degrees, at TP 1
  int64_t longest = 0;  // sequence length
  int biggest_b = 0;    // micro-batch size
  int points() const {
    return static_cast<int>((tps.size() + cps.size()) * seqs.size() * micro_batch_sizes.size());
  }
};

// The options' grid; unset TP degrees and sequence lengths default as ProfilerOptions says. `ranks`:
// the host's cores, or the devices there are.
Grid grid_of(const models::Model& model, const ProfilerOptions& options, int ranks) {
  Grid g{options.tp_degrees, options.seq_lens, options.micro_batch_sizes, {}};
  for (int c : options.cp_degrees) {
    HSPMD_CHECK(c >= 1) << "profile: CP degree " << c << " must be positive";
    if (c > 1) g.cps.push_back(c);
  }
  if (options.cp_degrees.empty()) {
    for (int c = 2; c <= ranks; c *= 2) g.cps.push_back(c);
  }
  if (g.tps.empty()) {
    const ModelShape shape = ModelShape::of(model);
    for (int t = 1; t <= ranks; t *= 2) {
      if (shape.tp_divides(t)) g.tps.push_back(t);
    }
  }
  if (options.on_devices) {
    for (int t : g.tps) {
      HSPMD_CHECK(t <= ranks) << "profile: TP " << t << " needs " << t << " devices, and " << ranks << " from "
                              << options.on_devices->description << " are visible";
    }
    for (int c : g.cps) {
      HSPMD_CHECK(c <= ranks) << "profile: CP " << c << " needs " << c << " devices, and " << ranks << " from "
                              << options.on_devices->description << " are visible";
    }
  }
  if (g.seqs.empty()) {
    // A GPU's kernels at the host's lengths would time their launches, not their work.
    const std::vector<int64_t> lengths = options.on_devices ? std::vector<int64_t>{512, 1024, 2048}
                                                             : std::vector<int64_t>{64, 128, 256};
    for (int64_t s : lengths) {
      if (s <= model.max_sequence_length()) g.seqs.push_back(s);
    }
  }
  HSPMD_CHECK(!g.tps.empty() && !g.seqs.empty() && !g.micro_batch_sizes.empty())
      << "profile: nothing to measure (TP degrees, sequence lengths and micro-batch sizes must be non-empty)";
  g.longest = *std::max_element(g.seqs.begin(), g.seqs.end());
  g.biggest_b = *std::max_element(g.micro_batch_sizes.begin(), g.micro_batch_sizes.end());
  return g;
}

// The kinds to fit and their speeds: one per emulated device name, or the host itself.
std::map<std::string, double> kind_speeds(const ProfilerOptions& options) {
  std::map<std::string, double> speed_of;
  if (!options.devices) {
    speed_of[options.kind] = 1.0;
    return speed_of;
  }
  for (int r = 0; r < options.devices->world_size(); ++r) {
    const runtime::EmulatedDevice& d = options.devices->of(r);
    auto [it, fresh] = speed_of.emplace(d.name, d.speed);
    HSPMD_CHECK(fresh || it->second == d.speed)
        << "profile: emulated devices named \"" << d.name << "\" have different speeds (" << it->second << " and "
        << d.speed << "); a device kind needs one speed";
  }
  return speed_of;
}

// An emulated device computes in bursts between sleeps, and a burst finds the caches other
// processes used meanwhile: the same work takes more CPU time than back to back. Each emulated
// kind's factor is measured once, on the 3-layer model at the longest sequences and largest
// micro-batch, running as that device, and scales its compute.
std::map<std::string, double> burst_factors(const std::shared_ptr<const models::Model>& three,
                                            const data::TokenDataset& ds, const Grid& grid,
                                            const std::map<std::string, double>& speed_of,
                                            const ProfilerOptions& options) {
  std::map<std::string, double> burst_factor;
  for (const auto& [name, speed] : speed_of) {
    burst_factor[name] = 1.0;
    if (speed >= 1.0) continue;
    // Alternating, so that a drift of the host's speed meets both sides alike.
    StepTimes plain_steps, paced_steps;
    const int repeats = std::max(2, options.repeats / 3);
    for (int pass = 0; pass < 3; ++pass) {
      plain_steps.add(time_steps(three, ds, 1, grid.longest, grid.biggest_b, repeats, options.precision));
      paced_steps.add(time_steps(three, ds, 1, grid.longest, grid.biggest_b, repeats, options.precision, speed));
    }
    const StepTime plain(plain_steps), paced(paced_steps);
    if (plain.compute > 0) burst_factor[name] = paced.compute / plain.compute;
    char line[200];
    std::snprintf(line, sizeof line,
                  "profile: %s (speed %.3g): compute between sleeps takes %.3fx the CPU time of back-to-back "
                  "compute (%.2f ms vs %.2f ms)\n",
                  name.c_str(), speed, burst_factor[name], paced.compute * 1e3, plain.compute * 1e3);
    say(options, line);
  }
  return burst_factor;
}

// The timed steps of every point of the grid, by (degree, s, b, layers), for the 1- and 3-layer
// models: `tp` by TP degree, `cp` by CP degree (at TP 1).
using StepTable = std::map<std::tuple<int, int64_t, int, int>, StepTimes>;
struct StepTables {
  StepTable tp, cp;
};

// Every point is timed in `passes` rounds over all points (repeats / passes steps each), so that a
// drift of the host's speed over the seconds the profile takes meets every point alike.
StepTables time_grid(const std::shared_ptr<const models::Model>& one, const std::shared_ptr<const models::Model>& three,
                     const data::TokenDataset& ds, const Grid& grid, const ProfilerOptions& options, DeviceRanks* on) {
  const int passes = options.repeats >= 6 ? 3 : 1;
  const int n = std::max(1, options.repeats / passes);
  StepTables steps;
  auto time_point = [&](StepTable& table, int degree, int tp, int cp, int64_t s, int b) {
    table[{degree, s, b, 1}].add(time_steps(one, ds, tp, s, b, n, options.precision, 1.0, on, 1, cp));
    table[{degree, s, b, 3}].add(time_steps(three, ds, tp, s, b, n, options.precision, 1.0, on, 1, cp));
  };
  for (int pass = 0; pass < passes; ++pass) {
    for (int64_t s : grid.seqs) {
      for (int b : grid.micro_batch_sizes) {
        for (int t : grid.tps) time_point(steps.tp, t, t, 1, s, b);
        for (int c : grid.cps) time_point(steps.cp, c, 1, c, s, b);
      }
    }
  }
  return steps;
}

// The step's post phase (gradient sync into the optimizer layout, the norm for clipping, AdamW)
// per parameter, from the trainer's own post on one rank (the 3-layer model, no peer to wait
// for): it runs once per step, not per micro-batch, and costs several times a bare AdamW loop
// over one tensor (tens of tensors, each resharded, its squares summed, its state touched cold).
double post_seconds_per_parameter(const StepTable& steps, const Grid& grid, const ModelShape& shape,
                                  const ProfilerOptions& options) {
  const int t = grid.tps.front();
  const double params = shape.stage_parameters(3, true, true) / t;
  const double optimizer = StepTime(steps.at({t, grid.longest, grid.biggest_b, 3})).post / params;
  char line[200];
  std::snprintf(line, sizeof line, "profile: post phase (gradient sync, clipping, AdamW) %.3g s per parameter\n",
                optimizer);
  say(options, line);
  return optimizer;
}

// The post phase on devices, where the host cannot see it apart (the kernels run behind the host):
// a step of two micro-batches less one of one is one micro-batch's forward and backward, and one
// micro-batch's step less that is the step's post phase (gradient sync, clipping norm, AdamW) and
// its other fixed costs. Timed on the 3-layer model at the longest sequences, largest micro-batch
// and lowest TP degree, whose one-micro-batch steps the grid has.
double device_post_seconds_per_parameter(const std::shared_ptr<const models::Model>& three,
                                         const data::TokenDataset& ds, const StepTable& steps, const Grid& grid,
                                         const ModelShape& shape, const ProfilerOptions& options, DeviceRanks& on) {
  const int t = grid.tps.front();
  const StepTimes two = time_steps(three, ds, t, grid.longest, grid.biggest_b, options.repeats, options.precision,
                                   1.0, &on, /*micro_batches=*/2);
  const double one_step = StepTime(steps.at({t, grid.longest, grid.biggest_b, 3})).cpu;
  const double two_steps = StepTime(two).cpu;
  const double post = std::max(0.0, 2 * one_step - two_steps);
  const double optimizer = post / (shape.stage_parameters(3, true, true) / t);
  char line[240];
  std::snprintf(line, sizeof line,
                "profile: post phase %.3g s per parameter (steps of 1 and 2 micro-batches: %.2f ms, %.2f ms)\n",
                optimizer, one_step * 1e3, two_steps * 1e3);
  say(options, line);
  return optimizer;
}

// Host <-> device copies of 64 MiB through device 0's allocator (its pinned chunks on a GPU), from
// and to pageable host memory as the trainer's feeds, losses and checkpoints: best of 5 after one.
struct HostCopyRates {
  double to_device = 0, to_host = 0;  // bytes/s
};
HostCopyRates measure_host_copies(DeviceRanks& on, const ProfilerOptions& options) {
  graph::ComputeDevice& device = on.computes[0];
  constexpr int64_t kCount = 16 << 20;
  const Tensor host = Tensor::full(Shape{kCount}, DType::kFloat32, 1.0);
  double in = 1e30, out = 1e30;
  for (int round = 0; round <= 5; ++round) {
    wait_for(device);
    auto start = std::chrono::steady_clock::now();
    const Tensor there = host.clone(&device.allocator);
    wait_for(device);
    const double to_device = seconds_since(start);
    start = std::chrono::steady_clock::now();
    const Tensor back = there.to_host();
    const double to_host = seconds_since(start);
    if (round > 0) {
      in = std::min(in, to_device);
      out = std::min(out, to_host);
    }
  }
  const double bytes = kCount * 4.0;
  HostCopyRates r{bytes / std::max(in, 1e-9), bytes / std::max(out, 1e-9)};
  char line[200];
  std::snprintf(line, sizeof line, "profile: host -> device %.2f GB/s, device -> host %.2f GB/s (64 MiB, pageable)\n",
                r.to_device / 1e9, r.to_host / 1e9);
  say(options, line);
  return r;
}

// One point of the grid at TP degree t: the layer's and the ends' compute (stretched by an
// emulated device) and the rest of the rank's CPU time (dispatch, data; the host's own speed
// whatever the device).
// A sequence of s tokens as CP ranks of degree cp lay it out: padded to a multiple of 2 cp (the
// zigzag chunks, data/context_parallel.h); s itself without CP.
double zigzag_padded(int64_t s, int cp) {
  const double tokens = static_cast<double>(s);
  return cp > 1 ? std::ceil(tokens / (2.0 * cp)) * 2.0 * cp : tokens;
}

struct Point {
  double seq_len = 0;  // the whole sequence (with CP: padded to the zigzag's multiple of 2c)
  int b = 1;
  double ends_tokens = 0;  // the rank's tokens: b * seq_len, over c with CP
  double layer_compute = 0, layer_rest = 0, ends_compute = 0, ends_rest = 0;
};

// The points of TP degree t (`cp` = 1, from the TP table) or of CP degree cp at TP 1 (from the CP
// table), the per-step post phase taken out; `done` counts the points reported.
std::vector<Point> points_at(int t, int cp, const StepTables& tables, const Grid& grid, const ModelShape& shape,
                             double optimizer, int& done, const ProfilerOptions& options) {
  std::vector<Point> measured;
  const StepTable& steps = cp > 1 ? tables.cp : tables.tp;
  const int degree = cp > 1 ? cp : t;
  // A step's optimizer covers the rank's shard of the layers and of the embedding and head (CP
  // ranks hold the weights whole); it is per step, not per micro-batch, so it is taken out of the
  // per-micro-batch figures.
  const double layer_optimizer = optimizer * shape.layer_parameters / t;
  const double ends_optimizer = optimizer * (shape.embedding_parameters + shape.head_parameters) / t;
  for (int64_t s : grid.seqs) {
    for (int b : grid.micro_batch_sizes) {
      const StepTime t1(steps.at({degree, s, b, 1})), t3(steps.at({degree, s, b, 3}));
      const double padded = zigzag_padded(s, cp);
      Point p{padded, b, b * padded / cp};
      p.layer_compute = std::max(0.0, (t3.compute - t1.compute) / 2 - layer_optimizer);
      p.layer_rest = std::max(0.0, ((t3.cpu - t3.compute) - (t1.cpu - t1.compute)) / 2);
      p.ends_compute = std::max(0.0, t1.compute - p.layer_compute - layer_optimizer - ends_optimizer);
      p.ends_rest = std::max(0.0, (t1.cpu - t1.compute) - p.layer_rest);
      measured.push_back(p);
      char line[240];
      std::snprintf(line, sizeof line,
                    "profile: [%d/%d] %s %d, seq %lld, micro-batch %d: step %.2f ms (1 layer), %.2f ms (3 layers), "
                    "of it compute %.2f ms, %.2f ms: layer %.2f ms + %.2f ms host\n",
                    ++done, grid.points(), cp > 1 ? "CP" : "TP", degree, static_cast<long long>(s), b, t1.cpu * 1e3, t3.cpu * 1e3,
                    t1.compute * 1e3, t3.compute * 1e3, p.layer_compute * 1e3, p.layer_rest * 1e3);
      say(options, line);
    }
  }
  return measured;
}

// A kind's times at TP degree t: compute stretched by `stretch` (burst factor / speed) plus the
// host's rest, fitted.
TpProfile fit_kind(const std::vector<Point>& measured, double stretch, const std::string& name, const char* what,
                   int degree, const ProfilerOptions& options) {
  std::vector<TimeSample> layer_samples;
  std::vector<std::pair<double, double>> ends_samples;
  for (const Point& p : measured) {
    layer_samples.push_back({p.seq_len, p.b, p.layer_compute * stretch + p.layer_rest});
    ends_samples.push_back({p.ends_tokens, p.ends_compute * stretch + p.ends_rest});
  }
  TpProfile tp;
  tp.layer = fit_layer_time(layer_samples);
  tp.ends = fit_linear(ends_samples);
  tp.samples = static_cast<int>(layer_samples.size());
  for (const TimeSample& s : layer_samples) {
    const double fit = tp.layer.seconds(s.micro_batch_size, s.seq_len);
    if (s.seconds > 0) tp.fit_error = std::max(tp.fit_error, std::abs(fit - s.seconds) / s.seconds);
  }
  char line[260];
  std::snprintf(line, sizeof line,
                "profile: %s %s %d fit: layer = b (%.3g s^2 + %.3g s) + %.3g s (largest error %.1f%%); ends %.3g "
                "s/token + %.3g s\n",
                name.c_str(), what, degree, tp.layer.a, tp.layer.c1, tp.layer.c0, 100 * tp.fit_error, tp.ends.per_token,
                tp.ends.constant);
  say(options, line);
  return tp;
}

// The CP group's Reshards per layer and micro-batch beyond their bytes on `link`, for each emulated
// kind and CP degree: CP-c steps of the 3-layer model (longest sequences, largest micro-batch) with
// every rank running as the kind, their in-pass Reshards' wall time per layer (all of a
// single-stage CP group's in-pass Reshards are per layer but the labels' and positions' few, which
// a difference against the 1-layer model would trade for twice the noise), less the K/V
// all-gathers' and reduce-scatters' ring time. What is left is the waits at each collective for the
// group's slowest rank (each computes at its own pace in between, and a device's pace varies from
// one collective to the next) and the index Reshards.
void measure_cp_lockstep(const std::shared_ptr<const models::Model>& three, const data::TokenDataset& ds,
                         const Grid& grid, const std::map<std::string, double>& speed_of, const ModelShape& shape,
                         const LinkProfile& link, const ProfilerOptions& options,
                         std::map<std::string, DeviceKindProfile>& kinds) {
  const int b = grid.biggest_b;
  // In three passes over the (degree, kind) pairs, their steps pooled: a burst of the host's other
  // work then meets a third of a pair's steps, which the median passes over.
  constexpr int kPasses = 3;
  const int repeats = std::max(2, options.repeats / kPasses);
  std::map<std::pair<int, std::string>, StepTimes> steps;
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int c : grid.cps) {
      for (const auto& [name, speed] : speed_of) {
        steps[{c, name}].add(time_steps(three, ds, 1, grid.longest, b, repeats, options.precision, speed, nullptr, 1, c));
      }
    }
  }
  for (const auto& [key, times] : steps) {
    const auto& [c, name] = key;
    // K and V of the whole sequence in float32 (the host's activations, as DeviceKindProfile below says).
    const double kv_bytes =
        b * zigzag_padded(grid.longest, c) * static_cast<double>(shape.kv_heads) * (shape.hidden / shape.heads) * 4.0;
    const double ring = 4.0 * planner::CostModel::ring_allgather(c, {link.allreduce_bandwidth, link.latency}, kv_bytes);
    const double per_layer = median(times.pass_comm) / 3;
    const double lockstep = std::max(0.0, per_layer - ring);
    kinds[name].cp[c].lockstep_seconds_per_layer = lockstep;
    char line[240];
    std::snprintf(line, sizeof line,
                  "profile: %s CP %d: its Reshards take %.2f ms per layer (seq %lld, micro-batch %d), %.2f ms "
                  "beyond the K/V bytes on the link\n",
                  name.c_str(), c, per_layer * 1e3, static_cast<long long>(grid.longest), b, lockstep * 1e3);
    say(options, line);
  }
}

// How the profile was made, for its "source".
std::string measured_source(int cores, bool emulated, const ProfiledDevices* on) {
  if (on) {
    return "measured on " + on->description + " (" + std::to_string(on->count) +
           " device(s); a rank per device, its communicators; wall time of steps to the device's finish); "
           "memory from the runtime's estimate, reserved bytes and capacity from the device";
  }
  std::string how = "measured on this host (" + std::to_string(cores) +
                    " cores; ranks as threads, one kernel thread each, Gloo; thread CPU time); memory from the "
                    "runtime's estimate";
  if (emulated) {
    how += "; emulated device kinds (CPU emulation, not GPUs): the host's compute divided by each kind's speed";
  }
  return how;
}

}  // namespace

Profile profile_host(const models::Model& model, const ProfilerOptions& options) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  HSPMD_CHECK(!(options.on_devices && options.devices))
      << "profile: emulated devices (--devices) are kinds of the host's cores; the devices measured ("
      << options.on_devices->description << ") are their own kind";
  const Grid grid = grid_of(model, options, options.on_devices ? options.on_devices->count : cores);
  std::optional<DeviceRanks> on;
  if (options.on_devices) {
    const int links = options.on_devices->count >= 2 ? 2 : 1;
    int ranks = std::max(*std::max_element(grid.tps.begin(), grid.tps.end()), links);
    for (int c : grid.cps) ranks = std::max(ranks, c);
    on.emplace(*options.on_devices, ranks);
  }
  DeviceRanks* on_ranks = on ? &*on : nullptr;
  const std::string dir = temp_dataset(model, grid.longest * grid.biggest_b);
  const data::TokenDataset ds = data::TokenDataset::open(dir);
  const std::shared_ptr<const models::Model> one = model.with_num_layers(1), three = model.with_num_layers(3);
  const ModelShape shape = ModelShape::of(model);
  const std::map<std::string, double> speed_of = kind_speeds(options);
  const std::map<std::string, double> burst_factor = burst_factors(three, ds, grid, speed_of, options);
  const StepTables steps = time_grid(one, three, ds, grid, options, on_ranks);
  const double optimizer = on ? device_post_seconds_per_parameter(three, ds, steps.tp, grid, shape, options, *on)
                              : post_seconds_per_parameter(steps.tp, grid, shape, options);

  int done = 0;
  DeviceKindProfile host;
  host.activation_element_bytes = 4;  // float32 activations
  std::map<std::string, DeviceKindProfile> kinds;
  for (int t : grid.tps) {
    const std::vector<Point> measured = points_at(t, 1, steps, grid, shape, optimizer, done, options);
    for (const auto& [name, speed] : speed_of) {
      kinds[name].tp[t] = fit_kind(measured, burst_factor.at(name) / speed, name, "TP", t, options);
      kinds[name].optimizer_seconds_per_parameter = optimizer * burst_factor.at(name) / speed;
    }
    // The same for every kind: the emulated devices differ in speed and capacity, not in layout.
    const ActivationFit a = planner::fit_activations(model, t);
    if (t == grid.tps.front()) planner::fit_state_bytes(model, t, host);
    for (auto& [name, k] : kinds) k.tp[t].activations = a;
  }
  for (int c : grid.cps) {
    const std::vector<Point> measured = points_at(1, c, steps, grid, shape, optimizer, done, options);
    for (const auto& [name, speed] : speed_of) {
      const TpProfile fit = fit_kind(measured, burst_factor.at(name) / speed, name, "CP", c, options);
      planner::CpProfile& cp = kinds[name].cp[c];
      cp.layer = fit.layer;
      cp.ends = fit.ends;
      cp.samples = fit.samples;
      cp.fit_error = fit.fit_error;
    }
  }

  if (on) {
    for (const auto& [key, times] : steps.tp) host.reserved_bytes = std::max(host.reserved_bytes, times.reserved_bytes);
    if (on->spec.memory) host.memory_bytes = static_cast<double>(on->spec.memory(0).total_bytes);
    const HostCopyRates copies = measure_host_copies(*on, options);
    host.host_to_device_bandwidth = copies.to_device;
    host.device_to_host_bandwidth = copies.to_host;
    char line[200];
    std::snprintf(line, sizeof line, "profile: device memory %.2f GiB, of it %.2f GiB reserved beyond the pool\n",
                  host.memory_bytes / (1 << 30), host.reserved_bytes / (1 << 30));
    say(options, line);
  }

  Profile p;
  p.model = options.model;
  // Host: CPU time, without the waits for TP peers: the cost model adds the TP collectives. Devices:
  // wall time, with the TP collectives inside (over these devices' links).
  p.layer_includes_tp_comm = on.has_value();
  // One device has no link to measure: the planner then takes the cluster spec's figures.
  if (!on || on->spec.count >= 2) p.links["intra-node"] = measure_links(options, on_ranks);
  // On devices the CP steps' wall time is all compute (the header); their Reshards run behind it.
  if (!on) measure_cp_lockstep(three, ds, grid, speed_of, shape, p.links.at("intra-node"), options, kinds);
  std::filesystem::remove_all(dir);
  for (auto& [name, k] : kinds) {
    k.bytes_per_parameter = host.bytes_per_parameter;
    k.zero_bytes_per_parameter = host.zero_bytes_per_parameter;
    k.activation_element_bytes = host.activation_element_bytes;
    k.reserved_bytes = host.reserved_bytes;
    k.memory_bytes = host.memory_bytes;
    k.host_to_device_bandwidth = host.host_to_device_bandwidth;
    k.device_to_host_bandwidth = host.device_to_host_bandwidth;
    p.devices[name] = k;
  }
  p.source = measured_source(cores, options.devices != nullptr, options.on_devices);
  return p;
}

}  // namespace hspmd::tuning
