// Profile: what the cost model knows about each device kind and link tier, as fitted regression
// coefficients (written by `hspmd profile`, or derived from datasheet figures for clusters this
// host cannot reach). docs/profile-format.md specifies the JSON file.
//
// Compute, per device kind and TP degree t, for one micro-batch of b sequences of s tokens:
//   decoder layer, forward + backward:  layer(t, b, s) = b * (a * s^2 + c1 * s) + c0      (seconds)
//   embedding + head + loss, fwd + bwd:  ends(t, b, s) = per_token * b * s + constant       (seconds)
//   optimizer, once per step: optimizer_seconds_per_parameter * parameters whose states the rank
//   updates (measured profiles time the trainer's post phase and keep it out of the layer figure)
// A profile whose `layer_includes_tp_comm` is true measured the layer with its TP all-reduces
// inside (`hspmd profile --device cuda` does: wall time on the GPUs; on the host and in derived
// profiles they time compute only); otherwise the cost model adds them from the link tiers.
// Memory, per device kind (the element size and the runtime's layout are the device's):
//   bytes_per_parameter        kept for every parameter a rank holds (weights, gradient buffers)
//   zero_bytes_per_parameter   sharded over the data-parallel replicas under ZeRO-1 (optimizer
//                              states, synced gradients); held whole without ZeRO-1
//   activations, per TP degree, for one micro-batch of T = b * s tokens:
//     kept per micro-batch in flight:  layers * (keep_per_token * T + keep_per_token2 * T^2)
//                                      + ends_keep_per_token * T
//     transient (one micro-batch):     layers * (transient_per_token * T) + ends_transient_per_token * T
//   reserved_bytes                     taken by the runtime before any tensor (CUDA context, ...)
// Measured on a device (`hspmd profile --device cuda`; 0: not measured), recorded for the cluster
// spec and for reading, not priced by the cost model (a rank's capacity is the cluster spec's
// "memory"): memory_bytes, the device's total; the host <-> device copy rates in bytes/s.
// Context parallelism, per device kind and CP degree c (optional, `cp`): one CP rank's layer and
// ends at TP 1, measured on CP-c steps (CpProfile below); the cost model prices a CP stage from it.
// Links, per tier ("intra-node", "inter-node"): point-to-point bytes/s, all-reduce bus bytes/s
// (ring: 2 (n-1)/n * bytes / bus_bandwidth) and a latency per message.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace hspmd::planner {

struct LayerTimeFit {
  double a = 0;   // seconds per token^2 of one sequence (attention)
  double c1 = 0;  // seconds per token
  double c0 = 0;  // seconds per micro-batch
  double seconds(int micro_batch_size, double seq_len) const {
    return micro_batch_size * (a * seq_len * seq_len + c1 * seq_len) + c0;
  }
};

struct LinearFit {
  double per_token = 0;
  double constant = 0;
  double seconds(double tokens) const { return per_token * tokens + constant; }
};

struct ActivationFit {
  double keep_per_token = 0;       // bytes per token per layer, per micro-batch in flight
  double keep_per_token2 = 0;      // bytes per token^2 per layer (attention scores, if kept)
  double transient_per_token = 0;  // bytes per token per layer, one micro-batch
  double ends_keep_per_token = 0;       // embedding + head, per micro-batch in flight
  double ends_transient_per_token = 0;  // embedding + head + loss, one micro-batch
};

struct TpProfile {
  LayerTimeFit layer;
  LinearFit ends;
  ActivationFit activations;
  int samples = 0;       // measurements behind the time fits (0: derived, not measured)
  double fit_error = 0;  // largest |fit - measured| / measured over those samples
};

// One CP rank of a context-parallel stage of degree c at TP 1, measured as such: its decoder
// layer, forward + backward, as a function of the whole (zigzag-padded) sequence s' and the
// micro-batch size b, layer.seconds(b, s') = b (a s'^2 + c1 s') + c0, and its ends (embedding,
// head, loss) by the rank's own tokens b s' / c. What it times and a TP layer divided by c does not:
// the op's gathered keys put back in packed order, the query tiles cut at the zigzag chunks' ends,
// the per-layer index Reshards' host work (docs/planner.md, "Context parallelism").
// lockstep_seconds_per_layer: per layer and micro-batch, what the CP group's Reshards took beyond
// their bytes on the link (CostModel::ring_allgather), measured on CP-c steps with every rank
// running as this kind: the waits for the group's slowest rank at each collective (each rank
// computes at its own pace in between) and the index Reshards.
struct CpProfile {
  LayerTimeFit layer;
  LinearFit ends;
  int samples = 0;
  double fit_error = 0;  // largest |fit - measured| / measured over the samples
  double lockstep_seconds_per_layer = 0;
};

struct DeviceKindProfile {
  std::map<int, TpProfile> tp;  // by TP degree
  std::map<int, CpProfile> cp;  // by CP degree (> 1), at TP 1; empty: CP priced from the TP layer
  double optimizer_seconds_per_parameter = 0;
  double bytes_per_parameter = 0;
  double zero_bytes_per_parameter = 0;
  double reserved_bytes = 0;
  double activation_element_bytes = 4;  // bytes of one activation element on the wire (p2p, TP)
  double memory_bytes = 0;              // the device's total, measured; 0: not measured
  double host_to_device_bandwidth = 0;  // bytes/s; 0: not measured
  double device_to_host_bandwidth = 0;  // bytes/s; 0: not measured
};

struct LinkProfile {
  double p2p_bandwidth = 0;        // bytes/s
  double allreduce_bandwidth = 0;  // bus bytes/s
  double latency = 0;              // seconds per message
};

struct Profile {
  std::string source;  // how the figures were obtained ("measured on ...", "derived from ...")
  std::string model;   // the model config it was made for
  bool layer_includes_tp_comm = false;
  // Whether the activation fits already assume sequence parallelism (derived profiles do): the cost
  // model then prices a sequence-parallel stage's activations as the fits give them.
  bool activations_sequence_parallel = false;
  std::map<std::string, DeviceKindProfile> devices;  // by device kind (the cluster spec's "type")
  std::map<std::string, LinkProfile> links;          // by tier name: "intra-node", "inter-node"

  // The kind's profile, or Error naming the kind and the kinds the profile has.
  const DeviceKindProfile& kind(const std::string& name) const;
  // The TP profile, or Error naming the kind, the degree and the degrees profiled.
  const TpProfile& at(const std::string& kind, int tp) const;
  bool has(const std::string& kind, int tp) const;
  // The kind's CP profile of degree cp, when it was measured.
  const CpProfile* cp(const std::string& kind, int cp) const;
  // The tier's link figures when the profile has them.
  std::optional<LinkProfile> link(const std::string& tier) const;

  std::string to_json_text() const;
  static Profile from_json_text(const std::string& text, const std::string& source);
  static Profile from_file(const std::string& path);
};

}  // namespace hspmd::planner
