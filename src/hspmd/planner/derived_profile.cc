#include "hspmd/planner/derived_profile.h"

#include <map>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/planner/cost_model.h"

namespace hspmd::planner {

Profile derive_profile(const models::Model& model, const resolve::Topology& cluster, const DerivationOptions& o) {
  HSPMD_CHECK(o.efficiency > 0 && o.efficiency <= 1) << "derived profile: efficiency must be in (0, 1], got "
                                                      << o.efficiency;
  const ModelShape shape = ModelShape::of(model);
  HSPMD_CHECK(shape.kv_heads == 0 || shape.head_dim > 0)
      << "derived profile: model " << model.model_type() << " gives no head_dim for its key/value heads";
  const double h = static_cast<double>(shape.hidden), f = static_cast<double>(shape.ffn);
  const double kv_width = static_cast<double>(shape.kv_heads * shape.head_dim);
  const double V = static_cast<double>(shape.vocab);
  // Matmul parameters of one layer: everything but the norm weights.
  const double matmul_params = shape.layer_parameters - shape.layer_norm_parameters;

  std::map<std::string, std::pair<double, std::map<int, int>>> kinds;  // type -> peak, node -> count
  for (int r = 0; r < cluster.num_devices(); ++r) {
    const resolve::DeviceSpec& d = cluster.device(r);
    HSPMD_CHECK(d.peak_flops > 0) << "derived profile: device " << r << " of " << cluster.name()
                                  << " has no \"peak_flops\"";
    auto& [peak, nodes] = kinds[d.type];
    HSPMD_CHECK(peak == 0 || peak == d.peak_flops)
        << "derived profile: devices of type " << d.type << " in " << cluster.name() << " have different peak_flops";
    peak = d.peak_flops;
    ++nodes[d.node];
  }
  Profile p;
  p.model = o.model;
  p.layer_includes_tp_comm = false;
  p.activations_sequence_parallel = true;  // every activation below is divided by t
  std::ostringstream src;
  src << "DERIVED from datasheet figures, not measured: cluster " << (o.cluster.empty() ? cluster.name() : o.cluster)
      << " (peak_flops, memory; links from the cluster spec), compute = training FLOPs / (peak_flops x "
      << o.efficiency << "), bf16 mixed precision with ZeRO-1-shardable fp32 states, flash attention and sequence "
      << "parallelism, " << o.reserved_bytes / (1 << 30) << " GiB reserved per device";
  p.source = src.str();
  for (const auto& [type, info] : kinds) {
    const auto& [peak, nodes] = info;
    int largest = 0;
    for (const auto& [node, n] : nodes) largest = std::max(largest, n);
    DeviceKindProfile k;
    k.bytes_per_parameter = 6;
    k.zero_bytes_per_parameter = 12;
    k.reserved_bytes = o.reserved_bytes;
    k.activation_element_bytes = 2;
    const double rate = peak * o.efficiency;
    for (int t = 1; t <= largest; t *= 2) {
      if (!shape.tp_divides(t)) continue;
      TpProfile tp;
      tp.layer.c1 = 3 * 2 * matmul_params / t / rate;
      tp.layer.a = 3 * 2 * h / t / rate;
      tp.layer.c0 = 0;
      tp.ends.per_token = 3 * 2 * h * V / t / rate;
      tp.activations.keep_per_token = 2 * (4 * h + 2 * h + 2 * kv_width + h + 4 * f) / t;
      tp.activations.ends_keep_per_token = 2 * h / t;
      tp.activations.ends_transient_per_token = 8 * V / t;
      k.tp[t] = tp;
    }
    p.devices[type] = k;
  }
  return p;
}

}  // namespace hspmd::planner
