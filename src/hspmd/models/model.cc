#include "hspmd/models/model.h"

#include <numeric>
#include <sstream>

namespace hspmd::models {

std::string Model::summary() const {
  const ModelSizes s = sizes();
  std::ostringstream out;
  out << s.layers << " layers, hidden " << s.hidden << ", ";
  if (s.heads > 0) out << s.heads << " heads (" << s.kv_heads << " key/value), ";
  out << "intermediate " << s.ffn << ", vocab " << s.vocab << ", " << num_parameters(*this) << " parameters";
  return out.str();
}

std::vector<int64_t> packed_order(int64_t tokens) {
  std::vector<int64_t> order(static_cast<size_t>(tokens));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

int64_t num_parameters(const Model& model) {
  int64_t n = 0;
  for (const ParamSpec& p : model.parameters()) n += p.shape.numel();
  return n;
}

std::vector<std::pair<std::string, Shape>> parameter_shapes(const Model& model) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const ParamSpec& p : model.parameters()) out.emplace_back(p.name, p.shape);
  return out;
}

}  // namespace hspmd::models
