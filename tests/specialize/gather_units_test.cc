// ZeRO-3's gather units and schedule (specialize/gather_units.h) on a 2-layer model, one rank of two
// data-parallel ones: F reads the table, layer 0, layer 1, the final norm and the head in that order;
// each unit after the first is gathered at the last reader of the one before it (one layer ahead);
// B reads the head first; the peak the schedule holds is that of its two largest neighbours.
#include "hspmd/specialize/gather_units.h"

#include <gtest/gtest.h>

#include "hspmd/models/llama.h"
#include "hspmd/models/llama_plan.h"

namespace hspmd::specialize {
namespace {

std::vector<std::string> layers_of(const std::vector<GatherUnit>& units) {
  std::vector<std::string> out;
  for (const GatherUnit& u : units) out.push_back(u.layer);
  return out;
}

TEST(GatherUnits, LayersInReadingOrderEachGatheredAtThePreviousOnesLastReader) {
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
    EXPECT_EQ(f[u].gather_at, f[u - 1].last) << f[u].layer;  // F's units do not overlap
    EXPECT_LT(f[u - 1].last, f[u].first) << f[u].layer;
    for (int read : f[u].last_reads) EXPECT_TRUE(f[u].first <= read && read <= f[u].last) << f[u].layer;
  }

  const std::vector<GatherUnit> b = backward_gather_units(exec);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front().layer, "lm_head.weight");

  // Each parameter as its own size: F's peak is at the embedding (the table and all of layer 0),
  // or at a layer's last reader (what it still reads and the next unit), whichever is more.
  auto bytes_of = [&](int id) { return exec.local_shape({id, 0}, {}).numel() * int64_t{4}; };
  int64_t expected = 0;
  for (size_t u = 1; u < f.size(); ++u) {
    int64_t held = 0;
    for (int id : f[u].params) held += bytes_of(id);
    for (size_t i = 0; i < f[u - 1].params.size(); ++i) {
      if (f[u - 1].last_reads[i] == f[u - 1].last) held += bytes_of(f[u - 1].params[i]);
    }
    expected = std::max(expected, held);
  }
  EXPECT_EQ(peak_gathered_bytes(f, bytes_of), expected);
}

}  // namespace
}  // namespace hspmd::specialize
