// Random strategies over the tiny test model (dist_run_testlib.h: 4 layers, 4 heads, 2 key/value
// heads), for tests that every strategy the annotations express either trains like one process or
// is refused before launch with a reason.
//
//   std::mt19937 rng(seed);
//   GeneratedCase c = generate_case(rng);   // strategies a (steps 1-2) and b (from step 3), options
//   c.describe();                           // one line: seed-independent text of both strategies
//
// What varies: 2 to 6 ranks; 1 to 3 pipelines (a DS union whose members differ) of 1 to 4 stages
// each, with uneven layer splits; per stage TP 1 or 2 and CP 1, 2 or 4 (often a CP that differs
// from the pipeline's other stages; sometimes a TP of 3 or 4 that the heads do not divide, which
// must be refused, with a reason); micro-batch sizes and counts per pipeline; ZeRO-1; recompute;
// tied or untied embeddings; GPipe or 1F1B; float32 or bf16. Strategy b is generated the same way
// on at most as many ranks (a rank it leaves out waits as a spare).
#pragma once

#include <random>
#include <string>

#include "hspmd/core/dtype.h"
#include "hspmd/sharding/strategy.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::runtime::testing {

struct GeneratedCase {
  sharding::Strategy a, b;
  bool tied = false;
  DType precision = DType::kFloat32;
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
  std::string describe() const;
};

// One random strategy on ranks 0..world-1 (every rank used).
sharding::Strategy generate_strategy(std::mt19937& rng, int world, const std::string& name);
GeneratedCase generate_case(std::mt19937& rng);

// What `hspmd train` checks before it starts workers, on the test model: the strategy compiles to
// an annotation plan, and that plan deduces, lays out, schedules and resolves (as `hspmd explain`).
// "" when it would run, else the error.
std::string refusal_before_launch(const sharding::Strategy& st, bool tied, specialize::ScheduleKind schedule,
                                  int64_t seq_len);

}  // namespace hspmd::runtime::testing
