#include "hspmd/planner/profile.h"

#include <nlohmann/json.hpp>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"

namespace hspmd::planner {

namespace {

using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;

constexpr const char* kFormat = "hspmd-profile/1";

double number(const Json& j, const std::string& key, const std::string& where, bool required = true) {
  if (!j.contains(key)) {
    HSPMD_CHECK(!required) << where << ": missing required key \"" << key << "\"";
    return 0;
  }
  HSPMD_CHECK(j[key].is_number()) << where << "." << key << ": expected a number, got " << j[key].dump();
  const double v = j[key].get<double>();
  HSPMD_CHECK(v >= 0 || key == "c0" || key == "constant")
      << where << "." << key << ": expected a non-negative number, got " << v;
  return v;
}

std::string text(const Json& j, const std::string& key, const std::string& where) {
  const Json& v = json_member(j, key, where);
  HSPMD_CHECK(v.is_string()) << where << "." << key << ": expected a string, got " << v.dump();
  return v.get<std::string>();
}

// A TP or CP entry's "layer" fit (a s^2 + c1 s + c0) and "ends" fit, errors naming `where`.
LayerTimeFit layer_fit(const Json& j, const std::string& where) {
  const Json& layer = json_member(j, "layer", where);
  return {number(layer, "a", where + ".layer"), number(layer, "c1", where + ".layer"),
          number(layer, "c0", where + ".layer")};
}

LinearFit ends_fit(const Json& j, const std::string& where) {
  const Json& ends = json_member(j, "ends", where);
  return {number(ends, "per_token", where + ".ends"), number(ends, "constant", where + ".ends")};
}

// A degree key of "tp" or "cp" ("2"): a positive integer, or an error naming `where`.
int degree_key(const std::string& key, const char* what, const std::string& where) {
  int d = 0;
  try {
    size_t used = 0;
    d = std::stoi(key, &used);
    HSPMD_CHECK(used == key.size()) << "trailing text";
  } catch (const std::exception&) {
    HSPMD_THROW() << where << ": the key must be a " << what << " degree (a positive integer)";
  }
  HSPMD_CHECK(d > 0) << where << ": the " << what << " degree must be positive";
  return d;
}

}  // namespace

const DeviceKindProfile& Profile::kind(const std::string& name) const {
  auto it = devices.find(name);
  if (it != devices.end()) return it->second;
  std::string known;
  for (const auto& [k, _] : devices) known += (known.empty() ? "" : ", ") + k;
  HSPMD_THROW() << "profile (" << source << ") has no device kind \"" << name << "\"; it has: " << known
                << " (profile the kind, or name it as the cluster spec's \"type\")";
}

bool Profile::has(const std::string& kind_name, int tp) const {
  auto it = devices.find(kind_name);
  return it != devices.end() && it->second.tp.count(tp) > 0;
}

const CpProfile* Profile::cp(const std::string& kind_name, int degree) const {
  auto it = devices.find(kind_name);
  if (it == devices.end()) return nullptr;
  auto c = it->second.cp.find(degree);
  return c == it->second.cp.end() ? nullptr : &c->second;
}

const TpProfile& Profile::at(const std::string& kind_name, int tp) const {
  const DeviceKindProfile& k = kind(kind_name);
  auto it = k.tp.find(tp);
  if (it != k.tp.end()) return it->second;
  std::string known;
  for (const auto& [t, _] : k.tp) known += (known.empty() ? "" : ", ") + std::to_string(t);
  HSPMD_THROW() << "profile (" << source << "): device kind \"" << kind_name << "\" was not profiled at TP " << tp
                << "; profiled degrees: " << known;
}

std::optional<LinkProfile> Profile::link(const std::string& tier) const {
  auto it = links.find(tier);
  if (it == links.end()) return std::nullopt;
  return it->second;
}

std::string Profile::to_json_text() const {
  OJson j;
  j["format"] = kFormat;
  j["source"] = source;
  j["model"] = model;
  j["layer_includes_tp_comm"] = layer_includes_tp_comm;
  if (activations_sequence_parallel) j["activations_sequence_parallel"] = true;
  j["devices"] = OJson::object();
  for (const auto& [name, k] : devices) {
    OJson kj;
    kj["optimizer_seconds_per_parameter"] = k.optimizer_seconds_per_parameter;
    kj["bytes_per_parameter"] = k.bytes_per_parameter;
    kj["zero_bytes_per_parameter"] = k.zero_bytes_per_parameter;
    kj["reserved_bytes"] = k.reserved_bytes;
    kj["activation_element_bytes"] = k.activation_element_bytes;
    // Measured on a device only: absent from host and derived profiles, which keep their old text.
    if (k.memory_bytes != 0) kj["memory_bytes"] = k.memory_bytes;
    if (k.host_to_device_bandwidth != 0) kj["host_to_device_bandwidth"] = k.host_to_device_bandwidth;
    if (k.device_to_host_bandwidth != 0) kj["device_to_host_bandwidth"] = k.device_to_host_bandwidth;
    kj["tp"] = OJson::object();
    for (const auto& [t, p] : k.tp) {
      OJson tj;
      tj["layer"] = {{"a", p.layer.a}, {"c1", p.layer.c1}, {"c0", p.layer.c0}};
      tj["ends"] = {{"per_token", p.ends.per_token}, {"constant", p.ends.constant}};
      tj["activations"] = {{"keep_per_token", p.activations.keep_per_token},
                           {"keep_per_token2", p.activations.keep_per_token2},
                           {"transient_per_token", p.activations.transient_per_token},
                           {"ends_keep_per_token", p.activations.ends_keep_per_token},
                           {"ends_transient_per_token", p.activations.ends_transient_per_token}};
      tj["samples"] = p.samples;
      tj["fit_error"] = p.fit_error;
      kj["tp"][std::to_string(t)] = tj;
    }
    // Absent when not measured, so profiles without CP keep their text.
    for (const auto& [c, p] : k.cp) {
      OJson cj;
      cj["layer"] = {{"a", p.layer.a}, {"c1", p.layer.c1}, {"c0", p.layer.c0}};
      cj["ends"] = {{"per_token", p.ends.per_token}, {"constant", p.ends.constant}};
      cj["samples"] = p.samples;
      cj["fit_error"] = p.fit_error;
      cj["lockstep_seconds_per_layer"] = p.lockstep_seconds_per_layer;
      kj["cp"][std::to_string(c)] = cj;
    }
    j["devices"][name] = kj;
  }
  j["links"] = OJson::object();
  for (const auto& [tier, l] : links) {
    j["links"][tier] = {{"p2p_bandwidth", l.p2p_bandwidth},
                        {"allreduce_bandwidth", l.allreduce_bandwidth},
                        {"latency", l.latency}};
  }
  return j.dump(2) + "\n";
}

Profile Profile::from_json_text(const std::string& json_text, const std::string& src) {
  const Json j = parse_json_object(json_text, src);
  HSPMD_CHECK(text(j, "format", src) == kFormat)
      << src << ".format: expected \"" << kFormat << "\", got \"" << j["format"].get<std::string>() << "\"";
  Profile p;
  p.source = text(j, "source", src);
  p.model = j.contains("model") ? text(j, "model", src) : "";
  if (j.contains("layer_includes_tp_comm")) {
    HSPMD_CHECK(j["layer_includes_tp_comm"].is_boolean()) << src << ".layer_includes_tp_comm: expected true or false";
    p.layer_includes_tp_comm = j["layer_includes_tp_comm"].get<bool>();
  }
  if (j.contains("activations_sequence_parallel")) {
    HSPMD_CHECK(j["activations_sequence_parallel"].is_boolean())
        << src << ".activations_sequence_parallel: expected true or false";
    p.activations_sequence_parallel = j["activations_sequence_parallel"].get<bool>();
  }
  const Json& devs = json_member(j, "devices", src);
  HSPMD_CHECK(devs.is_object() && !devs.empty()) << src << ".devices: expected a non-empty object keyed by device kind";
  for (const auto& [name, kj] : devs.items()) {
    const std::string kw = src + ".devices." + name;
    DeviceKindProfile k;
    k.optimizer_seconds_per_parameter = number(kj, "optimizer_seconds_per_parameter", kw, false);
    k.bytes_per_parameter = number(kj, "bytes_per_parameter", kw);
    k.zero_bytes_per_parameter = number(kj, "zero_bytes_per_parameter", kw);
    k.reserved_bytes = number(kj, "reserved_bytes", kw, false);
    k.activation_element_bytes = kj.contains("activation_element_bytes")
                                     ? number(kj, "activation_element_bytes", kw)
                                     : 4.0;
    k.memory_bytes = number(kj, "memory_bytes", kw, false);
    k.host_to_device_bandwidth = number(kj, "host_to_device_bandwidth", kw, false);
    k.device_to_host_bandwidth = number(kj, "device_to_host_bandwidth", kw, false);
    const Json& tps = json_member(kj, "tp", kw);
    HSPMD_CHECK(tps.is_object() && !tps.empty()) << kw << ".tp: expected a non-empty object keyed by TP degree";
    for (const auto& [degree, tj] : tps.items()) {
      const std::string tw = kw + ".tp." + degree;
      const int t = degree_key(degree, "TP", tw);
      TpProfile tp;
      tp.layer = layer_fit(tj, tw);
      tp.ends = ends_fit(tj, tw);
      const Json& act = json_member(tj, "activations", tw);
      const std::string aw = tw + ".activations";
      tp.activations = {number(act, "keep_per_token", aw), number(act, "keep_per_token2", aw, false),
                        number(act, "transient_per_token", aw, false), number(act, "ends_keep_per_token", aw, false),
                        number(act, "ends_transient_per_token", aw, false)};
      tp.samples = static_cast<int>(number(tj, "samples", tw, false));
      tp.fit_error = number(tj, "fit_error", tw, false);
      k.tp[t] = tp;
    }
    if (kj.contains("cp")) {
      const Json& cps = kj["cp"];
      HSPMD_CHECK(cps.is_object()) << kw << ".cp: expected an object keyed by CP degree";
      for (const auto& [degree, cj] : cps.items()) {
        const std::string cw = kw + ".cp." + degree;
        const int c = degree_key(degree, "CP", cw);
        HSPMD_CHECK(c > 1) << cw << ": a CP degree must be at least 2";
        CpProfile cp;
        cp.layer = layer_fit(cj, cw);
        cp.ends = ends_fit(cj, cw);
        cp.samples = static_cast<int>(number(cj, "samples", cw, false));
        cp.fit_error = number(cj, "fit_error", cw, false);
        cp.lockstep_seconds_per_layer = number(cj, "lockstep_seconds_per_layer", cw, false);
        k.cp[c] = cp;
      }
    }
    p.devices[name] = k;
  }
  if (j.contains("links")) {
    const Json& links = j["links"];
    HSPMD_CHECK(links.is_object()) << src << ".links: expected an object keyed by link tier";
    for (const auto& [tier, lj] : links.items()) {
      const std::string lw = src + ".links." + tier;
      HSPMD_CHECK(tier == "intra-node" || tier == "inter-node")
          << lw << ": unknown link tier (expected \"intra-node\" or \"inter-node\")";
      LinkProfile l{number(lj, "p2p_bandwidth", lw), number(lj, "allreduce_bandwidth", lw),
                    number(lj, "latency", lw, false)};
      HSPMD_CHECK(l.p2p_bandwidth > 0 && l.allreduce_bandwidth > 0) << lw << ": bandwidths must be positive";
      p.links[tier] = l;
    }
  }
  return p;
}

Profile Profile::from_file(const std::string& path) {
  return from_json_text(read_text_file(path, "profile"), path);
}

}  // namespace hspmd::planner
