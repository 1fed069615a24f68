#include "hspmd/planner/cost_model.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "hspmd/core/byte_size.h"
#include "hspmd/core/error.h"

namespace hspmd::planner {

namespace {

// Gradients travel as float32 whatever the activation type (the optimizer's master precision).
constexpr double kGradientElementBytes = 4;

std::string tier_name(resolve::LinkTier tier) { return std::string(resolve::link_tier_name(tier)); }

}  // namespace

ModelShape ModelShape::of(const models::LlamaConfig& c) {
  ModelShape s;
  s.layers = c.num_hidden_layers;
  s.hidden = c.hidden_size;
  s.ffn = c.intermediate_size;
  s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.vocab = c.vocab_size;
  for (const models::LlamaParam& p : models::llama_parameters(c)) {
    const double n = static_cast<double>(p.shape.numel());
    if (p.layer == 0) {
      s.layer_parameters += n;
    } else if (p.layer < 0) {
      (p.role == models::LlamaParamRole::kEmbedding ? s.embedding_parameters : s.head_parameters) += n;
    }
  }
  return s;
}

double ModelShape::stage_parameters(int layers, bool first, bool last) const {
  double params = layers * layer_parameters;
  if (first) params += embedding_parameters;
  if (last) params += head_parameters;
  return params;
}

bool ModelShape::tp_divides(int t) const {
  if (t < 1) return false;
  for (int64_t size : {heads, kv_heads, hidden, ffn, vocab}) {
    if (size % t != 0) return false;
  }
  return true;
}

CostModel::CostModel(const models::LlamaConfig& config, const resolve::Topology& topology, const Profile& profile,
                     CostOptions options)
    : shape_(ModelShape::of(config)), topology_(topology), profile_(profile), options_(options) {
  HSPMD_CHECK(options_.seq_len > 0) << "cost model: the sequence length must be positive, got " << options_.seq_len;
}

CostModel CostModel::at_seq_len(int64_t seq_len) const {
  HSPMD_CHECK(seq_len > 0) << "cost model: the sequence length must be positive, got " << seq_len;
  CostModel copy = *this;
  copy.options_.seq_len = seq_len;
  return copy;
}

double CostModel::stage_compute(const std::string& kind, int tp, int layers, bool last, int micro_batch_size) const {
  const TpProfile& p = profile_.at(kind, tp);
  const double s = static_cast<double>(options_.seq_len);
  double t = layers * p.layer.seconds(micro_batch_size, s);
  if (last) t += p.ends.seconds(micro_batch_size * s);
  return t;
}

double CostModel::link_p2p_bandwidth(int a, int b) const {
  if (auto l = profile_.link(tier_name(topology_.tier(a, b)))) return l->p2p_bandwidth;
  return topology_.bandwidth(a, b);
}

double CostModel::link_latency(int a, int b) const {
  if (auto l = profile_.link(tier_name(topology_.tier(a, b)))) return l->latency;
  return 0;
}

double CostModel::allreduce(const std::vector<int>& group, double bytes) const {
  const int n = static_cast<int>(group.size());
  if (n <= 1 || bytes <= 0) return 0;
  // A ring runs at its slowest link; its latency is paid 2 (n - 1) times.
  double bus = std::numeric_limits<double>::infinity(), latency = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const int a = group[i], b = group[j];
      if (auto l = profile_.link(tier_name(topology_.tier(a, b)))) {
        bus = std::min(bus, l->allreduce_bandwidth);
        latency = std::max(latency, l->latency);
      } else {
        bus = std::min(bus, topology_.bandwidth(a, b));
      }
    }
  }
  return 2.0 * (n - 1) / n * bytes / bus + 2.0 * (n - 1) * latency;
}

double CostModel::stage_tp_comm(const std::vector<int>& ranks, int layers, int micro_batch_size) const {
  if (profile_.layer_includes_tp_comm || ranks.size() <= 1) return 0;
  const DeviceKindProfile& k = profile_.kind(stage_kind(ranks));
  const double bytes = static_cast<double>(micro_batch_size) * options_.seq_len * shape_.hidden * k.activation_element_bytes;
  // Megatron TP: one all-reduce after attention and one after the MLP, each in forward and backward.
  return 4.0 * layers * allreduce(ranks, bytes);
}

double CostModel::ends_tp_comm(const std::vector<int>& ranks, bool first, bool last, int micro_batch_size) const {
  if (profile_.layer_includes_tp_comm || ranks.size() <= 1 || !(first || last)) return 0;
  const DeviceKindProfile& k = profile_.kind(stage_kind(ranks));
  const double tokens = static_cast<double>(micro_batch_size) * options_.seq_len;
  const double bytes = tokens * shape_.hidden * k.activation_element_bytes;
  double t = 0;
  // The vocabulary-parallel embedding's output is all-reduced in the forward pass.
  if (first) t += allreduce(ranks, bytes);
  // The vocabulary-parallel head: its input gradient is all-reduced in the backward pass, and the
  // loss gathers each shard's row statistics (3 float64 per token), latency more than bytes.
  if (last) t += allreduce(ranks, bytes) + allreduce(ranks, 3.0 * 8 * tokens);
  return t;
}

double CostModel::p2p(int from, int to, int micro_batch_size) const {
  const DeviceKindProfile& k = profile_.kind(topology_.device(from).type);
  const double bytes = static_cast<double>(micro_batch_size) * options_.seq_len * shape_.hidden * k.activation_element_bytes;
  // The forward activation goes out, its gradient comes back: two messages per micro-batch.
  return 2.0 * (bytes / link_p2p_bandwidth(from, to) + link_latency(from, to));
}

std::string CostModel::stage_kind(const std::vector<int>& ranks) const {
  HSPMD_CHECK(!ranks.empty()) << "cost model: a stage without ranks";
  const int tp = static_cast<int>(ranks.size());
  std::string slowest;
  double worst = -1;
  for (int r : ranks) {
    HSPMD_CHECK(r >= 0 && r < topology_.num_devices())
        << "cost model: rank " << r << " is not in cluster " << topology_.name() << " (" << topology_.num_devices()
        << " devices)";
    const std::string& kind = topology_.device(r).type;
    const double t = profile_.at(kind, tp).layer.seconds(1, static_cast<double>(options_.seq_len));
    if (t > worst) {
      worst = t;
      slowest = kind;
    }
  }
  return slowest;
}

int CostModel::in_flight(int num_stages, int stage, int num_micro_batches) const {
  if (options_.schedule == specialize::ScheduleKind::kGPipe) return num_micro_batches;
  return std::min(num_stages - stage, num_micro_batches);
}

MemoryBreakdown CostModel::stage_memory(const std::string& kind, int tp, int layers, bool first, bool last,
                                        int micro_batch_size, int in_flight_count, int data_parallel,
                                        bool zero1) const {
  const DeviceKindProfile& k = profile_.kind(kind);
  const ActivationFit& a = profile_.at(kind, tp).activations;
  const double params = shape_.stage_parameters(layers, first, last) / tp;
  const double tokens = static_cast<double>(micro_batch_size) * options_.seq_len;
  MemoryBreakdown m;
  m.parameters = params * k.bytes_per_parameter;
  m.zero_states = params * k.zero_bytes_per_parameter / (zero1 ? std::max(1, data_parallel) : 1);
  double keep = layers * (a.keep_per_token * tokens + a.keep_per_token2 * tokens * tokens);
  double transient = layers * a.transient_per_token * tokens;
  if (last) {
    keep += a.ends_keep_per_token * tokens;
    transient += a.ends_transient_per_token * tokens;
  }
  m.activations = in_flight_count * keep + transient;
  m.reserved = k.reserved_bytes;
  return m;
}

Prediction CostModel::predict(const sharding::Strategy& st) const {
  st.validate(static_cast<int>(shape_.layers));
  Prediction out;
  const int D = static_cast<int>(st.pipelines.size());
  for (size_t p = 0; p < st.pipelines.size(); ++p) {
    const sharding::PipelineSpec& pipe = st.pipelines[p];
    const int S = static_cast<int>(pipe.stages.size());
    PipelinePrediction pp;
    double sum = 0, slowest = 0, tail = 0;
    for (int j = 0; j < S; ++j) {
      const sharding::StageSpec& stage = pipe.stages[j];
      StagePrediction sp;
      sp.kind = stage_kind(stage.ranks);
      sp.tp = stage.tp();
      sp.layers = stage.last_layer - stage.first_layer + 1;
      const bool last = j == S - 1;
      sp.compute_seconds = stage_compute(sp.kind, sp.tp, sp.layers, last, pipe.micro_batch_size);
      sp.tp_comm_seconds = stage_tp_comm(stage.ranks, sp.layers, pipe.micro_batch_size) +
                           ends_tp_comm(stage.ranks, j == 0, last, pipe.micro_batch_size);
      if (!last) sp.p2p_seconds = p2p(stage.ranks.front(), pipe.stages[j + 1].ranks.front(), pipe.micro_batch_size);
      // The stage's gradient shard is all-reduced with the stages holding the same first layer in
      // the other pipelines (their first TP ranks stand for the ring's links).
      std::vector<int> dp_group;
      for (size_t q = 0; q < st.pipelines.size(); ++q) {
        const int sq = st.stage_of_layer(static_cast<int>(q), stage.first_layer);
        dp_group.push_back(st.pipelines[q].stages[sq].ranks.front());
      }
      const double params = shape_.stage_parameters(sp.layers, j == 0, last) / sp.tp;
      sp.sync_seconds = allreduce(dp_group, params * kGradientElementBytes);
      sp.optimizer_seconds =
          profile_.kind(sp.kind).optimizer_seconds_per_parameter * params / (st.zero1 ? std::max(1, D) : 1);
      sum += sp.per_micro_batch();
      slowest = std::max(slowest, sp.per_micro_batch());
      tail = std::max(tail, sp.sync_seconds + sp.optimizer_seconds);

      const int inflight = in_flight(S, j, pipe.num_micro_batches);
      const MemoryBreakdown mem =
          stage_memory(sp.kind, sp.tp, sp.layers, j == 0, last, pipe.micro_batch_size, inflight, D, st.zero1);
      for (int r : stage.ranks) {
        RankPrediction rp;
        rp.rank = r;
        rp.pipeline = static_cast<int>(p);
        rp.stage = j;
        rp.kind = topology_.device(r).type;
        rp.memory = mem;
        rp.capacity = topology_.device(r).memory;
        out.ranks.push_back(rp);
      }
      pp.stages.push_back(sp);
    }
    pp.pipeline_seconds = sum + (pipe.num_micro_batches - 1) * slowest;
    pp.end_seconds = pp.pipeline_seconds + tail;
    out.step_seconds = std::max(out.step_seconds, pp.end_seconds);
    out.pipelines.push_back(std::move(pp));
  }
  std::sort(out.ranks.begin(), out.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  for (const RankPrediction& r : out.ranks) {
    if (r.capacity > 0 && r.memory.total() > r.capacity) {
      out.fits = false;
      out.overflows.push_back(describe_memory(r));
    }
  }
  return out;
}

std::string describe_memory(const RankPrediction& r) {
  std::ostringstream s;
  s << "rank " << r.rank << " (" << r.kind << ", pipeline " << r.pipeline << " stage " << r.stage
    << "): " << format_bytes(r.memory.total()) << " = "
    << format_bytes(r.memory.parameters) << " parameters and gradients + "
    << format_bytes(r.memory.zero_states) << " optimizer states + "
    << format_bytes(r.memory.activations) << " activations";
  if (r.memory.reserved > 0) s << " + " << format_bytes(r.memory.reserved) << " reserved";
  if (r.capacity > 0) s << " of " << format_bytes(r.capacity);
  return s.str();
}

std::string to_string(const Prediction& p) {
  std::ostringstream s;
  s.precision(4);
  s << "predicted step time: " << p.step_seconds << " s (";
  for (size_t i = 0; i < p.pipelines.size(); ++i) {
    const PipelinePrediction& pp = p.pipelines[i];
    double tail = pp.end_seconds - pp.pipeline_seconds;
    s << (i ? ", " : "") << "pipeline " << i << ": " << pp.pipeline_seconds << " s + " << tail << " s sync/optimizer";
  }
  s << ")\npredicted memory per rank" << (p.fits ? "" : " (DOES NOT FIT)") << ":\n";
  for (const RankPrediction& r : p.ranks) s << "  " << describe_memory(r) << "\n";
  return s.str();
}

}  // namespace hspmd::planner
