// Fault injection for the elastic-training tests and demo: a worker kills itself with SIGKILL
// (exactly what `kill -9` does) at a named point of a named step, so a failure can be placed in
// forward, backward, gradient sync, the optimizer step, a checkpoint save or a switch, which an
// external `kill -9` could only hit by chance.
//
//   HSPMD_FAULT="2:4:backward"                 rank 2 dies in the backward pass of step 4
//   HSPMD_FAULT="2:4:backward,1:7:grad-sync"   two failures in one run
//   HSPMD_FAULT="2:4:backward:stop"            rank 2 stops itself (SIGSTOP): a hung process
//
// Steps count from 1 (the step being run). Points: forward, backward, grad-sync, optimizer,
// save, switch. A worker the launcher restarted (HSPMD_RESTART_COUNT > 0) never faults again.
#pragma once

#include <string>

namespace hspmd::runtime {

// Dies by SIGKILL (or stops, with ":stop") when HSPMD_FAULT names (rank, step, point). `step` is the step being run.
void fault_point(int rank, int64_t step, const std::string& point);

// Error naming the entry at fault when HSPMD_FAULT is set but malformed (checked at start-up).
void check_fault_spec();

}  // namespace hspmd::runtime
