// Profiler: measures this host (or emulated devices on it) and fits the coefficients of a Profile
// (planner/profile.h). What `hspmd profile` runs. It sits above the planner and the runtime: it
// measures the trainer the cost model prices, so the planner itself never needs the runtime.
//
//   planner::Profile p = profile_host(*load_model(path), {.model = path,
//                                     .progress = [](const std::string& line) { std::cerr << line; }});
//   write(p.to_json_text())
//
// Compute: for each TP degree t (ranks as threads of this process, one kernel thread each, Gloo
// between them, as in training), sequence length s and micro-batch size b, one training step of a
// single-stage TP-t pipeline is timed (median of `repeats` steps, in three passes over all points
// when repeats >= 6) for a model of 1
// and of 3 decoder layers. Times are CPU times of rank 0's thread (its kernels run on it): builds
// or other ranks sharing the host's cores inflate them little, and waiting for a TP peer is not in
// them (the TP collectives are not either: the cost model adds them from the measured links). Each
// step's time is split into its compute (what runtime::ComputePacer brackets and an emulated
// device stretches: forward, backward, gradient accumulation, optimizer) and the rest (dispatch,
// data, communication calls). The step's post phase (gradient sync, clipping norm, AdamW: "post",
// per parameter, from the trace of the 3-layer model at the lowest TP degree) is taken out, since it
// runs once per step, not per micro-batch:
//   layer = (T3 - T1) / 2 - post of one layer's shard   (one decoder layer's forward + backward)
//   ends  = T1 - layer - post of the 1-layer model       (embedding, head, loss, the step's fixed costs)
// layer is fitted to b (a s^2 + c1 s) + c0, ends to per_token * b s + constant (least squares with
// non-negative coefficients). TP degrees above the host's cores are not profiled: their ranks
// would share cores and the figure would measure the sharing.
// Context parallelism: for each CP degree c, single-stage CP-c steps at TP 1 (c ranks, the zigzag
// layout, the K/V all-gathers) are timed on the same sequence lengths and micro-batch sizes, rank
// 0's CPU time as above (its waits for CP peers are not in it), and its layer and ends fitted as
// functions of the whole padded sequence (planner::CpProfile): what one CP rank computes, measured,
// instead of a TP layer divided by c. Its waits are then measured apart, per kind: CP-c steps of the
// 3-layer model with every rank running as that kind (paced), the wall time of their in-pass
// Reshards per layer less the K/V collectives' ring time on the measured link
// (CpProfile::lockstep_seconds_per_layer: the group's waits for its slowest rank at each collective,
// the index Reshards). Not on devices, whose steps' wall time is all compute.
// Emulated devices (runtime/emulation.h): each distinct device name becomes a kind whose compute is
// the host's divided by its speed, plus the host's rest at the host's speed, which is what the
// runtime does; its optimizer_seconds_per_parameter is the post phase's divided by the speed. Compute paced
// into bursts between sleeps can take more CPU time than back to back (caches used by others
// meanwhile): each kind's compute is scaled by the ratio measured once running as that kind.
// Memory: the runtime's own estimate (specialize/memory_estimate.h), the figure it refuses a plan
// on, evaluated on the executable graphs of 1- and 2-layer models at two token counts and one or
// two micro-batches in flight, without and with ZeRO-1, and solved for the Profile's coefficients.
// Links: two thread ranks over Gloo: ping-pong and all-reduce of 4 KiB (latency) and 16 MiB
// (bandwidth), reported as the "intra-node" tier (one host).
//
// On devices (`on_devices`: GPUs, tuning/profiled_devices.h) the same grid and fits, with these
// differences: rank r computes on device r (TP degrees up to the devices there are; default
// sequence lengths 512, 1024, 2048), its Reshards on device buffers over the devices'
// communicators (NCCL); a step's time is its wall time up to the device's having finished it
// (the kernels run asynchronously, so the host thread's CPU time says nothing), all of it compute.
// The post phase cannot be seen apart on the host (the kernels run behind it): it is a step of one
// micro-batch less the difference between steps of two and of one (the 3-layer model, longest
// sequences, largest micro-batch, lowest TP degree). Memory adds what the device says: `memory_bytes` (its total),
// `reserved_bytes` (what the driver counts as used beyond the rank's pool after the steps: the
// CUDA context, cuBLASLt's and the communicators' buffers, the pool's rounding), and the host <->
// device copy rates of 64 MiB through the device's allocator (pageable host memory, as the
// trainer's feeds and checkpoints). Links: ping-pong and all-reduce between devices 0 and 1 of 4 KiB
// and 64 MiB device buffers, when there are two; with one, the profile has no link tier and the
// planner takes the cluster spec's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hspmd/core/dtype.h"
#include "hspmd/models/model.h"
#include "hspmd/planner/profile.h"
#include "hspmd/runtime/compute_pacer.h"
#include "hspmd/runtime/emulation.h"
#include "hspmd/tuning/profiled_devices.h"
#include "hspmd/tuning/time_fit.h"

namespace hspmd::tuning {

struct ProfilerOptions {
  std::string model;                      // named in the profile
  std::vector<int> tp_degrees;            // empty: powers of two up to the host's cores (or the devices)
                                          // that divide the model
  std::vector<int> cp_degrees;            // CP degrees (> 1) to measure at TP 1; empty: powers of two from 2
                                          // up to the host's cores (or the devices); {1}: none
  std::vector<int64_t> seq_lens;          // empty: 64, 128, 256 (on devices 512, 1024, 2048), capped by
                                          // max_position_embeddings
  std::vector<int> micro_batch_sizes{1, 2};
  int repeats = 3;                        // timed steps per point (their median counts)
  std::string kind = "cpu";               // the device kind without emulated devices
  const runtime::EmulatedDevices* devices = nullptr;  // kinds by device name, times / speed
  // Measure these devices (GPUs) instead of the host's cores; their kind is `kind`. Not with `devices`.
  const ProfiledDevices* on_devices = nullptr;
  DType precision = DType::kFloat32;      // of the timed training steps (`hspmd train --precision`)
  std::function<void(const std::string&)> progress;  // one line per measurement
};

planner::Profile profile_host(const models::Model& model, const ProfilerOptions& options);

}  // namespace hspmd::tuning
