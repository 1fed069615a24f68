// Planning at scale: for clusters of 64, 256, 1,024 and 4,096 GPUs (planner/cluster_generator.h),
// the time and peak memory of
//   cluster  building the topology from its generated spec (resolve/topology.h)
//   plan     the planner on a two-kind cluster, 3/8 H800 + 5/8 H20 (1,024: 384 + 640, the planner
//            issue's case), 8 a node, Llama 32B with the shipped DERIVED profile
//            (examples/profiles/paper-h800-h20-llama-32b.json), global batch GPUs x 4,096 tokens
//   explain  `hspmd explain` of every rank of a synthetic Llama 70B DP x TP8 x PP4 layout on half
//            H800, half H20 (specialize/plan_report.h: annotations, resolution, bytes per link)
//   switch   the fused BSR plan of switching that layout to DP x TP4 x PP8, parameters and both
//            AdamW moments (switching/switch_plan.h, what the trainer runs)
// Each measure runs in a child process of its own (fork), so its peak resident memory is its own
// (getrusage of the child; the parent holds little before forking).
//
// Run (from build/release): ./bench_planner_scale_bench [--sizes=64,256,1024,4096]
//     [--parts=cluster,plan,explain,switch] [--time-limit=SECONDS] [--repeats=N] [--digest]
// A plan stopped by --time-limit (default 300 s) is printed with its step marked "(limit)".
// --digest adds, after the timing, a 64-bit FNV-1a digest of what was made: explain's whole text;
// the switch plan's every device's ops in order, its messages and its bytes per sender. Two builds
// that print the same digests made the same outputs, byte for byte (a check for speed-ups).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/planner/cluster_generator.h"
#include "hspmd/planner/planner.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/specialize/plan_report.h"
#include "hspmd/switching/switch_plan.h"

#include "load_average.h"

namespace hspmd {
namespace {

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().string();

using bench::load_average;

std::string cluster_text(int gpus, int h800) {
  const resolve::Topology paper = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  planner::ClusterRecipe r = planner::recipe_like(paper, {{"H800", h800}, {"H20", gpus - h800}});
  r.name = "generated-" + std::to_string(gpus);
  return planner::cluster_json(r);
}

// DP x TP t x PP s of Llama 70B over every rank: pipeline p's stage j holds ranks
// p*t*s + j*t ... + t - 1.
sharding::Strategy layout(int gpus, int tp, int pp, int layers) {
  sharding::Strategy st;
  st.name = "dp" + std::to_string(gpus / (tp * pp)) + "-tp" + std::to_string(tp) + "-pp" + std::to_string(pp);
  st.zero = 1;
  for (int base = 0; base + tp * pp <= gpus; base += tp * pp) {
    sharding::PipelineSpec pipe;
    pipe.micro_batch_size = 1;
    pipe.num_micro_batches = 2 * pp;
    for (int j = 0; j < pp; ++j) {
      sharding::StageSpec s;
      for (int i = 0; i < tp; ++i) s.ranks.push_back(base + j * tp + i);
      s.first_layer = j * layers / pp;
      s.last_layer = (j + 1) * layers / pp - 1;
      pipe.stages.push_back(s);
    }
    st.pipelines.push_back(pipe);
  }
  return st;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One measure in a child: returns its line (what it printed) and its peak RSS.
struct Measure {
  std::string line;
  double peak_gib = 0;
  bool ok = false;
};

template <typename F>
Measure in_child(F&& body) {
  int fd[2];
  if (pipe(fd) != 0) return {"pipe failed", 0, false};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    std::string out;
    try {
      out = body();
    } catch (const std::exception& e) {
      out = std::string("FAILED: ") + e.what();
    }
    if (write(fd[1], out.data(), out.size()) < 0) _exit(2);
    close(fd[1]);
    _exit(0);
  }
  close(fd[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  return {out, ru.ru_maxrss / (1024.0 * 1024.0), WIFEXITED(status) && WEXITSTATUS(status) == 0};
}

// FNV-1a, 64 bits: stable across builds and platforms, unlike std::hash.
struct Digest {
  uint64_t value = 14695981039346656037ull;
  void add(std::string_view bytes) {
    for (unsigned char c : bytes) value = (value ^ c) * 1099511628211ull;
  }
  std::string text() const {
    char out[32];
    std::snprintf(out, sizeof out, "  digest %016llx", static_cast<unsigned long long>(value));
    return out;
  }
};

std::string switch_digest(const switching::SwitchPlan& plan) {
  Digest d;
  for (const auto& [device, ops] : plan.bsr.ops) {
    d.add("device " + std::to_string(device) + "\n");
    for (const resolve::CommOp& op : ops) d.add(op.to_string() + "\n");
  }
  for (const resolve::BsrMessage& m : plan.bsr.messages()) {
    d.add(std::to_string(m.sender) + ">" + std::to_string(m.receiver) + " " + std::to_string(m.bytes) + " " +
          std::to_string(m.pieces) + "\n");
  }
  for (const auto& [sender, bytes] : plan.bsr.bytes_sent) d.add(std::to_string(sender) + ":" + std::to_string(bytes) + "\n");
  return d.text();
}

std::vector<int> parse_ints(const std::string& text) {
  std::vector<int> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace
}  // namespace hspmd

int main(int argc, char** argv) {
  using namespace hspmd;
  std::vector<int> sizes{64, 256, 1024, 4096};
  std::string parts = "cluster,plan,explain,switch";
  double time_limit = 300;
  int repeats = 1;
  bool digest = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--sizes=", 0) == 0) sizes = parse_ints(a.substr(8));
    else if (a.rfind("--parts=", 0) == 0) parts = a.substr(8);
    else if (a.rfind("--time-limit=", 0) == 0) time_limit = std::stod(a.substr(13));
    else if (a.rfind("--repeats=", 0) == 0) repeats = std::stoi(a.substr(10));
    else if (a == "--digest") digest = true;
    else {
      std::fprintf(stderr, "usage: %s [--sizes=64,256,1024,4096] [--parts=cluster,plan,explain,switch] "
                           "[--time-limit=SECONDS] [--repeats=N] [--digest]\n", argv[0]);
      return 2;
    }
  }
  auto wants = [&](const char* p) { return ("," + parts + ",").find("," + std::string(p) + ",") != std::string::npos; };
  std::printf("planner at scale: best of %d, wall seconds and the child's peak resident GiB; host load average "
              "%.1f at start\n", repeats, load_average());
  const models::LlamaConfig c32 = models::LlamaConfig::from_file(kRoot + "/configs/llama-32b.json");
  const models::LlamaConfig c70 = models::LlamaConfig::from_file(kRoot + "/configs/llama-70b.json");
  const planner::Profile profile =
      planner::Profile::from_file(kRoot + "/examples/profiles/paper-h800-h20-llama-32b.json");
  for (int gpus : sizes) {
    const std::string planned = cluster_text(gpus, gpus * 3 / 8);
    const std::string halves = cluster_text(gpus, gpus / 2);
    auto run = [&](const char* what, auto&& body) {
      Measure best;
      double best_s = 1e300;
      for (int r = 0; r < repeats; ++r) {
        Measure m = in_child(body);
        double s = 0;
        std::sscanf(m.line.c_str(), "%lf", &s);
        if (!m.ok || s < best_s) {
          best = m;
          best_s = s;
        }
        if (!m.ok) break;
      }
      std::printf("%5d GPUs  %-8s %s  (peak %.2f GiB, load %.1f)\n", gpus, what, best.line.c_str(), best.peak_gib,
                  load_average());
      std::fflush(stdout);
    };
    if (wants("cluster")) {
      run("cluster", [&] {
        const auto t = std::chrono::steady_clock::now();
        const resolve::Topology topo = resolve::Topology::from_json_text(planned, "generated");
        char line[128];
        std::snprintf(line, sizeof line, "%8.3f s  %d devices", seconds_since(t), topo.num_devices());
        return std::string(line);
      });
    }
    if (wants("plan")) {
      run("plan", [&] {
        const resolve::Topology topo = resolve::Topology::from_json_text(planned, "generated");
        planner::PlannerOptions o;
        o.global_batch = gpus;
        o.seq_len = 4096;
        o.time_limit_seconds = time_limit;
        o.progress_interval_seconds = 30;
        o.progress = [](const planner::PlanningProgress& p) { std::fprintf(stderr, "  %s\n", p.to_string().c_str()); };
        const planner::Planner planner(models::Llama(c32), topo, profile, o);
        const auto t = std::chrono::steady_clock::now();
        const planner::Plan plan = planner.plan();
        const double s = seconds_since(t);
        char line[256];
        std::snprintf(line, sizeof line, "%8.3f s  step %.3f s%s, %zu pipelines, %zu ranks used, %d configurations, "
                      "%d solved, %d MILPs", s, plan.prediction.step_seconds, plan.complete ? "" : " (limit)",
                      plan.strategy.pipelines.size(), plan.strategy.ranks().size(), plan.candidates,
                      plan.candidates_solved, plan.milps);
        return std::string(line);
      });
    }
    if (wants("explain")) {
      run("explain", [&] {
        const resolve::Topology topo = resolve::Topology::from_json_text(halves, "generated");
        const auto t = std::chrono::steady_clock::now();
        const sharding::Strategy st = layout(gpus, 8, 4, static_cast<int>(c70.num_hidden_layers));
        const models::ModelGraph model = models::Llama(c70).build({});
        const sharding::AnnotationPlan plan = models::compile_llama_plan(c70, st);
        const specialize::PlanReport report = specialize::make_plan_report(model, plan, {.topology = &topo});
        const std::string text = specialize::to_string(report);
        char line[128];
        std::snprintf(line, sizeof line, "%8.3f s  %zu ranks, %zu characters", seconds_since(t), st.ranks().size(),
                      text.size());
        if (!digest) return std::string(line);
        Digest d;
        d.add(text);
        return line + d.text();
      });
    }
    if (wants("switch")) {
      run("switch", [&] {
        const resolve::Topology topo = resolve::Topology::from_json_text(halves, "generated");
        const int L = static_cast<int>(c70.num_hidden_layers);
        const sharding::AnnotationPlan a = models::compile_llama_plan(c70, layout(gpus, 8, 4, L));
        const sharding::AnnotationPlan b = models::compile_llama_plan(c70, layout(gpus, 4, 8, L));
        std::vector<std::pair<std::string, Shape>> params;
        for (const models::LlamaParam& p : models::llama_parameters(c70)) params.emplace_back(p.name, p.shape);
        const auto t = std::chrono::steady_clock::now();
        switching::SwitchOptions so;
        so.optimizer_states = true;
        so.topology = &topo;
        const switching::SwitchPlan plan =
            switching::plan_switch(switching::param_layouts(a, params), switching::param_layouts(b, params), so);
        char line[160];
        std::snprintf(line, sizeof line, "%8.3f s  busiest sender %.2f GiB", seconds_since(t),
                      static_cast<double>(plan.busiest_sender_bytes) / (1 << 30));
        return digest ? line + switch_digest(plan) : std::string(line);
      });
    }
  }
  return 0;
}
