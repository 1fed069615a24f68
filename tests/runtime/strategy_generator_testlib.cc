#include "runtime/strategy_generator_testlib.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/specialize/plan_report.h"
#include "runtime/dist_run_testlib.h"

namespace hspmd::runtime::testing {

namespace {

int uniform(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
bool chance(std::mt19937& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// n split into k positive parts, in random order.
std::vector<int> split_count(std::mt19937& rng, int n, int k) {
  std::vector<int> cuts;
  std::vector<int> points(n - 1);
  std::iota(points.begin(), points.end(), 1);
  std::shuffle(points.begin(), points.end(), rng);
  cuts.assign(points.begin(), points.begin() + (k - 1));
  cuts.push_back(0);
  cuts.push_back(n);
  std::sort(cuts.begin(), cuts.end());
  std::vector<int> parts;
  for (size_t i = 1; i < cuts.size(); ++i) parts.push_back(cuts[i] - cuts[i - 1]);
  return parts;
}

constexpr int kLayers = 4;  // dist_config()

}  // namespace

sharding::Strategy generate_strategy(std::mt19937& rng, int world, const std::string& name) {
  sharding::Strategy st;
  st.name = name;
  st.zero = chance(rng, 0.3) ? uniform(rng, 1, 2) : 0;  // ZeRO-1 or ZeRO-2
  st.recompute = chance(rng, 0.25);
  std::vector<int> ranks(world);
  std::iota(ranks.begin(), ranks.end(), 0);
  std::shuffle(ranks.begin(), ranks.end(), rng);
  const int pipelines = uniform(rng, 1, std::min(3, world));
  size_t next_rank = 0;
  for (int pipeline_ranks : split_count(rng, world, pipelines)) {
    sharding::PipelineSpec p;
    p.micro_batch_size = uniform(rng, 1, 2);
    p.num_micro_batches = uniform(rng, 1, 3);
    // Stages of 1, 2 or 4 ranks mostly (TP 1 or 2, times CP 2 for 4); now and then a stage of 3,
    // 5 or 6 ranks, whose TP degree the 4 heads and 2 key/value heads refuse.
    int stages = 0;
    std::vector<int> sizes;
    for (int attempt = 0; attempt < 8; ++attempt) {
      stages = uniform(rng, 1, std::min(kLayers, pipeline_ranks));
      sizes = split_count(rng, pipeline_ranks, stages);
      const bool usual = std::all_of(sizes.begin(), sizes.end(), [](int n) { return n == 1 || n == 2 || n == 4; });
      if (usual || chance(rng, 0.1)) break;
    }
    const std::vector<int> layer_counts = split_count(rng, kLayers, stages);
    const bool has_four = std::find(sizes.begin(), sizes.end(), 4) != sizes.end();
    const int pipeline_cp = chance(rng, has_four ? 0.8 : 0.3) ? 2 : 1;
    int layer = 0;
    for (int s = 0; s < stages; ++s) {
      sharding::StageSpec stage;
      stage.ranks.assign(ranks.begin() + static_cast<std::ptrdiff_t>(next_rank),
                         ranks.begin() + static_cast<std::ptrdiff_t>(next_rank + sizes[s]));
      std::sort(stage.ranks.begin(), stage.ranks.end());
      next_rank += sizes[s];
      // The pipeline's CP where the stage's rank count allows it; often another one (stages of
      // different CP degrees hand their tokens over by a Reshard): 1 <-> 2, or 4 on 4 ranks.
      int cp = sizes[s] % pipeline_cp == 0 ? pipeline_cp : 1;
      if (sizes[s] % 2 == 0 && chance(rng, 0.35)) cp = sizes[s] == 4 && cp == 2 ? 4 : 3 - cp;
      stage.cp = cp;
      stage.first_layer = layer;
      stage.last_layer = layer + layer_counts[s] - 1;
      layer += layer_counts[s];
      p.stages.push_back(std::move(stage));
    }
    st.pipelines.push_back(std::move(p));
  }
  return st;
}

GeneratedCase generate_case(std::mt19937& rng) {
  GeneratedCase c;
  const int world = uniform(rng, 2, 6);
  c.a = generate_strategy(rng, world, "a");
  c.b = generate_strategy(rng, uniform(rng, std::max(1, world - 2), world), "b");
  c.tied = chance(rng, 0.3);
  c.precision = chance(rng, 0.2) ? DType::kBFloat16 : DType::kFloat32;
  c.schedule = chance(rng, 0.5) ? specialize::ScheduleKind::kGPipe : specialize::ScheduleKind::k1F1B;
  return c;
}

std::string GeneratedCase::describe() const {
  auto one = [](const sharding::Strategy& st) {
    std::ostringstream out;
    out << (st.zero > 0 ? "zero" + std::to_string(st.zero) + " " : std::string()) << (st.recompute ? "recompute " : "");
    for (size_t p = 0; p < st.pipelines.size(); ++p) {
      const sharding::PipelineSpec& pipe = st.pipelines[p];
      out << (p ? " | " : "") << pipe.micro_batch_size << "x" << pipe.num_micro_batches << ":";
      for (const sharding::StageSpec& s : pipe.stages) {
        out << " [";
        for (size_t i = 0; i < s.ranks.size(); ++i) out << (i ? "," : "") << s.ranks[i];
        out << "] L" << s.first_layer << "-" << s.last_layer << " tp" << s.tp() << " cp" << s.cp;
      }
    }
    return out.str();
  };
  std::ostringstream out;
  out << "a = {" << one(a) << "}, b = {" << one(b) << "}, " << (tied ? "tied" : "untied") << ", "
      << dtype_name(precision) << ", " << specialize::schedule_kind_name(schedule);
  return out.str();
}

std::string refusal_before_launch(const sharding::Strategy& st, bool tied, specialize::ScheduleKind schedule,
                                  int64_t seq_len) {
  const models::LlamaConfig config = dist_config(tied);
  try {
    const sharding::AnnotationPlan plan = models::compile_llama_plan(config, st);
    specialize::make_plan_report(models::Llama(config).build({}), plan, {.schedule = schedule, .seq_len = seq_len});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace hspmd::runtime::testing
