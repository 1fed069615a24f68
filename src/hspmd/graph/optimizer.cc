#include "hspmd/graph/optimizer.h"

#include <cmath>

#include "hspmd/core/error.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/reduce.h"

namespace hspmd::graph {

double clip_grad_norm(const TensorMap& grads, double max_norm) {
  double squares = 0.0;
  for (const auto& [name, g] : grads) squares += kernels::sum_squares(g);
  double total = std::sqrt(squares);
  if (max_norm > 0 && total > max_norm) {
    for (const auto& [name, g] : grads) kernels::scale(g, max_norm / total, g);
  }
  return total;
}

AdamW::AdamW(const TensorMap& params, OptimizerOptions options, Allocator* allocator) : options_(options) {
  for (const auto& [name, p] : params) {
    HSPMD_CHECK(p.dtype() == DType::kFloat32 || p.dtype() == DType::kFloat64)
        << "AdamW: parameter '" << name << "' is " << p.to_string()
        << "; the optimizer updates float32 (or float64) master weights";
    m_[name] = Tensor::zeros(p.shape(), p.dtype(), allocator);
    v_[name] = Tensor::zeros(p.shape(), p.dtype(), allocator);
  }
}

AdamW::StepInfo AdamW::step(const TensorMap& params, const TensorMap& grads) {
  HSPMD_CHECK(params.size() == m_.size()) << "AdamW: step with " << params.size() << " parameters, built for "
                                          << m_.size();
  for (const auto& [name, p] : params) {
    HSPMD_CHECK(m_.count(name)) << "AdamW: unknown parameter '" << name << "'";
    auto g = grads.find(name);
    HSPMD_CHECK(g != grads.end()) << "AdamW: no gradient for parameter '" << name << "'";
    HSPMD_CHECK(g->second.shape() == p.shape() && g->second.dtype() == p.dtype())
        << "AdamW: gradient of '" << name << "' is " << g->second.to_string() << ", parameter is " << p.to_string();
  }
  StepInfo info;
  info.step = ++step_;
  info.grad_norm = clip_grad_norm(grads, options_.max_grad_norm);
  info.lr = options_.schedule.at(step_);
  for (const auto& [name, p] : params) {
    kernels::AdamWOptions o = options_.adamw;
    o.lr = info.lr;
    if (p.rank() < 2 && !options_.decay_vectors) o.weight_decay = 0.0;
    kernels::adamw_step(p, grads.at(name), m_.at(name), v_.at(name), step_, o);
  }
  return info;
}

}  // namespace hspmd::graph
