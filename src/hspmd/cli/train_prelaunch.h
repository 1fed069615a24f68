// What `hspmd train --nproc N` checks before it starts any worker: every plan the run may train
// under (the --strategy, each --switch STEP:FILE, each --strategy-for-max-len MAXLEN:FILE) is
// deduced, laid out, scheduled and resolved, as `hspmd explain` does, and every switch between
// consecutive plans is planned, so a strategy that cannot run is refused once, in one line naming
// the flag, instead of by every worker:
//
//   hspmd: error: --switch 3:b.json: strategy b cannot run: tensor model.embed_tokens.weight.grad: ...
#pragma once

#include "hspmd/cli/train_args.h"
#include "hspmd/cli/train_dispatch.h"
#include "hspmd/models/model.h"

namespace hspmd::cli {

// Error naming the flag and strategy at fault; `by_length` is null without dispatch by length.
void resolve_before_launch(const TrainArgs& args, const models::Model& model, const LengthDispatchRun* by_length);

}  // namespace hspmd::cli
