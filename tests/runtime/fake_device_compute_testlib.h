// A ComputeDevice (graph/compute_device.h) for tests without a GPU: tensors on a fake device
// (core/fake_device_testlib.h: host memory that says it is cuda:3), and kernels that copy their
// inputs to the host, run the CPU kernel and copy the outputs back. Every path a GPU rank takes
// through the trainer (feeds copied in, the loss copied out, staged Reshards, host-copy
// checkpoints) then runs here, with the CPU kernels' results: a run on it equals the CPU run bit
// for bit.
//
//   DistOptions o;
//   auto memory = std::make_shared<hspmd::testing::FakeDeviceMemory>();   // one per rank
//   o.compute = [memory](int) { return fake_device_compute(memory); };
//   memory->to_device;                                                     // copies it received
//
// Its copy_region packs Reshards on the device when the communicators move device memory
// (DistOptions::comm_on_device): over Gloo here, which can, since the fake's memory is the host's.
#pragma once

#include <memory>

#include "core/fake_device_testlib.h"
#include "hspmd/graph/compute_device.h"

namespace hspmd::runtime::testing {

graph::ComputeDevice fake_device_compute(std::shared_ptr<hspmd::testing::FakeDeviceMemory> memory);

}  // namespace hspmd::runtime::testing
