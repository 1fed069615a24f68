#include "hspmd/specialize/plan_report.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "hspmd/core/append_number.h"
#include "hspmd/core/byte_size.h"
#include "hspmd/core/error.h"
#include "hspmd/graph/deduction.h"
#include "hspmd/graph/token_loss.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/sharding/device_group.h"
#include "hspmd/sharding/int_runs.h"
#include "hspmd/specialize/exec_graph.h"
#include "hspmd/specialize/rank_memory.h"
#include "hspmd/specialize/reshard_resolution.h"

namespace hspmd::specialize {

using graph::Graph;
using graph::Op;
using graph::OpKind;
using graph::TensorRef;
using sharding::Annotation;

namespace {

// "model.layers.12.attn_out" -> ("model.layers.{L}.attn_out", 12); other names -> (name, -1).
std::pair<std::string, int> layer_pattern(const std::string& name) {
  static const std::string kLayers = "layers.";
  const size_t at = name.find(kLayers);
  if (at == std::string::npos) return {name, -1};
  const size_t begin = at + kLayers.size();
  size_t end = begin;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == begin || end == name.size() || name[end] != '.') return {name, -1};
  return {name.substr(0, begin) + "{L}" + name.substr(end), std::stoi(name.substr(begin, end - begin))};
}

bool is_identity(const resolve::Resolution& r) {
  for (const resolve::ResolveStep& step : r.steps) {
    for (const auto& [dev, ops] : step.ops) {
      for (const resolve::CommOp& op : ops) {
        if (op.kind != resolve::CommKind::kIdentity) return false;
      }
    }
  }
  return true;
}

// One classification for the parts of a per-subgroup resolution: "bottom[AR]" and "bottom[SR]"
// read as the whole-tensor bottom tier would, "bottom[AR,SR]".
std::string classification(const std::vector<GroupResolution>& parts) {
  if (parts.size() == 1) return parts[0].resolution->classification();
  std::string bottom, joined;
  bool all_bottom = true;
  for (const GroupResolution& p : parts) {
    const std::string c = p.resolution->classification();
    joined += (joined.empty() ? "" : "; ") + c;
    if (c.rfind("bottom[", 0) != 0 || c.find('+') != std::string::npos) {
      all_bottom = false;
    } else {
      bottom += (bottom.empty() ? "" : ",") + c.substr(7, c.size() - 8);
    }
  }
  return all_bottom ? "bottom[" + bottom + "]" : joined;
}

// The link tier an op's bytes travel on.
std::string tier_of(const resolve::CommOp& op, int device, const resolve::Topology* topo) {
  if (!topo) return "all";
  // Inter-node is the slowest tier: a data-parallel group of thousands of ranks is decided at its
  // first member on another node, not read whole for each member.
  resolve::LinkTier worst = resolve::LinkTier::kLocal;
  auto consider = [&](int other) {
    const resolve::LinkTier t = topo->tier(device, other);
    if (static_cast<int>(t) > static_cast<int>(worst)) worst = t;
    return worst == resolve::LinkTier::kInterNode;
  };
  if (op.peer < 0 || !consider(op.peer)) {
    for (int m : op.group) {
      if (consider(m)) break;
    }
  }
  return std::string(resolve::link_tier_name(worst));
}

// What a rank computes in the forward pass: the decoder layers of its compute ops (a Reshard tagged
// with layer l may put its output on the next stage, so only compute ops count) and how many ways
// its attention splits the token dim 0: its stage's CP degree.
struct RankWork {
  std::set<int> layers;
  int cp = 1;
};

// Indexed by rank. The ops of a layer mostly share their device groups, so each (layer, group) is
// counted once: a pass over every device of every op was most of explaining thousands of ranks.
std::vector<RankWork> work_by_rank(const Graph& g, const graph::DeducedAnnotations& deduced) {
  std::vector<RankWork> out;
  auto of = [&](int d) -> RankWork& {
    if (d >= static_cast<int>(out.size())) out.resize(static_cast<size_t>(d) + 1);
    return out[d];
  };
  struct LayerGroupHash {
    size_t operator()(const std::pair<int, sharding::DeviceGroup>& k) const {
      return k.second.hash() * 0x100000001b3ull ^ static_cast<size_t>(k.first);
    }
  };
  std::unordered_set<std::pair<int, sharding::DeviceGroup>, LayerGroupHash> counted;
  for (int id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    if (op.backward || op.kind == OpKind::kPlaceholder || op.kind == OpKind::kParameter ||
        op.kind == OpKind::kReshard) {
      continue;
    }
    const Annotation& a = deduced.by_op()[id][0];
    for (int group = 0; group < a.hsize(); ++group) {
      const std::vector<int>& devices = a.group(group).devices();
      if (op.layer >= 0 && counted.emplace(op.layer, a.group(group)).second) {
        for (int d : devices) of(d).layers.insert(op.layer);
      }
      // Attention's tokens: the rest may be split by tokens over TP as well (sequence parallelism).
      if (op.kind != OpKind::kContextAttention) continue;
      for (int d : devices) of(d).cp = std::max(of(d).cp, a.ds(group).degree(0));
    }
  }
  return out;
}

class Builder {
 public:
  Builder(const models::ModelGraph& m, const sharding::AnnotationPlan& plan, const PlanReportOptions& o)
      : m_(m), plan_(plan), o_(o) {}

  PlanReport build() {
    const Graph& g = m_.graph;
    r_.schedule = o_.schedule;
    r_.seq_len = o_.seq_len;
    r_.topology = o_.topology ? o_.topology->name() : "";
    HSPMD_CHECK(o_.seq_len >= 1) << "plan report: seq_len must be >= 1, got " << o_.seq_len;
    const auto shared = std::make_shared<const graph::DeducedAnnotations>(graph::deduce_annotations(g, plan_));
    const graph::DeducedAnnotations& deduced = *shared;
    check_topology(deduced);
    pipelines(g, deduced);
    memory(shared);
    const std::vector<bool> on_data = ops_on_data(g);
    for (int id = 0; id < g.num_ops(); ++id) {
      const Op& op = g.op(id);
      if (graph::gathers_vocab_shards(op.kind)) vocab_parallel_loss(op, id, deduced);
      if (op.kind != OpKind::kReshard) continue;
      ++r_.reshards_total;
      const TensorRef out{id, 0};
      const graph::TensorInfo& info = g.info(out);
      if (!add(r_.activations, activations_, op.name, deduced.at(op.inputs[0]), deduced.at(out), info.shape, info.dtype,
               on_data[id])) {
        ++r_.reshards_identity;
      }
    }
    for (const graph::GradientSync& s : graph::gradient_syncs(g, deduced, plan_, m_.params, m_.grads)) {
      const graph::TensorInfo& info = g.info(*g.find(s.param));
      add(r_.gradient_syncs, syncs_, s.param, s.deduced, s.target, info.shape, info.dtype, false, sync_runs());
      if (plan_.optimizer_states().count(s.param)) {
        // ZeRO-3 gathers before each layer's use in F and again in B: at most 2 per micro-batch.
        add(r_.parameter_gathers, gathers_, s.param, s.target, s.param_annotation, info.shape, info.dtype, false,
            plan_.shard_parameters ? 2 * sync_runs() : 1);
      }
    }
    if (plan_.shard_gradients) r_.zero2_gradient_groups = sync_runs();
    r_.zero3 = plan_.shard_parameters;
    for (const auto* list : {&r_.activations, &r_.gradient_syncs, &r_.parameter_gathers}) {
      for (const ReshardGroup& grp : *list) {
        for (const auto& [tier, bytes] : grp.occurrence_step_bytes) r_.step_bytes_by_tier[tier] += bytes * grp.occurrences;
      }
    }
    return std::move(r_);
  }

 private:
  void check_topology(const graph::DeducedAnnotations& deduced) {
    if (!o_.topology) return;
    std::unordered_set<sharding::DeviceGroup, sharding::DeviceGroupHash> checked;  // tensors share groups
    for (const auto& outs : deduced.by_op()) {
      for (const Annotation& a : outs) {
        for (const sharding::DeviceGroup& group : a.dg_union()) {
          if (!checked.insert(group).second) continue;
          for (int d : group.devices()) {
            HSPMD_CHECK(d < o_.topology->num_devices()) << "the plan uses rank " << d << " but cluster "
                                                        << o_.topology->name() << " has "
                                                        << o_.topology->num_devices() << " devices";
          }
        }
      }
    }
  }

  // Pipelines of the layout, matched to the plan's subgroups through the loss (split or partial
  // over one subgroup per pipeline, on each last stage); layers per stage from the ops' tags.
  void pipelines(const Graph& g, const graph::DeducedAnnotations& deduced) {
    const PipelineLayout layout = build_pipeline_layout(g, deduced);
    const Annotation& loss = deduced.at(m_.loss);
    const size_t planned = plan_.pipelines.size();
    HSPMD_CHECK(planned == 0 || planned == layout.pipelines.size())
        << "the plan schedules " << planned << " pipelines but its annotations form " << layout.pipelines.size()
        << ":\n" << layout.to_string();
    const std::vector<RankWork> work = work_by_rank(g, deduced);
    const RankWork idle;
    auto work_of = [&](int d) -> const RankWork& { return d < static_cast<int>(work.size()) ? work[d] : idle; };
    for (const PipelineStages& p : layout.pipelines) {
      PipelineReport pr;
      const auto where = loss.locate(p.stages.back()[0]);
      HSPMD_CHECK(where.has_value()) << "the loss " << loss.to_string() << " is not on the last stage "
                                     << sharding::DeviceGroup(p.stages.back()).to_string() << " of a pipeline";
      pr.subgroup = where->first;
      if (planned > 0) {
        pr.micro_batch_size = plan_.pipelines.at(pr.subgroup).micro_batch_size;
        pr.num_micro_batches = plan_.pipelines.at(pr.subgroup).num_micro_batches;
      }
      const int64_t row = planned > 0 ? plan_.pipelines.at(pr.subgroup).row_tokens(o_.seq_len) : o_.seq_len;
      pr.binding = {{"T", pr.micro_batch_size * row}, {"N", pr.micro_batch_size}};
      for (size_t s = 0; s < p.stages.size(); ++s) {
        StageReport sr;
        sr.ranks = p.stages[s];
        std::set<int> layers;
        for (int d : sr.ranks) {
          layers.insert(work_of(d).layers.begin(), work_of(d).layers.end());
          runs_[d] = pr.num_micro_batches;
        }
        sr.layers = sharding::runs_text({layers.begin(), layers.end()});
        sr.cp = work_of(sr.ranks.front()).cp;
        sr.schedule = make_schedule(o_.schedule, pr.num_micro_batches, static_cast<int>(p.stages.size()),
                                    static_cast<int>(s));
        pr.stages.push_back(std::move(sr));
      }
      r_.pipelines.push_back(std::move(pr));
    }
    std::sort(r_.pipelines.begin(), r_.pipelines.end(),
              [](const PipelineReport& a, const PipelineReport& b) { return a.subgroup < b.subgroup; });
    for (size_t i = 0; i < r_.pipelines.size(); ++i) {
      HSPMD_CHECK(r_.pipelines[i].subgroup == static_cast<int>(i))
          << "the loss " << loss.to_string() << " does not have one subgroup per pipeline:\n" << layout.to_string();
      bindings_.push_back(r_.pipelines[i].binding);
    }
  }

  // A loss over vocab-split logits gathers 3 float64 row statistics per token over each set of ranks
  // sharing rows, once per micro-batch (graph/ops/cross_entropy.cc): listed with the activations as
  // an AllGather of the statistics [k, 3, T].
  void vocab_parallel_loss(const Op& op, int id, const graph::DeducedAnnotations& deduced) {
    const Annotation logits =
        graph::loss_logits(m_.graph, op, [&](TensorRef t) { return deduced.at(t); })->annotation;
    ReshardGroup grp;
    grp.pattern = op.name + " (vocab-parallel row statistics)";
    grp.src = logits.to_string();
    grp.dst = deduced.at(TensorRef{id, 1}).to_string();
    grp.shape = "[k, 3, T] float64";
    grp.classification = "AG";
    for (int d : logits.devices()) {
      const std::vector<int> ranks = vocab_shard_ranks(logits, d);
      if (ranks.empty()) continue;
      const int k = static_cast<int>(ranks.size());
      const int64_t tokens = bindings_.at(logits.locate(d)->first).at("T");
      resolve::CommOp gather;
      gather.kind = resolve::CommKind::kAllGather;
      gather.pieces = {{0, sharding::Region::full(Shape{k, 3, tokens})}};
      gather.group = ranks;
      gather.dim = 0;
      gather.bytes = (k - 1) * 3 * tokens * static_cast<int64_t>(sizeof(double));
      grp.occurrence_step_bytes[tier_of(gather, d, o_.topology)] += gather.bytes * runs_of(d);
      grp.bytes += gather.bytes;
      grp.devices.push_back({d, {gather}, gather.bytes});
    }
    if (!grp.devices.empty()) r_.activations.push_back(std::move(grp));
  }

  resolve::ResolveCache& cache(size_t element_size) {
    auto& c = caches_[element_size];
    if (!c) {
      c = std::make_unique<resolve::ResolveCache>(resolve::ResolveOptions{static_cast<int64_t>(element_size),
                                                                          o_.topology, resolve::BsrPolicy::kHeuristic});
    }
    return *c;
  }

  // An annotation's canonical text, written once: the Reshards of every layer share a few
  // annotations, each the text of every subgroup (thousands of ranks: kilobytes).
  const std::string& text_of(const Annotation& a) {
    auto it = texts_.find(a);
    if (it == texts_.end()) it = texts_.emplace(a, a.to_string()).first;
    return it->second;
  }

  // One resolved (src, dst, shape, element size), shared by every Reshard with the same: a model's
  // layers repeat a few. Resolving each again (one cache lookup per subgroup, each copying and
  // hashing annotations) and classifying it again was most of resolving thousands of ranks.
  struct Resolved {
    sharding::Annotation src, dst;
    std::string shape;
    size_t element_size = 0;
    std::vector<GroupResolution> parts;
    bool identity = false;
    std::string classification;
  };
  // Points into the Resolved it maps to, or, for a lookup, at the caller's values.
  struct ResolvedKey {
    const Annotation* src;
    const Annotation* dst;
    std::string_view shape;
    size_t element_size;
    friend bool operator==(const ResolvedKey& a, const ResolvedKey& b) {
      return a.element_size == b.element_size && a.shape == b.shape && *a.src == *b.src && *a.dst == *b.dst;
    }
  };
  struct ResolvedKeyHash {
    size_t operator()(const ResolvedKey& k) const {
      return ((k.src->hash() * 31 + k.dst->hash()) * 31 + std::hash<std::string_view>()(k.shape)) * 31 + k.element_size;
    }
  };

  const Resolved& resolved(const Annotation& src, const Annotation& dst, const SymShape& shape, DType dtype,
                           const std::string& name) {
    const std::string shape_text = hspmd::to_string(shape);
    const size_t element_size = dtype_size(dtype);
    auto it = resolved_.find(ResolvedKey{&src, &dst, shape_text, element_size});
    if (it != resolved_.end()) return *it->second;
    auto r = std::make_unique<Resolved>(Resolved{src, dst, shape_text, element_size, {}, false, {}});
    r->parts = resolve_reshard(src, dst, shape, bindings_, name, cache(element_size));
    r->identity = std::all_of(r->parts.begin(), r->parts.end(),
                              [](const GroupResolution& p) { return is_identity(*p.resolution); });
    if (!r->identity) r->classification = classification(r->parts);
    const ResolvedKey key{&r->src, &r->dst, r->shape, element_size};
    return *resolved_.emplace(key, std::move(r)).first->second;
  }

  // Groups of one list, by (name pattern, classification, src, dst, shape); src and dst by their
  // texts' addresses (text_of keeps one string per annotation), as each text is kilobytes at
  // thousands of ranks.
  struct GroupKey {
    std::string pattern;
    std::string classification;
    const std::string* src;
    const std::string* dst;
    std::string shape;
    friend bool operator==(const GroupKey&, const GroupKey&) = default;
  };
  struct GroupKeyHash {
    size_t operator()(const GroupKey& k) const {
      const std::hash<std::string> h;
      return (((h(k.pattern) * 31 + h(k.classification)) * 31 + std::hash<const void*>()(k.src)) * 31 +
              std::hash<const void*>()(k.dst)) * 31 + h(k.shape);
    }
  };
  using Index = std::unordered_map<GroupKey, size_t, GroupKeyHash>;

  // Resolves one Reshard and files it under its group; false when it is the identity everywhere.
  bool add(std::vector<ReshardGroup>& into, Index& index, const std::string& name, const Annotation& src,
           const Annotation& dst, const SymShape& shape, DType dtype, bool per_micro_batch, int runs_per_step = 1) {
    const Resolved& r = resolved(src, dst, shape, dtype, name);
    if (r.identity) return false;
    auto [pattern, layer] = layer_pattern(name);
    auto [slot, fresh] =
        index.emplace(GroupKey{pattern, r.classification, &text_of(src), &text_of(dst), r.shape}, into.size());
    if (!fresh) {
      ReshardGroup& grp = into[slot->second];
      ++grp.occurrences;
      if (layer >= 0) grp.layers.push_back(layer);
      return true;
    }
    ReshardGroup grp;
    grp.pattern = std::move(pattern);
    if (layer >= 0) grp.layers.push_back(layer);
    grp.src = text_of(src);
    grp.dst = text_of(dst);
    grp.shape = r.shape;
    grp.classification = r.classification;
    std::map<int, DeviceOps> by_device;
    for (const GroupResolution& part : r.parts) {
      for (int d : part.resolution->devices()) {
        DeviceOps& dev = by_device[d];
        dev.device = d;
        const int runs = per_micro_batch ? runs_of(d) : runs_per_step;
        for (resolve::CommOp& op : part.resolution->ops_of(d)) {
          if (op.kind == resolve::CommKind::kIdentity) continue;
          dev.bytes += op.bytes;
          if (op.bytes > 0) grp.occurrence_step_bytes[tier_of(op, d, o_.topology)] += op.bytes * runs;
          dev.ops.push_back(std::move(op));
        }
      }
    }
    for (auto& [d, dev] : by_device) {
      if (dev.ops.empty()) continue;
      grp.bytes += dev.bytes;
      grp.devices.push_back(std::move(dev));
    }
    into.push_back(std::move(grp));
    return true;
  }

  // Each rank's memory estimate (specialize/memory_estimate.h) under the pipelines' schedules, at
  // the report's seq_len; one ExecGraph per class of ranks that see the same graph
  // (specialize/rank_memory.h).
  void memory(const std::shared_ptr<const graph::DeducedAnnotations>& deduced) {
    std::vector<RankMemoryQuery> queries;
    for (const PipelineReport& p : r_.pipelines) {
      for (const StageReport& s : p.stages) {
        const MemoryEstimateOptions options{.micro_batch_tokens = p.binding.at("T"),
                                            .micro_batches_in_flight = max_in_flight(s.schedule)};
        for (int rank : s.ranks) queries.push_back({rank, options});
      }
    }
    const std::vector<MemoryEstimate> estimates = estimate_memory_of_ranks(
        m_.graph, std::make_shared<const sharding::AnnotationPlan>(plan_), deduced, queries);
    for (size_t k = 0; k < queries.size(); ++k) r_.memory.push_back({queries[k].rank, estimates[k]});
    std::sort(r_.memory.begin(), r_.memory.end(),
              [](const RankMemory& a, const RankMemory& b) { return a.rank < b.rank; });
  }

  // How often a step runs each gradient sync: once in Post, or under ZeRO-2 once per gradient
  // group (runtime/gradient_sync.h: as many as the fewest micro-batches of any pipeline).
  int sync_runs() const {
    if (!plan_.shard_gradients || r_.pipelines.empty()) return 1;
    int fewest = r_.pipelines.front().num_micro_batches;
    for (const PipelineReport& p : r_.pipelines) fewest = std::min(fewest, p.num_micro_batches);
    return std::max(1, fewest);
  }

  int runs_of(int device) const {
    auto it = runs_.find(device);
    return it == runs_.end() ? 1 : it->second;
  }

  const models::ModelGraph& m_;
  const sharding::AnnotationPlan& plan_;
  const PlanReportOptions& o_;
  PlanReport r_;
  std::vector<SymBinding> bindings_;
  std::map<int, int> runs_;  // device -> micro-batches of its pipeline
  std::map<size_t, std::unique_ptr<resolve::ResolveCache>> caches_;  // by element size
  Index activations_, syncs_, gathers_;
  std::unordered_map<Annotation, std::string, sharding::AnnotationHash> texts_;
  std::unordered_map<ResolvedKey, std::unique_ptr<Resolved>, ResolvedKeyHash> resolved_;
};

}  // namespace

std::string ReshardGroup::display_name() const {
  if (layers.empty()) return pattern;
  std::vector<int> sorted = layers;
  std::sort(sorted.begin(), sorted.end());
  const std::string list = sorted.size() == 1 ? std::to_string(sorted[0]) : "{" + sharding::runs_text(sorted, "..") + "}";
  const size_t at = pattern.find("{L}");
  return pattern.substr(0, at) + list + pattern.substr(at + 3);
}

int64_t ReshardGroup::step_bytes() const {
  int64_t n = 0;
  for (const auto& [tier, bytes] : occurrence_step_bytes) n += bytes;
  return n * occurrences;
}

PlanReport make_plan_report(const models::ModelGraph& model, const sharding::AnnotationPlan& plan,
                            const PlanReportOptions& options) {
  return Builder(model, plan, options).build();
}

namespace {

std::string bytes_text(int64_t bytes) {
  return bytes < 1024 ? std::to_string(bytes) + " B" : format_bytes(bytes) + " (" + std::to_string(bytes) + " B)";
}

// The report is one buffer, appended to: at thousands of ranks it is megabytes of ops, and a
// stream insertion or temporary string per number was a large part of writing it.
void print_groups(std::string& out, const std::vector<ReshardGroup>& groups, const char* per_run) {
  for (const ReshardGroup& grp : groups) {
    out += "  ";
    out += grp.display_name();
    if (grp.occurrences > 1) {
      out += " (";
      append_number(out, grp.occurrences);
      out += "x)";
    }
    out += "  ";
    out += grp.classification;
    out += "  ";
    out += grp.shape;
    out += "\n    ";
    out += grp.src;
    out += " -> ";
    out += grp.dst;
    out += '\n';
    if (grp.local_only()) {
      std::vector<int> ranks;
      for (const DeviceOps& d : grp.devices) ranks.push_back(d.device);
      out += "    local copies only, on ranks ";
      out += sharding::DeviceGroup(ranks).to_string();
      out += '\n';
      continue;
    }
    for (const DeviceOps& d : grp.devices) {
      out += "    rank ";
      append_number(out, d.device);
      out += ':';
      for (size_t i = 0; i < d.ops.size(); ++i) {
        out += i ? "; " : " ";
        d.ops[i].append_text(out);
      }
      out += '\n';
    }
    out += "    bytes: ";
    out += bytes_text(grp.bytes);
    out += ' ';
    out += per_run;
    if (grp.occurrences > 1) {
      out += ", ";
      out += bytes_text(grp.bytes * grp.occurrences);
      out += " for all ";
      append_number(out, grp.occurrences);
    }
    out += "; per step ";
    out += bytes_text(grp.step_bytes());
    out += '\n';
  }
}

}  // namespace

std::string to_string(const PlanReport& r) {
  std::ostringstream head;
  head << "schedule " << schedule_kind_name(r.schedule) << ", seq_len " << r.seq_len << ", cluster "
       << (r.topology.empty() ? "none (one link tier \"all\")" : r.topology) << "\n"
       << "activations are per micro-batch: T = micro_batch_size * seq_len tokens, N = micro_batch_size documents\n"
       << "rank lists: a-b is ranks a to b, a-b/s every s-th of them (a, a+s, ..., b)\n\n";
  head << "Pipelines (" << r.pipelines.size() << "); per stage: ranks, decoder layers, TP (and CP) degree, one step's schedule\n";
  for (const PipelineReport& p : r.pipelines) {
    head << "  pipeline " << p.subgroup << ": " << p.num_micro_batches << " micro-batches of " << p.micro_batch_size
         << (p.micro_batch_size == 1 ? " sequence" : " sequences") << " (T=" << p.binding.at("T")
         << ", N=" << p.binding.at("N") << ")\n";
    for (size_t s = 0; s < p.stages.size(); ++s) {
      const StageReport& st = p.stages[s];
      char line[160];
      std::snprintf(line, sizeof line, "    stage %zu  ranks %-8s layers %-7s TP %-3zu ", s,
                    sharding::DeviceGroup(st.ranks).to_string().c_str(),
                    st.layers.empty() ? "-" : st.layers.c_str(), st.ranks.size() / st.cp);
      if (st.cp > 1) std::snprintf(line + std::strlen(line) - 1, sizeof line - std::strlen(line) + 1, "CP %-3d ", st.cp);
      head << line << to_short_string(st.schedule) << "\n";
    }
  }
  const int listed = r.reshards_total - r.reshards_identity;
  head << "\nReshards (forward, then backward \".bwd\"; graph order): " << listed << " of " << r.reshards_total
       << " resolve to communication or local copies, the other " << r.reshards_identity
       << " are the identity everywhere; bytes per run, per step counting each micro-batch of the sender's pipeline\n";
  // What follows grows with the ranks: appended to one buffer.
  std::string out = head.str();
  print_groups(out, r.activations, "per run");
  out += "\nGradient syncs (deduced gradient -> optimizer target; ";
  out += r.zero2_gradient_groups > 0
             ? "ZeRO-2: once per gradient group, " + std::to_string(r.zero2_gradient_groups) + " per step, in B"
             : std::string("once per step, in Post");
  out += "): " + std::to_string(r.gradient_syncs.size()) + " groups\n";
  print_groups(out, r.gradient_syncs, "per tensor");
  if (!r.parameter_gathers.empty()) {
    out += "\nParameter gathers (ZeRO optimizer state -> parameter; ";
    out += r.zero3 ? "ZeRO-3: per layer before its use in F and in B, at most " +
                         std::to_string(2 * r.zero2_gradient_groups) + " per step"
                   : std::string("once per step, after the update");
    out += "): " + std::to_string(r.parameter_gathers.size()) + " groups\n";
    print_groups(out, r.parameter_gathers, "per tensor");
  }
  out += "\nMemory estimate per rank (float32; specialize/memory_estimate.h)\n";
  // Ranks of one stage are neighbours and mostly share one estimate: written once for them.
  const MemoryEstimate* previous = nullptr;
  std::string estimate;
  for (const RankMemory& m : r.memory) {
    if (!previous || *previous != m.estimate) estimate = m.estimate.to_string();
    previous = &m.estimate;
    out += "  rank ";
    append_number(out, m.rank);
    out += ": ";
    out += estimate;
    out += '\n';
  }
  out += "\nBytes per step by link tier\n";
  int64_t total = 0;
  for (const auto& [tier, bytes] : r.step_bytes_by_tier) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-11s %s\n", tier.c_str(), bytes_text(bytes).c_str());
    out += line;
    total += bytes;
  }
  char line[160];
  std::snprintf(line, sizeof line, "  %-11s %s\n", "total", bytes_text(total).c_str());
  out += line;
  return out;
}

}  // namespace hspmd::specialize
