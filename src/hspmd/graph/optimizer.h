// AdamW on float32 master weights, with global-norm gradient clipping and a learning-rate schedule.
//
//   AdamW opt(params, {.adamw = {.beta2 = 0.95, .weight_decay = 0.1}, .max_grad_norm = 1.0,
//                      .schedule = LrSchedule::warmup_cosine({...})});
//   TensorMap grads = ...;                 // by parameter name, same shapes and dtypes
//   AdamW::StepInfo info = opt.step(params, grads);   // info.lr, info.grad_norm (before clipping)
//
// One step: (1) total = sqrt(sum over all gradients of sum of squares); if max_grad_norm > 0 and
// total > max_grad_norm, every gradient is scaled by max_grad_norm / total (in place);
// (2) lr = schedule.at(step); (3) kernels::adamw_step per parameter. Weight decay applies to
// matrices only (rank >= 2) unless decay_vectors: norm weights are not decayed, as is usual for
// decoder language-model training. State (m, v per parameter, step) is exposed for checkpoints.
#pragma once

#include <cstdint>

#include "hspmd/graph/graph.h"
#include "hspmd/graph/lr_schedule.h"
#include "hspmd/kernels/adamw.h"

namespace hspmd::graph {

struct OptimizerOptions {
  kernels::AdamWOptions adamw;   // adamw.lr is ignored: the schedule gives the rate
  double max_grad_norm = 0.0;    // 0 = no clipping
  LrSchedule schedule = LrSchedule::constant(1e-3);
  bool decay_vectors = false;    // also apply weight decay to rank-0/1 parameters
};

// Scales every gradient by max_norm / total_norm when total_norm > max_norm; returns total_norm
// (before clipping). total_norm is the L2 norm of all gradients together.
double clip_grad_norm(const TensorMap& grads, double max_norm);

class AdamW {
 public:
  struct StepInfo {
    int64_t step = 0;
    double lr = 0.0;
    double grad_norm = 0.0;  // before clipping
  };

  // m and v start at zero, shaped like each parameter (float32 or float64 only).
  AdamW(const TensorMap& params, OptimizerOptions options, Allocator* allocator = nullptr);

  // grads must hold a gradient for every parameter, same shape and dtype; clipping scales them.
  StepInfo step(const TensorMap& params, const TensorMap& grads);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }
  const TensorMap& exp_avg() const { return m_; }     // m, by parameter name
  const TensorMap& exp_avg_sq() const { return v_; }  // v, by parameter name
  const OptimizerOptions& options() const { return options_; }

 private:
  OptimizerOptions options_;
  TensorMap m_, v_;
  int64_t step_ = 0;
};

}  // namespace hspmd::graph
