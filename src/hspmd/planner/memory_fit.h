// A Profile's memory coefficients (planner/profile.h) from the runtime's own memory estimate
// (specialize/memory_estimate.h, the figure `hspmd train` refuses a plan on), evaluated on the
// executable graphs of one-stage plans of 1- and 2-layer versions of the model, without running
// anything: `hspmd profile` writes them (tuning/profiler.h), and the cost model's tests price
// strategies with them to compare with the estimate of each rank.
//
//   DeviceKindProfile k;
//   fit_state_bytes(model, 1, k);                 // bytes_per_parameter, zero_bytes_per_parameter
//   k.tp[2].activations = fit_activations(model, 2);
#pragma once

#include "hspmd/models/model.h"
#include "hspmd/planner/profile.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::planner {

// One pipeline per replica of one TP-tp stage holding `layers` layers, `micro_batches` micro-batches
// of `micro_batch_size`; `pipelines` of them under ZeRO-1 when `zero1`.
sharding::Strategy single_stage_strategy(int tp, int layers, int micro_batch_size, int pipelines = 1,
                                         bool zero1 = false, int micro_batches = 1);

// The activation coefficients at TP degree tp: what a micro-batch keeps per layer and token (and
// token^2), its transient values, and the ends', from 1- and 2-layer models at 128 and 256 tokens
// with one and two micro-batches in flight.
ActivationFit fit_activations(const models::Model& model, int tp);

// Bytes per parameter of the training state, without and with ZeRO-1 (over 2 replicas): the states
// of the 1-layer model over rank 0's parameters at TP degree tp.
void fit_state_bytes(const models::Model& model, int tp, DeviceKindProfile& kind);

}  // namespace hspmd::planner
