#include "hspmd/planner/dispatcher.h"

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <numeric>
#include <sstream>

namespace hspmd::planner {

double PipelineModel::seconds(std::span<const MicroBatchLoad> micro_batches) const {
  if (micro_batches.empty() || stages.empty()) return 0;
  double steady = 0, largest = -1, fill_drain = 0;
  for (const MicroBatchLoad& m : micro_batches) {
    double sum = 0, worst = 0;
    for (const StageTimeModel& s : stages) {
      const double f = s.seconds(m.sum_squares, m.tokens);
      sum += f;
      worst = std::max(worst, f);
    }
    steady += worst;
    if (worst > largest) {
      largest = worst;
      fill_drain = sum - worst;
    }
  }
  return steady + fill_drain;
}

namespace {

CostModel at_length(const CostModel& cm, int64_t s) { return cm.at_seq_len(s); }

// `st` with micro-batches of one sequence: the cost model's stage times of it are f_j(s) of one
// sequence of its length, with every term it prices (compute with SP's split of the TP-duplicated
// work, the TP collectives of the layers and ends, CP's K/V traffic, ZeRO-3's gathers, p2p).
sharding::Strategy one_sequence_micro_batches(sharding::Strategy st) {
  for (sharding::PipelineSpec& pipe : st.pipelines) pipe.micro_batch_size = 1;
  return st;
}

// Whether every rank of pipeline p holds a micro-batch of `tokens` tokens (the cost model's memory).
bool fits(const CostModel& base, const sharding::Strategy& st, size_t p, int64_t tokens) {
  const CostModel cm = at_length(base, tokens);
  const sharding::PipelineSpec& pipe = st.pipelines[p];
  const int S = static_cast<int>(pipe.stages.size());
  const int D = static_cast<int>(st.pipelines.size());
  for (int j = 0; j < S; ++j) {
    const sharding::StageSpec& stage = pipe.stages[j];
    // The count of micro-batches changes with each batch: take the most the schedule keeps in flight.
    const int in_flight = cm.in_flight(S, j, std::max(pipe.num_micro_batches, S));
    // ZeRO-2's saving (no whole gradient accumulator) holds only on a pipeline running the fewest
    // micro-batches of the step, which the dispatch decides batch by batch: the limit does without
    // it. ZeRO-3's sharded weights and per-parameter gradients hold whatever the counts.
    const MemoryBreakdown m = cm.stage_memory(cm.stage_kind(stage.ranks, stage.tp()), stage.tp(),
                                              stage.last_layer - stage.first_layer + 1, j == 0, j == S - 1, 1,
                                              in_flight, D, st.shards_optimizer_states(), stage.cp,
                                              /*gradient_shard=*/false, stage.sequence_parallel && stage.tp() > 1,
                                              st.shards_parameters());
    for (int r : stage.ranks) {
      const double capacity = cm.topology().device(r).memory;
      if (capacity > 0 && m.total() > capacity) return false;
    }
  }
  return true;
}

}  // namespace

std::vector<PipelineModel> pipeline_models(const CostModel& cost_model, const sharding::Strategy& st,
                                           const PipelineModelOptions& options) {
  HSPMD_CHECK(options.seq_len > 0) << "dispatch: the context length must be positive, got " << options.seq_len;
  st.validate(static_cast<int>(cost_model.shape().layers));
  const Prediction whole = at_length(cost_model, options.seq_len).predict(st);
  // Stage times are exactly quadratic in the length: three lengths give the coefficients.
  constexpr double h = 1024;
  const sharding::Strategy single = one_sequence_micro_batches(st);
  const Prediction c1 = at_length(cost_model, 1024).predict(single), c2 = at_length(cost_model, 2048).predict(single),
                   c3 = at_length(cost_model, 3072).predict(single);
  std::vector<PipelineModel> out;
  for (size_t p = 0; p < st.pipelines.size(); ++p) {
    const sharding::PipelineSpec& pipe = st.pipelines[p];
    PipelineModel m;
    for (size_t j = 0; j < pipe.stages.size(); ++j) {
      const double f1 = c1.pipelines[p].stages[j].per_micro_batch(), f2 = c2.pipelines[p].stages[j].per_micro_batch(),
                   f3 = c3.pipelines[p].stages[j].per_micro_batch();
      StageTimeModel s;
      s.quadratic = (f3 - 2 * f2 + f1) / (2 * h * h);
      s.linear = (f2 - f1) / h - 3 * s.quadratic * h;
      s.constant = f1 - s.quadratic * h * h - s.linear * h;
      m.stages.push_back(s);
    }
    m.tail_seconds = whole.pipelines[p].end_seconds - whole.pipelines[p].pipeline_seconds;
    // The largest micro-batch that fits: memory grows with the tokens, so bisect.
    int64_t lo = 0, hi = options.max_tokens_searched;
    if (fits(cost_model, st, p, hi)) {
      lo = hi;
    } else {
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (fits(cost_model, st, p, mid) ? lo : hi) = mid;
      }
    }
    m.max_tokens = lo;
    m.micro_batch_tokens = std::min<int64_t>(lo, pipe.micro_batch_size * options.seq_len);
    out.push_back(std::move(m));
  }
  return out;
}

double Dispatch::idle_share() const {
  if (pipeline_seconds.empty() || step_seconds <= 0) return 0;
  double idle = 0;
  for (double t : pipeline_seconds) idle += step_seconds - t;
  return idle / (step_seconds * static_cast<double>(pipeline_seconds.size()));
}

std::string Dispatch::to_string() const {
  std::ostringstream out;
  for (size_t p = 0; p < micro_batches.size(); ++p) {
    size_t seqs = 0;
    for (const auto& mb : micro_batches[p]) seqs += mb.size();
    char line[160];
    std::snprintf(line, sizeof line, "%spipeline %zu: %zu seqs in %zu micro-batches, %lld tokens, %.4g s",
                  p ? " | " : "", p, seqs, micro_batches[p].size(), static_cast<long long>(pipeline_tokens[p]),
                  pipeline_seconds[p]);
    out << line;
  }
  return out.str();
}

namespace {

// First-fit decreasing of `items` (indices into lengths, any order) into micro-batches of at most
// the pipeline's micro_batch_tokens (a longer sequence gets a micro-batch of its own).
std::vector<std::vector<size_t>> pack_micro_batches(std::vector<size_t> items, std::span<const int64_t> lengths,
                                                    const PipelineModel& pipe, std::vector<MicroBatchLoad>& loads) {
  std::stable_sort(items.begin(), items.end(), [&](size_t a, size_t b) {
    return lengths[a] != lengths[b] ? lengths[a] > lengths[b] : a < b;
  });
  std::vector<std::vector<size_t>> bins;
  loads.clear();
  for (size_t i : items) {
    const double l = static_cast<double>(lengths[i]);
    const double capacity = static_cast<double>(std::max(pipe.micro_batch_tokens, lengths[i]));
    size_t m = 0;
    while (m < loads.size() && loads[m].tokens + l > capacity) ++m;
    if (m == loads.size()) {
      loads.emplace_back();
      bins.emplace_back();
    }
    loads[m].tokens += l;
    loads[m].sum_squares += l * l;
    bins[m].push_back(i);
  }
  return bins;
}

double predicted(const std::vector<size_t>& items, std::span<const int64_t> lengths, const PipelineModel& pipe) {
  std::vector<MicroBatchLoad> loads;
  pack_micro_batches(items, lengths, pipe, loads);
  return pipe.seconds(loads) + pipe.tail_seconds;
}

}  // namespace

std::optional<std::string> sequence_too_long(std::span<const int64_t> lengths,
                                             std::span<const PipelineModel> pipelines) {
  HSPMD_CHECK(!pipelines.empty()) << "dispatch: the strategy has no pipeline";
  size_t roomiest = 0;
  for (size_t p = 1; p < pipelines.size(); ++p) {
    if (pipelines[p].max_tokens > pipelines[roomiest].max_tokens) roomiest = p;
  }
  const int64_t limit = pipelines[roomiest].max_tokens;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > limit) {
      return "sequence " + std::to_string(i) + " of the batch has " + std::to_string(lengths[i]) +
             " tokens, longer than any pipeline of the strategy can hold: the limit is " + std::to_string(limit) +
             " tokens (pipeline " + std::to_string(roomiest) +
             "'s memory); use a strategy for longer sequences or a shorter --seq-len";
    }
  }
  return std::nullopt;
}

Dispatch dispatch(std::span<const int64_t> lengths, std::span<const PipelineModel> pipelines) {
  if (std::optional<std::string> why = sequence_too_long(lengths, pipelines)) throw SequenceTooLong(*why);
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });

  // 1. Greedy, longest first: each sequence to the pipeline that is then predicted to end first.
  const size_t P = pipelines.size();
  std::vector<std::vector<size_t>> sets(P);
  std::vector<double> seconds(P);
  for (size_t p = 0; p < P; ++p) seconds[p] = predicted({}, lengths, pipelines[p]);
  for (size_t i : order) {
    size_t best = P;
    double best_seconds = 0;
    for (size_t p = 0; p < P; ++p) {
      if (lengths[i] > pipelines[p].max_tokens) continue;  // its memory cannot hold the sequence
      std::vector<size_t> trial = sets[p];
      trial.push_back(i);
      const double t = predicted(trial, lengths, pipelines[p]);
      if (best == P || t < best_seconds) {
        best = p;
        best_seconds = t;
      }
    }
    sets[best].push_back(i);
    seconds[best] = best_seconds;
  }
  // 2. Local search: move a sequence off the slowest pipeline, or swap it for a shorter one, while
  // that shortens the step (greedy packing can leave a pipeline one long sequence too heavy).
  for (size_t round = 0; round < 4 * lengths.size() + 4; ++round) {
    const size_t slow = static_cast<size_t>(std::max_element(seconds.begin(), seconds.end()) - seconds.begin());
    double best_gain = 1e-12 * seconds[slow];
    size_t best_k = 0, best_q = P;
    double best_slow = 0, best_q_seconds = 0;
    for (size_t k = 0; k < sets[slow].size(); ++k) {
      const size_t i = sets[slow][k];
      std::vector<size_t> without = sets[slow];
      without.erase(without.begin() + static_cast<std::ptrdiff_t>(k));
      const double t_slow = predicted(without, lengths, pipelines[slow]);
      for (size_t q = 0; q < P; ++q) {
        if (q == slow || lengths[i] > pipelines[q].max_tokens) continue;
        std::vector<size_t> with = sets[q];
        with.push_back(i);
        const double t_q = predicted(with, lengths, pipelines[q]);
        const double gain = seconds[slow] - std::max(t_slow, t_q);
        if (gain > best_gain) {
          best_gain = gain;
          best_k = k;
          best_q = q;
          best_slow = t_slow;
          best_q_seconds = t_q;
        }
      }
    }
    // Swaps of a sequence of the slowest pipeline with a shorter one of another, on small batches
    // (each try repacks both pipelines: quadratic in the batch).
    size_t best_swap = SIZE_MAX;
    if (sets[slow].size() * lengths.size() <= 4096) {
      for (size_t k = 0; k < sets[slow].size(); ++k) {
        const size_t i = sets[slow][k];
        for (size_t q = 0; q < P; ++q) {
          if (q == slow || lengths[i] > pipelines[q].max_tokens) continue;
          for (size_t m = 0; m < sets[q].size(); ++m) {
            const size_t j = sets[q][m];
            if (lengths[j] >= lengths[i]) continue;
            std::vector<size_t> a = sets[slow], b = sets[q];
            a[k] = j;
            b[m] = i;
            const double t_a = predicted(a, lengths, pipelines[slow]), t_b = predicted(b, lengths, pipelines[q]);
            const double gain = seconds[slow] - std::max(t_a, t_b);
            if (gain > best_gain) {
              best_gain = gain;
              best_k = k;
              best_q = q;
              best_swap = m;
              best_slow = t_a;
              best_q_seconds = t_b;
            }
          }
        }
      }
    }
    if (best_q == P) break;
    if (best_swap != SIZE_MAX) {
      std::swap(sets[slow][best_k], sets[best_q][best_swap]);
    } else {
      sets[best_q].push_back(sets[slow][best_k]);
      sets[slow].erase(sets[slow].begin() + static_cast<std::ptrdiff_t>(best_k));
    }
    seconds[slow] = best_slow;
    seconds[best_q] = best_q_seconds;
  }
  // 3. Pack each pipeline's micro-batches.
  Dispatch d;
  d.pipeline_tokens.assign(P, 0);
  for (size_t p = 0; p < P; ++p) {
    std::vector<MicroBatchLoad> loads;
    d.micro_batches.push_back(pack_micro_batches(sets[p], lengths, pipelines[p], loads));
    for (auto& mb : d.micro_batches.back()) std::sort(mb.begin(), mb.end());  // batch order inside
    for (size_t i : sets[p]) d.pipeline_tokens[p] += lengths[i];
    seconds[p] = pipelines[p].seconds(loads) + pipelines[p].tail_seconds;
  }
  d.pipeline_seconds = seconds;
  d.step_seconds = *std::max_element(seconds.begin(), seconds.end());
  return d;
}

}  // namespace hspmd::planner
