// ZeRO-3's gather units and schedule (specialize/gather_units.h) on a 2-layer model, one rank of two
// data-parallel ones: F reads the table, layer 0, layer 1, the final norm and the head in that order;
// each unit after the first is gathered from the first reader of the one before it on (one layer
// ahead, while that one computes); B reads the head first, and with its gradients each unit is
// gathered only after the one before it produced all of its own; the peak the schedule holds is
// that of its two largest neighbours.
#include "hspmd/specialize/gather_units.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "hspmd/models/llama.h"
#include "hspmd/models/llama_plan.h"

namespace hspmd::specialize {
namespace {

std::vector<std::string> layers_of(const std::vector<GatherUnit>& units) {
  std::vector<std::string> out;
  for (const GatherUnit& u : units) out.push_back(u.layer);
  return out;
}

TEST(GatherUnits, LayersInReadingOrderEachGatheredFromThePreviousOnesFirstReader) {
  EXPECT_EQ(gather_layer("model.layers.12.mlp.up_proj.weight"), "model.layers.12");
  EXPECT_EQ(gather_layer("model.norm.weight"), "model.norm.weight");

  const models::LlamaConfig config;  // 2 layers
  const models::LlamaModel m = models::build_llama(config);
  sharding::Strategy st;
  st.name = "dp2-zero3";
  st.zero = 3;
  for (int r = 0; r < 2; ++r) {
    st.pipelines.push_back(
        {.micro_batch_size = 1, .num_micro_batches = 1, .stages = {{.ranks = {r}, .first_layer = 0, .last_layer = 1}}});
  }
  const ExecGraph exec(m.graph, models::compile_llama_plan(config, st), 0);
  const std::vector<GatherUnit> f = forward_gather_units(exec);
  const std::vector<std::string> order = {"model.embed_tokens.weight", "model.layers.0", "model.layers.1",
                                          "model.norm.weight", "lm_head.weight"};
  EXPECT_EQ(layers_of(f), order);
  EXPECT_EQ(f[1].params.size(), 9u);  // 7 projections and 2 norms
  EXPECT_EQ(f[0].gather_at, f[0].first);
  for (size_t u = 1; u < f.size(); ++u) {
    EXPECT_EQ(f[u].gather_at, f[u - 1].first) << f[u].layer;  // F's units do not overlap
    EXPECT_LT(f[u - 1].last, f[u].first) << f[u].layer;
    for (int read : f[u].last_reads) EXPECT_TRUE(f[u].first <= read && read <= f[u].last) << f[u].layer;
  }

  const std::vector<GatherUnit> b = backward_gather_units(exec);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front().layer, "lm_head.weight");

  // With B's gradients: a unit is gathered after the op producing the last gradient of the unit
  // before it (where its first reader allows), so every rank reduces a layer before gathering the
  // next.
  const std::vector<GatherUnit> reduced = backward_gather_units(exec, m.params, m.grads);
  ASSERT_EQ(layers_of(reduced), layers_of(b));
  std::map<int, int> position;  // op id -> its last position in B
  for (size_t k = 0; k < exec.backward_steps().size(); ++k) position[exec.backward_steps()[k].op] = static_cast<int>(k);
  std::map<int, int> produced_at;  // parameter op -> where B produces its gradient
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (const auto p = position.find(m.grads[i].op); p != position.end()) produced_at[m.params[i].op] = p->second;
  }
  for (size_t u = 1; u < reduced.size(); ++u) {
    int last_gradient = -1;
    for (int op : reduced[u - 1].params) last_gradient = std::max(last_gradient, produced_at.at(op));
    EXPECT_EQ(reduced[u].gather_at, std::min(reduced[u].first, std::max(reduced[u - 1].first, last_gradient + 1)))
        << reduced[u].layer;
  }

  // Each parameter as its own size: F's peak is where a unit starts, holding all of it and the next
  // unit (the ones before it are freed: F's units do not overlap).
  auto bytes_of = [&](int id) { return exec.local_shape({id, 0}, {}).numel() * int64_t{4}; };
  auto unit_bytes = [&](const GatherUnit& u) {
    int64_t held = 0;
    for (int id : u.params) held += bytes_of(id);
    return held;
  };
  int64_t expected = 0;
  for (size_t u = 0; u + 1 < f.size(); ++u) expected = std::max(expected, unit_bytes(f[u]) + unit_bytes(f[u + 1]));
  EXPECT_EQ(peak_gathered_bytes(f, bytes_of), expected);
}

}  // namespace
}  // namespace hspmd::specialize
