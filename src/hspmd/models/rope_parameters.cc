#include "hspmd/models/rope_parameters.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <set>
#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd::models {

namespace {

using nlohmann::json;

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

template <typename T>
T read_value(const json& obj, const std::string& key, const std::string& where, const std::string& source) {
  try {
    return obj.at(key).get<T>();
  } catch (const json::exception&) {
    HSPMD_THROW() << source << ": key \"" << where << "\" has the wrong type (" << obj.at(key).type_name() << ")";
  }
}

RopeType parse_type(const std::string& name, const std::string& key, const std::string& source) {
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "llama3") return RopeType::kLlama3;
  if (name == "yarn") return RopeType::kYarn;
  HSPMD_THROW() << source << ": \"" << key << "\" is \"" << name
                << "\", a RoPE type hspmd does not compute (supported: default, linear, llama3, yarn)";
}

// One RoPE object: transformers >= 5 "rope_parameters" (theta inside, `theta` unused) or < 5
// "rope_scaling" (theta given by the top-level "rope_theta").
RopeParameters parse_object(const json& obj, const std::string& key, bool theta_inside, double theta,
                            const std::string& source) {
  HSPMD_CHECK(obj.is_object()) << source << ": \"" << key << "\" must be an object, got " << obj.type_name();
  RopeParameters r;
  r.theta = theta;
  std::string type_key = key + ".rope_type";
  if (present(obj, "rope_type")) {
    r.type = parse_type(read_value<std::string>(obj, "rope_type", type_key, source), type_key, source);
  } else if (present(obj, "type")) {  // the older spelling of rope_type
    type_key = key + ".type";
    r.type = parse_type(read_value<std::string>(obj, "type", type_key, source), type_key, source);
  }
  std::set<std::string> allowed{"rope_type", "type"};
  if (theta_inside) {
    allowed.insert("rope_theta");
    if (present(obj, "rope_theta")) r.theta = read_value<double>(obj, "rope_theta", key + ".rope_theta", source);
  }
  auto require = [&](const char* name, auto& out) {
    HSPMD_CHECK(present(obj, name)) << source << ": \"" << key << "\" of type " << r.type_name()
                                    << " needs \"" << name << "\"";
    out = read_value<std::decay_t<decltype(out)>>(obj, name, key + "." + name, source);
    allowed.insert(name);
  };
  auto optional = [&](const char* name, auto& out) {
    allowed.insert(name);
    if (present(obj, name)) out = read_value<std::decay_t<decltype(out)>>(obj, name, key + "." + name, source);
  };
  if (r.type != RopeType::kDefault) require("factor", r.factor);
  if (r.type == RopeType::kLlama3) {
    require("low_freq_factor", r.low_freq_factor);
    require("high_freq_factor", r.high_freq_factor);
  }
  if (r.type == RopeType::kLlama3 || r.type == RopeType::kYarn) {
    require("original_max_position_embeddings", r.original_max_position_embeddings);
  }
  if (r.type == RopeType::kYarn) {
    optional("beta_fast", r.beta_fast);
    optional("beta_slow", r.beta_slow);
    optional("truncate", r.truncate);
    optional("attention_factor", r.attention_factor);
    optional("mscale", r.mscale);
    optional("mscale_all_dim", r.mscale_all_dim);
    // transformers reads these with `or`: 0 means its default too.
    if (r.beta_fast == 0) r.beta_fast = 32.0;
    if (r.beta_slow == 0) r.beta_slow = 1.0;
  }
  // Any other key (partial_rotary_factor, attention_factor, ...) would change the frequencies.
  for (const auto& [name, value] : obj.items()) {
    HSPMD_CHECK(allowed.count(name) || value.is_null())
        << source << ": \"" << key << "." << name << "\" is not used by RoPE type " << r.type_name()
        << " as hspmd computes it; refusing rather than ignoring it";
  }
  r.validate(key);
  return r;
}

}  // namespace

std::string RopeParameters::type_name() const {
  switch (type) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kLlama3: return "llama3";
    case RopeType::kYarn: return "yarn";
  }
  return "unknown";
}

void RopeParameters::validate(const std::string& key) const {
  HSPMD_CHECK(theta > 0) << key << ": rope_theta must be positive, got " << theta;
  if (type == RopeType::kDefault) return;
  HSPMD_CHECK(factor > 0) << key << ": factor must be positive, got " << factor;
  if (type == RopeType::kYarn) {
    HSPMD_CHECK(original_max_position_embeddings > 0)
        << key << ": original_max_position_embeddings must be positive, got " << original_max_position_embeddings;
    HSPMD_CHECK(beta_fast > 0 && beta_slow > 0) << key << ": beta_fast and beta_slow must be positive";
    HSPMD_CHECK(attention_factor >= 0) << key << ": attention_factor must be positive, got " << attention_factor;
  }
  if (type != RopeType::kLlama3) return;
  HSPMD_CHECK(low_freq_factor > 0 && low_freq_factor < high_freq_factor)
      << key << ": low_freq_factor " << low_freq_factor << " must be positive and below high_freq_factor "
      << high_freq_factor;
  HSPMD_CHECK(original_max_position_embeddings > 0)
      << key << ": original_max_position_embeddings must be positive, got " << original_max_position_embeddings;
}

double RopeParameters::cos_sin_scale() const {
  if (type != RopeType::kYarn) return 1.0;
  if (attention_factor > 0) return attention_factor;
  auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  if (mscale != 0 && mscale_all_dim != 0) return get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim);
  return get_mscale(factor, 1.0);
}

namespace {

// YaRN's frequencies (transformers' _compute_yarn_parameters): pair i is interpolated (/ factor)
// below the ramp, kept above it, blended linearly across it; the ramp spans the pairs whose
// wavelength fits beta_fast .. beta_slow rotations into the original context.
std::vector<double> yarn_inverse_frequencies(const RopeParameters& r, int64_t dim) {
  const double base = r.theta, orig = static_cast<double>(r.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(orig / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers does, against a zero-width ramp
  std::vector<double> out(dim / 2);
  const float f = static_cast<float>(r.factor), b = static_cast<float>(base);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float pos_freq = std::pow(b, static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (f * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low),
                                  0.0f, 1.0f);
    const float keep = 1.0f - ramp;
    out[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  return out;
}

}  // namespace

std::vector<double> RopeParameters::inverse_frequencies(int64_t head_dim) const {
  if (type == RopeType::kYarn) return yarn_inverse_frequencies(*this, head_dim);
  // float32 arithmetic throughout, step by step as transformers' _compute_*_parameters does.
  const int64_t half = head_dim / 2;
  std::vector<double> out(half);
  const float base = static_cast<float>(theta), f = static_cast<float>(factor);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    float inv = 1.0f / std::pow(base, exponent);
    if (type == RopeType::kLinear) inv = inv / f;
    if (type == RopeType::kLlama3) {
      const float old_len = static_cast<float>(original_max_position_embeddings);
      const float low = static_cast<float>(low_freq_factor), high = static_cast<float>(high_freq_factor);
      const float low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
      const float wavelen = 2.0f * std::numbers::pi_v<float> / inv;
      float scaled = wavelen > low_freq_wavelen ? inv / f : inv;  // long wavelengths: interpolate
      if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {  // medium: blend
        const float smooth = (old_len / wavelen - low) / (high - low);
        scaled = (1.0f - smooth) * scaled / f + smooth * scaled;
      }
      inv = scaled;
    }
    out[i] = inv;
  }
  return out;
}

json RopeParameters::to_json() const {
  json j = {{"rope_type", type_name()}, {"rope_theta", theta}};
  if (type != RopeType::kDefault) j["factor"] = factor;
  if (type == RopeType::kLlama3) {
    j["low_freq_factor"] = low_freq_factor;
    j["high_freq_factor"] = high_freq_factor;
  }
  if (type == RopeType::kLlama3 || type == RopeType::kYarn) {
    j["original_max_position_embeddings"] = original_max_position_embeddings;
  }
  if (type == RopeType::kYarn) {
    j["beta_fast"] = beta_fast;
    j["beta_slow"] = beta_slow;
    j["truncate"] = truncate;
    if (attention_factor > 0) j["attention_factor"] = attention_factor;
    if (mscale != 0) j["mscale"] = mscale;
    if (mscale_all_dim != 0) j["mscale_all_dim"] = mscale_all_dim;
  }
  return j;
}

std::string RopeParameters::to_string() const {
  std::ostringstream s;
  s << type_name() << " (theta " << theta;
  if (type != RopeType::kDefault) s << ", factor " << factor;
  if (type == RopeType::kLlama3) {
    s << ", low_freq_factor " << low_freq_factor << ", high_freq_factor " << high_freq_factor
      << ", original_max_position_embeddings " << original_max_position_embeddings;
  }
  if (type == RopeType::kYarn) {
    s << ", original_max_position_embeddings " << original_max_position_embeddings << ", beta_fast " << beta_fast
      << ", beta_slow " << beta_slow << (truncate ? "" : ", not truncated") << ", cos/sin scale "
      << cos_sin_scale();
  }
  s << ")";
  return s.str();
}

RopeParameters RopeParameters::from_object(const json& object, const std::string& key, double default_theta,
                                           const std::string& source) {
  return parse_object(object, key, true, default_theta, source);
}

RopeParameters RopeParameters::from_config(const json& config, const std::string& source) {
  std::optional<RopeParameters> legacy, current;
  const bool has_theta = present(config, "rope_theta"), has_scaling = present(config, "rope_scaling");
  if (has_theta || has_scaling) {
    const double theta = has_theta ? read_value<double>(config, "rope_theta", "rope_theta", source) : 10000.0;
    if (has_scaling) {
      legacy = parse_object(config.at("rope_scaling"), "rope_scaling", false, theta, source);
    } else {
      legacy = RopeParameters{.theta = theta};
      legacy->validate("rope_theta");
    }
  }
  if (present(config, "rope_parameters")) {
    current = parse_object(config.at("rope_parameters"), "rope_parameters", true, 10000.0, source);
  }
  if (legacy && current) {
    // Only what the older keys actually say is compared: a lone "rope_theta" says nothing of scaling.
    RopeParameters said = has_scaling ? *legacy : *current;
    said.theta = has_theta ? legacy->theta : current->theta;
    HSPMD_CHECK(said == *current)
        << source << ": \"rope_parameters\" says " << current->to_string() << " but \""
        << (has_scaling ? (has_theta ? "rope_theta\"/\"rope_scaling" : "rope_scaling") : "rope_theta")
        << "\" says " << legacy->to_string() << "; they must agree (remove one of them)";
  }
  if (current) return *current;
  if (legacy) return *legacy;
  return RopeParameters{};
}

}  // namespace hspmd::models
