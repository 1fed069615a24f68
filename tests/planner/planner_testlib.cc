#include "planner/planner_testlib.h"

#include <sstream>

namespace hspmd::planner::testing {

models::LlamaConfig tiny_config() {
  models::LlamaConfig c;
  c.hidden_size = 128;
  c.intermediate_size = 352;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.vocab_size = 260;
  c.max_position_embeddings = 512;
  return c;
}

resolve::Topology two_kind_cluster(int fast, int slow, double memory) {
  std::ostringstream j;
  j << R"({"name": "two-kinds", "devices": [)";
  for (int r = 0; r < fast + slow; ++r) {
    j << (r ? "," : "") << R"({"id": )" << r << R"(, "node": )" << (r < fast ? 0 : 1) << R"(, "type": ")"
      << (r < fast ? "fast" : "slow") << R"(", "memory": )" << memory << R"(, "peak_flops": 1e11})";
  }
  j << R"(], "intra_node_bandwidth": 1e10, "inter_node_bandwidth": 1e9})";
  return resolve::Topology::from_json_text(j.str(), "two-kinds.json");
}

Profile two_kind_profile(double slow) {
  Profile p;
  p.source = "hand-made for tests";
  p.layer_includes_tp_comm = false;
  for (const auto& [kind, slowdown] : {std::pair<std::string, double>{"fast", 1.0}, {"slow", slow}}) {
    DeviceKindProfile k;
    k.bytes_per_parameter = 8;
    k.zero_bytes_per_parameter = 12;
    k.activation_element_bytes = 4;
    k.optimizer_seconds_per_parameter = 1e-9 * slowdown;
    for (int t : {1, 2}) {
      TpProfile tp;
      // 1 ms per 64-token sequence at TP 1, a little attention, a fixed launch cost.
      tp.layer = {2e-8 * slowdown / t, 1.4e-5 * slowdown / t, 5e-5 * slowdown};
      tp.ends = {4e-6 * slowdown / t, 1e-4 * slowdown};
      tp.activations = {3000.0 / t, 0, 1500.0 / t, 2000.0 / t, 4000.0 / t};
      k.tp[t] = tp;
    }
    p.devices[kind] = k;
  }
  return p;
}

}  // namespace hspmd::planner::testing
