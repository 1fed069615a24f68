#include "hspmd/planner/run_trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/core/nearest_name.h"
#include "hspmd/data/long_tailed.h"
#include "hspmd/sharding/device_group.h"

namespace hspmd::planner {

namespace {

using Json = nlohmann::json;

// A misspelled key ("retrun") would silently simulate another trace than the one written.
void check_keys(const Json& j, const std::vector<std::string>& known, const std::string& where) {
  HSPMD_CHECK(j.is_object()) << where << ": expected a JSON object, got " << j.dump();
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string near = nearest_name(key, known);
    HSPMD_THROW() << where << ": unknown key \"" << key << "\"" << (near.empty() ? "" : " (did you mean \"" + near + "\"?)");
  }
}

int64_t positive(const Json& j, const std::string& key, const std::string& where) {
  const Json& v = json_member(j, key, where);
  HSPMD_CHECK(v.is_number_integer() && v.get<int64_t>() > 0)
      << where << "." << key << ": expected a positive integer, got " << v.dump();
  return v.get<int64_t>();
}

double non_negative_number(const Json& j, const std::string& key, const std::string& where) {
  const Json& v = json_member(j, key, where);
  HSPMD_CHECK(v.is_number() && v.get<double>() >= 0) << where << "." << key << ": expected a number >= 0, got " << v.dump();
  return v.get<double>();
}

std::vector<int> ranks(const Json& v, const std::string& where, int num_devices) {
  std::vector<int> out;
  try {
    if (v.is_string()) {
      out = sharding::DeviceGroup::parse("[" + v.get<std::string>() + "]").devices();
    } else {
      HSPMD_CHECK(v.is_array()) << "expected a string like \"40-47\" or an array of ints, got " << v.dump();
      for (const Json& r : v) {
        HSPMD_CHECK(r.is_number_integer()) << "expected an int rank, got " << r.dump();
        out.push_back(r.get<int>());
      }
    }
  } catch (const Error& e) {
    HSPMD_THROW() << where << ": " << e.what();
  }
  for (int r : out) {
    HSPMD_CHECK(r >= 0 && r < num_devices) << where << ": rank " << r << " is not in the cluster (" << num_devices
                                           << " devices)";
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Consecutive lognormal documents, each step's within `tokens` (at least one document a step).
std::vector<std::vector<int64_t>> drawn_batches(const data::LongTailedOptions& drawn, int64_t steps, int64_t tokens) {
  const double mean = std::min(drawn.median * std::exp(drawn.sigma * drawn.sigma / 2), double(drawn.max_length));
  data::LongTailedOptions o = drawn;
  o.documents = static_cast<uint64_t>(static_cast<double>(steps) * (static_cast<double>(tokens) / mean + 1) * 1.5) + 16;
  for (;;) {
    // Document d's length depends on (seed, d) alone, so a longer draw extends a shorter one.
    const std::vector<int64_t> lengths = data::long_tailed_lengths(o);
    std::vector<std::vector<int64_t>> out;
    size_t next = 0;
    while (static_cast<int64_t>(out.size()) < steps && next < lengths.size()) {
      std::vector<int64_t> batch{lengths[next++]};
      int64_t sum = batch.front();
      while (next < lengths.size() && sum + lengths[next] <= tokens) {
        sum += lengths[next];
        batch.push_back(lengths[next++]);
      }
      // A batch cut short by the end of the draw is drawn again, longer.
      if (next == lengths.size()) break;
      out.push_back(std::move(batch));
    }
    if (static_cast<int64_t>(out.size()) == steps) return out;
    o.documents *= 2;
  }
}

}  // namespace

std::vector<int64_t> RunTrace::lengths_of(int64_t step) const {
  if (mixed_lengths()) return batches.at(static_cast<size_t>(step));
  return std::vector<int64_t>(static_cast<size_t>(global_batch), seq_len);
}

int64_t RunTrace::tokens_of(int64_t step) const {
  if (!mixed_lengths()) return global_batch * seq_len;
  int64_t sum = 0;
  for (int64_t l : batches.at(static_cast<size_t>(step))) sum += l;
  return sum;
}

std::vector<std::pair<int64_t, uint64_t>> RunTrace::length_counts() const {
  std::map<int64_t, uint64_t> counts;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t l : lengths_of(s)) ++counts[l];
  }
  return {counts.begin(), counts.end()};
}

RunTrace RunTrace::from_json_text(const std::string& text, const std::string& source, int num_devices) {
  const Json j = parse_json_object(text, source);
  check_keys(j, {"name", "comment", "steps", "seq_len", "global_batch", "batches", "events", "checkpoint"}, source);
  RunTrace t;
  t.source = source;
  t.name = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : source;
  t.seq_len = positive(j, "seq_len", source);
  HSPMD_CHECK(j.contains("global_batch") != j.contains("batches"))
      << source << ": give either \"global_batch\" (sequences of seq_len tokens per step) or \"batches\" (mixed "
      << "lengths), not " << (j.contains("batches") ? "both" : "neither");
  if (j.contains("global_batch")) {
    t.steps = positive(j, "steps", source);
    t.global_batch = positive(j, "global_batch", source);
  } else {
    const std::string bw = source + ".batches";
    const Json& b = j["batches"];
    check_keys(b, {"long_tailed", "global_batch_tokens", "lengths", "comment"}, bw);
    HSPMD_CHECK(b.contains("long_tailed") != b.contains("lengths"))
        << bw << ": give either \"long_tailed\" (with \"global_batch_tokens\") or \"lengths\" (one list per step)";
    if (b.contains("lengths")) {
      const Json& lists = b["lengths"];
      HSPMD_CHECK(lists.is_array() && !lists.empty()) << bw << ".lengths: expected a non-empty array of arrays";
      for (size_t s = 0; s < lists.size(); ++s) {
        const std::string sw = bw + ".lengths[" + std::to_string(s) + "]";
        HSPMD_CHECK(lists[s].is_array() && !lists[s].empty()) << sw << ": expected a non-empty array of lengths";
        std::vector<int64_t> batch;
        for (const Json& l : lists[s]) {
          HSPMD_CHECK(l.is_number_integer() && l.get<int64_t>() > 0 && l.get<int64_t>() <= t.seq_len)
              << sw << ": expected lengths in [1, seq_len = " << t.seq_len << "], got " << l.dump();
          batch.push_back(l.get<int64_t>());
        }
        t.batches.push_back(std::move(batch));
      }
      t.steps = static_cast<int64_t>(t.batches.size());
      HSPMD_CHECK(!j.contains("steps") || positive(j, "steps", source) == t.steps)
          << source << ".steps: " << j["steps"].dump() << " but batches.lengths lists " << t.steps << " steps";
    } else {
      t.steps = positive(j, "steps", source);
      t.global_batch_tokens = positive(b, "global_batch_tokens", bw);
      const std::string lw = bw + ".long_tailed";
      const Json& lt = b["long_tailed"];
      check_keys(lt, {"median", "sigma", "seed", "comment"}, lw);
      data::LongTailedOptions o{.median = non_negative_number(lt, "median", lw),
                                .max_length = t.seq_len,
                                .sigma = lt.contains("sigma") ? non_negative_number(lt, "sigma", lw) : 1.0,
                                .seed = lt.contains("seed") ? static_cast<uint64_t>(non_negative_number(lt, "seed", lw)) : 0};
      HSPMD_CHECK(o.median >= 2) << lw << ".median: expected at least 2 tokens, got " << o.median;
      t.batches = drawn_batches(o, t.steps, t.global_batch_tokens);
    }
  }
  if (j.contains("checkpoint")) {
    const std::string cw = source + ".checkpoint";
    check_keys(j["checkpoint"], {"every", "restore_seconds", "comment"}, cw);
    t.checkpoint_every = positive(j["checkpoint"], "every", cw);
    t.restore_seconds = non_negative_number(j["checkpoint"], "restore_seconds", cw);
  }
  if (j.contains("events")) {
    const Json& events = j["events"];
    HSPMD_CHECK(events.is_array()) << source << ".events: expected an array";
    for (size_t i = 0; i < events.size(); ++i) {
      const std::string ew = source + ".events[" + std::to_string(i) + "]";
      check_keys(events[i], {"step", "lose", "return", "comment"}, ew);
      TraceEvent e;
      const Json& step = json_member(events[i], "step", ew);
      HSPMD_CHECK(step.is_number_integer() && step.get<int64_t>() >= 0 && step.get<int64_t>() < t.steps)
          << ew << ".step: expected a step in [0, " << t.steps << "), got " << step.dump();
      e.step = step.get<int64_t>();
      if (events[i].contains("lose")) e.lose = ranks(events[i]["lose"], ew + ".lose", num_devices);
      if (events[i].contains("return")) e.give_back = ranks(events[i]["return"], ew + ".return", num_devices);
      HSPMD_CHECK(!e.lose.empty() || !e.give_back.empty()) << ew << ": an event loses or returns ranks";
      HSPMD_CHECK(t.events.empty() || t.events.back().step <= e.step)
          << ew << ".step: events must be in increasing step order (" << e.step << " after " << t.events.back().step << ")";
      t.events.push_back(std::move(e));
    }
  }
  return t;
}

RunTrace RunTrace::from_file(const std::string& path, int num_devices) {
  return from_json_text(read_text_file(path, "trace file"), path, num_devices);
}

}  // namespace hspmd::planner
