#include "hspmd/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <limits>
#include <numeric>
#include <sstream>

#include "hspmd/core/byte_size.h"
#include "hspmd/core/error.h"

namespace hspmd::planner {

namespace {

// Gradients travel as float32 whatever the activation type (the optimizer's master precision).
constexpr double kGradientElementBytes = 4;

// Groups up to this many ranks have every pair of their links read (collective_link).
constexpr size_t kSmallGroup = 16;

// Sequence parallelism's saving per token and layer, in hidden-wide values of which a TP rank of
// degree t holds 1/t instead of all: 2 kept for the backward pass, 5 transient. Read off the
// runtime's memory estimate (specialize/memory_estimate.h) of llama-tiny layers at TP 2 and 4
// (docs/memory.md), which it matches to a few bytes per token (per-token norm statistics).
constexpr double kSequenceParallelKeptVectors = 2;
constexpr double kSequenceParallelTransientVectors = 5;

// The backward pass's share of a profiled forward + backward: two matmuls (input and weight
// gradients) for each forward one. The gradient buckets overlap with it.
constexpr double kBackwardShare = 2.0 / 3.0;

// Of a profile's bytes_per_parameter (weights and the float32 gradient accumulator), the weights'.
double weight_bytes(const DeviceKindProfile& k) {
  return k.bytes_per_parameter - std::min(kGradientElementBytes, k.bytes_per_parameter);
}

std::string tier_name(resolve::LinkTier tier) { return std::string(resolve::link_tier_name(tier)); }

const LinkProfile* link_of(const std::optional<LinkProfile>& l) { return l ? &*l : nullptr; }

}  // namespace

ModelShape ModelShape::of(const models::Model& model) {
  ModelShape shape{model.sizes()};
  shape.tied_embeddings = model.config_json().value("tie_word_embeddings", false);
  return shape;
}

double ModelShape::stage_parameters(int layers, bool first, bool last) const {
  double params = layers * layer_parameters;
  if (first) params += embedding_parameters;
  if (last) params += head_parameters;
  return params;
}

double ModelShape::attention_fraction(double s) const {
  if (attention_windows.empty() || s <= 0) return 1.0;
  const double full = s * (s + 1) / 2;
  double sum = 0;
  for (int64_t window : attention_windows) {
    const double w = static_cast<double>(window);
    sum += window <= 0 || w >= s ? 1.0 : (w * (w + 1) / 2 + (s - w) * w) / full;
  }
  return sum / static_cast<double>(attention_windows.size());
}

namespace {

// A decoder layer's weight matrices in model order (q, k, v, o, gate, up, down), whole.
std::vector<double> layer_matrices(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden);
  const double head_dim = m.head_dim > 0 ? static_cast<double>(m.head_dim) : m.heads > 0 ? h / m.heads : 0;
  const double q = h * head_dim * m.heads, kv = h * head_dim * m.kv_heads, f = h * m.ffn;
  return {q, kv, kv, q, f, f, f};
}

}  // namespace

double ModelShape::largest_layer_matrix() const {
  const std::vector<double> m = layer_matrices(*this);
  return *std::max_element(m.begin(), m.end());
}

double ModelShape::peak_gathered_parameters(int layers, bool first, bool last, int tp) const {
  const double layer = layer_parameters / tp, down = static_cast<double>(hidden) * ffn / tp;
  const double head = head_parameters / tp;
  double peak = layers > 0 ? layer : 0;
  if (first && layers > 0) peak = std::max(peak, embedding_parameters / tp + layer);  // F: embedding, layer 0 ahead
  if (layers > 1) peak = std::max(peak, down + layer);  // F: a layer's down projection, the next layer ahead
  if (last) peak = std::max(peak, head);                 // F: the final norm and head (B: the head, the norm ahead)
  return peak;
}

bool ModelShape::tp_divides(int t) const {
  if (t < 1) return false;
  for (int64_t size : {heads, kv_heads, hidden, ffn, vocab}) {
    if (size % t != 0) return false;
  }
  return true;
}

CostModel::CostModel(const models::Model& model, const resolve::Topology& topology, const Profile& profile,
                     CostOptions options)
    : shape_(ModelShape::of(model)),
      topology_(topology),
      profile_(profile),
      options_(options),
      intra_link_(profile.link(tier_name(resolve::LinkTier::kIntraNode))),
      inter_link_(profile.link(tier_name(resolve::LinkTier::kInterNode))) {
  HSPMD_CHECK(options_.seq_len > 0) << "cost model: the sequence length must be positive, got " << options_.seq_len;
}

CostModel CostModel::at_seq_len(int64_t seq_len) const {
  HSPMD_CHECK(seq_len > 0) << "cost model: the sequence length must be positive, got " << seq_len;
  CostModel copy = *this;
  copy.options_.seq_len = seq_len;
  return copy;
}

double CostModel::padded_seq_len(int cp, int sequence_parallel_ranks) const {
  const int64_t multiple = std::lcm(cp > 1 ? 2 * static_cast<int64_t>(cp) : 1,
                                    static_cast<int64_t>(std::max(1, sequence_parallel_ranks)));
  return static_cast<double>((options_.seq_len + multiple - 1) / multiple * multiple);
}

double CostModel::duplicated_per_token(const std::string& kind, int tp) const {
  if (tp <= 1 || !profile_.has(kind, 1)) return 0;
  const double whole = profile_.at(kind, 1).layer.c1, at_t = profile_.at(kind, tp).layer.c1;
  return std::clamp((tp * at_t - whole) / (tp - 1), 0.0, at_t);
}

double CostModel::stage_compute(const std::string& kind, int tp, int layers, bool last, int micro_batch_size,
                                int cp, bool sequence_parallel) const {
  const TpProfile& p = profile_.at(kind, tp);
  cp = std::max(cp, 1);
  const double b = micro_batch_size;
  // Zigzag: each CP rank holds s'/c tokens and 1/c of the causal attention (the header); without
  // CP, s' = s and this is the profile's layer.seconds(b, s). SP pads s' to its t x c ranks.
  const double s = padded_seq_len(cp, sequence_parallel ? tp * cp : 1), fraction = shape_.attention_fraction(s),
               tokens = b * s / cp;
  auto divided = [&](const LayerTimeFit& layer, double per_token) {
    return b * (layer.a * s * s * fraction + per_token * s) / cp + layer.c0;
  };
  double per_token = p.layer.c1;
  // Sequence parallelism splits the work TP duplicates (norms, residual adds) by tokens.
  if (sequence_parallel) per_token -= (1.0 - 1.0 / tp) * duplicated_per_token(kind, tp);
  double per_layer = divided(p.layer, per_token), ends = p.ends.seconds(tokens);
  // A CP rank measured as such (Profile::cp, at TP 1): its layer and ends replace the TP layer's
  // 1/c share by the ratio measured at TP 1, which is the measurement itself at TP 1 and carries what
  // CP adds (the packed-order copies, the query tiles cut at the chunks, the index Reshards) to
  // the TP-t layer in proportion.
  const CpProfile* measured = cp > 1 && profile_.has(kind, 1) ? profile_.cp(kind, cp) : nullptr;
  if (measured) {
    const TpProfile& p1 = profile_.at(kind, 1);
    const double at_tp1 = divided(p1.layer, p1.layer.c1), ends_at_tp1 = p1.ends.seconds(tokens);
    const double cp_layer = b * (measured->layer.a * s * s * fraction + measured->layer.c1 * s) + measured->layer.c0;
    if (at_tp1 > 0) per_layer *= cp_layer / at_tp1;
    if (ends_at_tp1 > 0) ends *= measured->ends.seconds(tokens) / ends_at_tp1;
  }
  return layers * per_layer + (last ? ends : 0.0);
}

double CostModel::link_p2p_bandwidth(int a, int b) const {
  const resolve::LinkTier t = topology_.tier(a, b);
  if (t != resolve::LinkTier::kLocal) {
    if (const LinkProfile* l = link_of(t == resolve::LinkTier::kIntraNode ? intra_link_ : inter_link_)) {
      return l->p2p_bandwidth;
    }
  }
  return topology_.bandwidth(a, b);
}

double CostModel::link_latency(int a, int b) const {
  const resolve::LinkTier t = topology_.tier(a, b);
  if (t == resolve::LinkTier::kLocal) return 0;
  const LinkProfile* l = link_of(t == resolve::LinkTier::kIntraNode ? intra_link_ : inter_link_);
  return l ? l->latency : 0;
}

std::pair<double, double> CostModel::collective_link(const std::vector<int>& group) const {
  // Larger groups (the gradient rings) are read in linear time and rarely recur.
  if (group.size() > kSmallGroup) return uncached_collective_link(group);
  {
    std::lock_guard<std::mutex> lock(memo_->mutex);
    auto it = memo_->small_group_links.find(group);
    if (it != memo_->small_group_links.end()) return it->second;
  }
  const std::pair<double, double> link = uncached_collective_link(group);
  std::lock_guard<std::mutex> lock(memo_->mutex);
  memo_->small_group_links.emplace(group, link);
  return link;
}

std::pair<double, double> CostModel::uncached_collective_link(const std::vector<int>& group) const {
  // The links to read: every pair of a small group; above 16 ranks, a ring through each node's
  // members and a ring through one member of each node. On a spec's tiers (intra-node bandwidth per
  // kind, the slower kind's between two kinds, one inter-node figure) the slowest of those is the
  // slowest of every pair: each member's kind meets another member of its node, and two nodes meet.
  std::vector<std::pair<int, int>> links;
  if (group.size() <= kSmallGroup) {
    for (int a : group) {
      for (int b : group) {
        if (a != b) links.push_back({a, b});
      }
    }
  } else {
    std::vector<std::pair<int, int>> by_node;  // (node, rank)
    for (int r : group) by_node.push_back({topology_.device(r).node, r});
    std::sort(by_node.begin(), by_node.end());
    std::vector<int> heads;
    for (size_t i = 0; i < by_node.size();) {
      size_t end = i;
      while (end < by_node.size() && by_node[end].first == by_node[i].first) ++end;
      heads.push_back(by_node[i].second);
      for (size_t k = i; end - i > 1 && k < end; ++k) {
        links.push_back({by_node[k].second, by_node[k + 1 < end ? k + 1 : i].second});
      }
      i = end;
    }
    for (size_t k = 0; heads.size() > 1 && k < heads.size(); ++k) links.push_back({heads[k], heads[(k + 1) % heads.size()]});
  }
  double bus = std::numeric_limits<double>::infinity(), latency = 0;
  for (const auto& [a, b] : links) {
    const resolve::LinkTier t = topology_.tier(a, b);
    const LinkProfile* l =
        t == resolve::LinkTier::kLocal ? nullptr : link_of(t == resolve::LinkTier::kIntraNode ? intra_link_ : inter_link_);
    if (l) {
      bus = std::min(bus, l->allreduce_bandwidth);
      latency = std::max(latency, l->latency);
    } else {
      bus = std::min({bus, topology_.bandwidth(a, b), topology_.bandwidth(b, a)});
    }
  }
  return {bus, latency};
}

double CostModel::ring_allreduce(int n, std::pair<double, double> link, double bytes) {
  if (n <= 1 || bytes <= 0) return 0;
  // A ring runs at its slowest link; its latency is paid 2 (n - 1) times.
  const auto [bus, latency] = link;
  return 2.0 * (n - 1) / n * bytes / bus + 2.0 * (n - 1) * latency;
}

double CostModel::allreduce(const std::vector<int>& group, double bytes) const {
  if (group.size() <= 1 || bytes <= 0) return 0;
  return ring_allreduce(static_cast<int>(group.size()), collective_link(group), bytes);
}

double CostModel::allgather(const std::vector<int>& group, double bytes) const {
  if (group.size() <= 1 || bytes <= 0) return 0;
  return ring_allgather(static_cast<int>(group.size()), collective_link(group), bytes);
}

double CostModel::ring_allgather(int n, std::pair<double, double> link, double bytes) {
  if (n <= 1 || bytes <= 0) return 0;
  // Half an all-reduce's ring: (n - 1) steps of bytes / n each.
  const auto [bus, latency] = link;
  return 1.0 * (n - 1) / n * bytes / bus + (n - 1) * latency;
}

double CostModel::zero3_comm(const std::string& kind, int n, std::pair<double, double> link, int layers, bool first,
                             bool last, int tp) const {
  const double w = weight_bytes(profile_.kind(kind));
  auto unit = [&](double parameters) {
    return 2.0 * ring_allgather(n, link, parameters / tp * w) + ring_allgather(n, link, parameters / tp * kGradientElementBytes);
  };
  double t = layers * unit(shape_.layer_parameters);
  if (first) t += unit(shape_.embedding_parameters);
  if (last) t += unit(shape_.head_parameters);
  return t;
}

double CostModel::exposed_reduce(double reduce, double last_bucket, double backward) {
  const double behind = std::max(0.0, reduce - last_bucket);
  return reduce - std::min(behind, std::max(0.0, backward));
}

double CostModel::last_bucket_bytes(int layers, bool first, bool last, int tp) const {
  const auto key = std::make_tuple(layers, first, last, tp);
  {
    std::lock_guard<std::mutex> lock(memo_->mutex);
    auto it = memo_->last_buckets.find(key);
    if (it != memo_->last_buckets.end()) return it->second;
  }
  const double bytes = uncached_last_bucket_bytes(layers, first, last, tp);
  std::lock_guard<std::mutex> lock(memo_->mutex);
  memo_->last_buckets.emplace(key, bytes);
  return bytes;
}

double CostModel::uncached_last_bucket_bytes(int layers, bool first, bool last, int tp) const {
  // The stage's tensors in model order, float32 gradient bytes of one TP rank.
  std::vector<double> tensors;
  if (first) tensors.push_back(shape_.embedding_parameters);
  const std::vector<double> matrices = layer_matrices(shape_);
  double small = shape_.layer_parameters;
  for (double m : matrices) small -= m;
  for (int l = 0; l < layers; ++l) {
    if (small > 0) tensors.push_back(small);
    tensors.insert(tensors.end(), matrices.begin(), matrices.end());
  }
  if (last) tensors.push_back(shape_.head_parameters);
  const double cap = options_.grad_bucket_mb * 1024 * 1024;
  double total = 0;
  for (double& t : tensors) total += (t = std::max(0.0, t) / tp * kGradientElementBytes);
  if (cap <= 0) return total;
  // runtime::gradient_buckets: from the last tensor back, a new bucket when the next would overflow.
  double filled = 0;
  bool any = false;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    if (!any || filled + *it > cap) filled = 0;
    any = true;
    filled += *it;
  }
  return filled;
}

namespace {

// The TP group of a CP-outer, TP-inner stage: its first tp ranks.
std::vector<int> tp_group(const std::vector<int>& ranks, int cp) {
  const size_t tp = ranks.size() / std::max(1, cp);
  return std::vector<int>(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(tp));
}

// The CP group of TP coordinate 0: every tp-th rank.
std::vector<int> cp_group(const std::vector<int>& ranks, int cp) {
  const size_t tp = ranks.size() / std::max(1, cp);
  std::vector<int> out;
  for (size_t i = 0; i < ranks.size(); i += tp) out.push_back(ranks[i]);
  return out;
}

}  // namespace

double CostModel::stage_tp_comm(const std::vector<int>& ranks, int layers, int micro_batch_size, int cp,
                                bool sequence_parallel) const {
  const std::vector<int> group = tp_group(ranks, cp);
  if (profile_.layer_includes_tp_comm || group.size() <= 1) return 0;
  const DeviceKindProfile& k = profile_.kind(stage_kind(ranks, static_cast<int>(group.size())));
  const double s = padded_seq_len(cp, sequence_parallel ? static_cast<int>(ranks.size()) : 1);
  const double bytes = micro_batch_size * s / std::max(1, cp) * shape_.hidden * k.activation_element_bytes;
  // Sequence parallelism: forward, an all-gather before each column-parallel block (attn_in,
  // mlp_in) and a reduce-scatter after each row-parallel one (attn_out, mlp_out); backward, the
  // reverse. On a ring an all-gather and a reduce-scatter move what one all-reduce moves.
  if (sequence_parallel) return 8.0 * layers * allgather(group, bytes);
  // Megatron TP: one all-reduce after attention and one after the MLP, each in forward and backward.
  return 4.0 * layers * allreduce(group, bytes);
}

double CostModel::stage_cp_comm(const std::vector<int>& ranks, int layers, int micro_batch_size, int cp) const {
  if (cp <= 1) return 0;
  const int tp = static_cast<int>(ranks.size()) / cp;
  const std::string kind = stage_kind(ranks, tp);
  const DeviceKindProfile& k = profile_.kind(kind);
  // K (and V) of the whole sequence, this TP rank's KV heads: kv_heads / tp of head_dim each.
  const double kv_width = static_cast<double>(shape_.kv_heads) * (shape_.hidden / shape_.heads) / tp;
  const double bytes = micro_batch_size * padded_seq_len(cp) * kv_width * k.activation_element_bytes;
  // Forward: all-gather K and V; backward: reduce-scatter dK and dV (the same ring traffic). A
  // profile that measured CP ranks of this kind adds what the group's Reshards took beyond that
  // (the waits for its slowest rank, the index Reshards).
  const CpProfile* measured = profile_.cp(kind, cp);
  return layers * (4.0 * allgather(cp_group(ranks, cp), bytes) + (measured ? measured->lockstep_seconds_per_layer : 0.0));
}

double CostModel::ends_tp_comm(const std::vector<int>& ranks, bool first, bool last, int micro_batch_size,
                               int cp, bool sequence_parallel) const {
  const std::vector<int> group = tp_group(ranks, cp);
  if (profile_.layer_includes_tp_comm || group.size() <= 1 || !(first || last)) return 0;
  const DeviceKindProfile& k = profile_.kind(stage_kind(ranks, static_cast<int>(group.size())));
  const double tokens =
      micro_batch_size * padded_seq_len(cp, sequence_parallel ? static_cast<int>(ranks.size()) : 1) / std::max(1, cp);
  const double bytes = tokens * shape_.hidden * k.activation_element_bytes;
  double t = 0;
  if (sequence_parallel) {
    // The embedding's output is reduce-scattered (its gradient all-gathered back); the last layer's
    // output is all-gathered for the final norm and head (its gradient reduce-scattered).
    if (first) t += 2.0 * allgather(group, bytes);
    if (last) t += 2.0 * allgather(group, bytes) + allreduce(group, 3.0 * 8 * tokens);
    return t;
  }
  // The vocabulary-parallel embedding's output is all-reduced in the forward pass.
  if (first) t += allreduce(group, bytes);
  // The vocabulary-parallel head: its input gradient is all-reduced in the backward pass, and the
  // loss gathers each shard's row statistics (3 float64 per token), latency more than bytes.
  if (last) t += allreduce(group, bytes) + allreduce(group, 3.0 * 8 * tokens);
  return t;
}

double CostModel::p2p(int from, int to, int micro_batch_size, int cp) const {
  const DeviceKindProfile& k = profile_.kind(topology_.device(from).type);
  // With CP every CP rank sends its own tokens to its peer in the next stage, in parallel.
  const double bytes = micro_batch_size * padded_seq_len(cp) / std::max(1, cp) * shape_.hidden * k.activation_element_bytes;
  // The forward activation goes out, its gradient comes back: two messages per micro-batch.
  return 2.0 * (bytes / link_p2p_bandwidth(from, to) + link_latency(from, to));
}

std::string CostModel::stage_kind(const std::vector<int>& ranks, int tp) const {
  HSPMD_CHECK(!ranks.empty()) << "cost model: a stage without ranks";
  if (tp <= 0) tp = static_cast<int>(ranks.size());
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
                                        bool zero1, int cp, bool gradient_shard, bool sequence_parallel,
                                        bool parameter_shard) const {
  const DeviceKindProfile& k = profile_.kind(kind);
  const ActivationFit& a = profile_.at(kind, tp).activations;
  const double params = shape_.stage_parameters(layers, first, last) / tp;
  cp = std::max(1, cp);
  // A CP rank keeps its own tokens; its attention's quadratic term is its queries by every key.
  const double s = padded_seq_len(cp, sequence_parallel ? tp * cp : 1);
  const double tokens = micro_batch_size * s / cp;
  MemoryBreakdown m;
  m.parameters = params * k.bytes_per_parameter;
  m.zero_states = params * k.zero_bytes_per_parameter / (zero1 ? std::max(1, data_parallel) * cp : 1);
  double keep = layers * (a.keep_per_token * tokens + a.keep_per_token2 * tokens * tokens * cp);
  double transient = layers * a.transient_per_token * tokens;
  if (cp > 1) {
    // One layer at a time holds the gathered K and V of the whole sequence (its TP share).
    const double kv_width = static_cast<double>(shape_.kv_heads) * (shape_.hidden / shape_.heads) / tp;
    transient += 2.0 * micro_batch_size * s * kv_width * k.activation_element_bytes;
  }
  if (sequence_parallel && tp > 1 && !profile_.activations_sequence_parallel) {
    // The values between TP blocks a rank then holds for 1/t of the tokens instead of all of them:
    // per layer, the residual stream kept for the two norms' backward and 5 hidden-wide values that
    // die within the forward pass (kSequenceParallel*Vectors). The ends change by a few bytes per
    // token: the embedding's partial sum and the last layer's gathered output stay whole.
    const double saved_per_vector = (1.0 - 1.0 / tp) * shape_.hidden * k.activation_element_bytes * tokens;
    keep = std::max(0.0, keep - layers * kSequenceParallelKeptVectors * saved_per_vector);
    transient = std::max(0.0, transient - layers * kSequenceParallelTransientVectors * saved_per_vector);
  }
  if (last) {
    keep += a.ends_keep_per_token * tokens;
    transient += a.ends_transient_per_token * tokens;
  }
  m.activations = in_flight_count * keep + transient;
  m.reserved = k.reserved_bytes;
  if (parameter_shard) {
    // ZeRO-3 as specialize/memory_estimate.h counts it: the weights' shard over the replicas and what
    // the gather schedule holds at most; of the gradient, the largest parameter's whole, twice under
    // overlap (B computes one while the communication thread reduces the one before into its shard),
    // and the synced shard (in zero_states).
    const double replicas = std::max(1, data_parallel) * cp;
    double largest = layers > 0 ? shape_.largest_layer_matrix() : 0;
    if (first) largest = std::max(largest, shape_.embedding_parameters);
    if (last) largest = std::max(largest, shape_.head_parameters - static_cast<double>(shape_.hidden));
    const double w = weight_bytes(k);
    m.parameters = params * w / replicas + shape_.peak_gathered_parameters(layers, first, last, tp) * w +
                   (options_.grad_bucket_mb > 0 ? 2 : 1) * largest / tp *
                       std::min(kGradientElementBytes, k.bytes_per_parameter);
    m.zero_states = params * k.zero_bytes_per_parameter / replicas;
    return m;
  }
  if (gradient_shard) {
    // ZeRO-2 as specialize/memory_estimate.h counts it: the whole accumulator (float32 gradients, part
    // of bytes_per_parameter) is gone, the synced shard stays in zero_states; a backward pass's whole
    // gradient lives only while no forward transient value does, so it counts only beyond those.
    const double accumulator = params * std::min(kGradientElementBytes, k.bytes_per_parameter);
    m.parameters += std::max(0.0, accumulator - transient) - accumulator;
  }
  return m;
}

Prediction CostModel::predict(const sharding::Strategy& st) const {
  st.validate(static_cast<int>(shape_.layers));
  Prediction out;
  const int D = static_cast<int>(st.pipelines.size());
  // ZeRO-2's gradient groups per step (runtime/gradient_sync.h): the fewest micro-batches any
  // pipeline runs. A pipeline running exactly that many makes each micro-batch a group.
  int groups = st.pipelines.empty() ? 1 : st.pipelines.front().num_micro_batches;
  for (const sharding::PipelineSpec& pipe : st.pipelines) groups = std::min(groups, pipe.num_micro_batches);
  groups = std::max(1, groups);
  if (st.shards_gradients() && !st.shards_parameters()) out.gradient_groups = groups;
  out.parameters_sharded = st.shards_parameters();
  // Per pipeline, the stage holding each layer: one pass over the stages instead of a search per
  // (stage, pipeline) pair, which grew as D^2 S.
  std::vector<std::vector<int>> stages_of_layer(st.pipelines.size(), std::vector<int>(shape_.layers, 0));
  std::map<int, std::pair<int, std::pair<double, double>>> rings;  // layer -> its holders' (ranks, slowest link)
  for (size_t q = 0; q < st.pipelines.size(); ++q) {
    const auto& stages = st.pipelines[q].stages;
    for (size_t j = 0; j < stages.size(); ++j) {
      for (int l = stages[j].first_layer; l <= stages[j].last_layer; ++l) stages_of_layer[q][l] = static_cast<int>(j);
    }
  }
  for (size_t p = 0; p < st.pipelines.size(); ++p) {
    const sharding::PipelineSpec& pipe = st.pipelines[p];
    const int S = static_cast<int>(pipe.stages.size());
    PipelinePrediction pp;
    double sum = 0, slowest = 0, tail = 0;
    for (int j = 0; j < S; ++j) {
      const sharding::StageSpec& stage = pipe.stages[j];
      StagePrediction sp;
      sp.tp = stage.tp();
      sp.cp = stage.cp;
      sp.sequence_parallel = stage.sequence_parallel && sp.tp > 1;
      sp.kind = stage_kind(stage.ranks, sp.tp);
      sp.layers = stage.last_layer - stage.first_layer + 1;
      const bool last = j == S - 1;
      const int b = pipe.micro_batch_size;
      sp.compute_seconds = stage_compute(sp.kind, sp.tp, sp.layers, last, b, sp.cp, sp.sequence_parallel);
      sp.tp_comm_seconds = stage_tp_comm(stage.ranks, sp.layers, b, sp.cp, sp.sequence_parallel) +
                           ends_tp_comm(stage.ranks, j == 0, last, b, sp.cp, sp.sequence_parallel);
      sp.cp_comm_seconds = stage_cp_comm(stage.ranks, sp.layers, b, sp.cp);
      if (!last) sp.p2p_seconds = p2p(stage.ranks.front(), pipe.stages[j + 1].ranks.front(), b, sp.cp);
      // The stage's gradient shard is all-reduced with its replicas: its CP ranks and the stages
      // holding the same first layer in the other pipelines (the first rank of each TP group stands
      // for the ring's links).
      // A layer's ring (its holders in every pipeline), found once per layer; the stage's gradient
      // sync runs on its first layer's.
      auto ring_of = [&](int layer) -> const std::pair<int, std::pair<double, double>>& {
        auto ring = rings.find(layer);
        if (ring == rings.end()) {
          std::vector<int> dp_group;
          for (size_t q = 0; q < st.pipelines.size(); ++q) {
            const sharding::StageSpec& other = st.pipelines[q].stages[stages_of_layer[q][layer]];
            for (size_t i = 0; i < other.ranks.size(); i += other.tp()) dp_group.push_back(other.ranks[i]);
          }
          const auto link = dp_group.size() > 1 ? collective_link(dp_group) : std::pair<double, double>{1, 0};
          ring = rings.emplace(layer, std::make_pair(static_cast<int>(dp_group.size()), link)).first;
        }
        return ring->second;
      };
      const double params = shape_.stage_parameters(sp.layers, j == 0, last) / sp.tp;
      const double bytes = params * kGradientElementBytes;
      const auto [n, link] = ring_of(stage.first_layer);
      // The reduce of one round behind the backward pass that completes it (the header's overlap).
      const double backward = kBackwardShare * (sp.compute_seconds + sp.tp_comm_seconds + sp.cp_comm_seconds);
      const double last_bucket = last_bucket_bytes(sp.layers, j == 0, last, sp.tp);
      auto exposed = [&](double reduce, double last_bucket_seconds) {
        const double e = exposed_reduce(reduce, last_bucket_seconds, backward);
        sp.sync_hidden_seconds += reduce - e;
        return e;
      };
      if (st.shards_parameters()) {
        // ZeRO-3: the gathers and reduce-scatters run in every micro-batch's passes on the computing
        // thread (not in buckets); AdamW updates the shard in place, nothing is gathered after it.
        // Each layer is gathered over its own holders: in pipelines of different shapes the stage's
        // layers may be held by other stages, so runs of layers of the same holders are priced together
        // (the embedding over the first stages, those of layer 0; the head over the last ones').
        auto same_holders = [&](int a, int b) {
          for (size_t q = 0; q < st.pipelines.size(); ++q) {
            if (stages_of_layer[q][a] != stages_of_layer[q][b]) return false;
          }
          return true;
        };
        for (int from = stage.first_layer; from <= stage.last_layer;) {
          const auto& ring = ring_of(from);
          int to = from;
          while (to < stage.last_layer && same_holders(from, to + 1)) ++to;
          sp.zero3_comm_seconds += zero3_comm(sp.kind, ring.first, ring.second, to - from + 1,
                                              j == 0 && from == stage.first_layer, last && to == stage.last_layer, sp.tp);
          from = to + 1;
        }
      } else if (st.shards_gradients()) {
        // ZeRO-2: a reduce-scatter of the group's gradient per group, each behind the group's last
        // backward pass, then (as ZeRO-1's all-reduce's second half) the all-gather of the updated
        // parameters in Post.
        const double scatter = ring_allgather(n, link, bytes);
        sp.sync_seconds = groups * exposed(scatter, ring_allgather(n, link, last_bucket)) + scatter;
        sp.sync_hidden_seconds *= groups;
      } else if (st.shards_optimizer_states()) {
        // ZeRO-1: the buckets reduce-scatter into the shards; Post gathers the updated parameters.
        const double half = ring_allgather(n, link, bytes);
        sp.sync_seconds = exposed(half, ring_allgather(n, link, last_bucket)) + half;
      } else {
        sp.sync_seconds = exposed(ring_allreduce(n, link, bytes), ring_allreduce(n, link, last_bucket));
      }
      sp.optimizer_seconds = profile_.kind(sp.kind).optimizer_seconds_per_parameter * params /
                             (st.shards_optimizer_states() ? std::max(1, D) * sp.cp : 1);
      sum += sp.per_micro_batch();
      slowest = std::max(slowest, sp.per_micro_batch());
      tail = std::max(tail, sp.sync_seconds + sp.optimizer_seconds);

      const int inflight = in_flight(S, j, pipe.num_micro_batches);
      const bool gradient_shard = st.shards_gradients() && pipe.num_micro_batches <= groups;
      const MemoryBreakdown mem = stage_memory(sp.kind, sp.tp, sp.layers, j == 0, last, b, inflight, D,
                                               st.shards_optimizer_states(), sp.cp, gradient_shard,
                                               sp.sequence_parallel, st.shards_parameters());
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
  s << ")\n";
  if (p.gradient_groups > 0) {
    s << "  ZeRO-2: " << p.gradient_groups << " gradient reduce-scatter(s) per step, then the parameter all-gather\n";
  }
  if (p.parameters_sharded) {
    s << "  ZeRO-3: per micro-batch, the stage's parameters all-gathered in F and in B and its gradients "
         "reduce-scattered in B\n";
  }
  for (size_t i = 0; i < p.pipelines.size(); ++i) {
    for (size_t j = 0; j < p.pipelines[i].stages.size(); ++j) {
      const StagePrediction& st = p.pipelines[i].stages[j];
      s << "  pipeline " << i << " stage " << j << " (" << st.kind << " TP" << st.tp;
      if (st.cp > 1) s << " CP" << st.cp;
      if (st.sequence_parallel) s << " SP";
      s << ", " << st.layers << " layers): per micro-batch " << st.compute_seconds << " s compute + "
        << st.tp_comm_seconds << " s TP";
      if (st.cp > 1) s << " + " << st.cp_comm_seconds << " s CP (K/V gathers)";
      if (st.zero3_comm_seconds > 0) s << " + " << st.zero3_comm_seconds << " s ZeRO-3 gathers";
      s << " + " << st.p2p_seconds << " s p2p; per step " << st.sync_seconds << " s sync";
      if (st.sync_hidden_seconds > 0) s << " (+ " << st.sync_hidden_seconds << " s behind backward passes)";
      s << " + " << st.optimizer_seconds << " s optimizer\n";
    }
  }
  s << "predicted memory per rank" << (p.fits ? "" : " (DOES NOT FIT)") << ":\n";
  for (const RankPrediction& r : p.ranks) s << "  " << describe_memory(r) << "\n";
  return s.str();
}

}  // namespace hspmd::planner
