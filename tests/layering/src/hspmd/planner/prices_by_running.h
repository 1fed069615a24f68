// A planner header that breaks the layering on purpose: the test layers_include_check_refuses runs
// cmake/check_layer_includes.cmake on this tree and expects it to name the include of the runtime
// (the planner prices strategies without running them) and to accept the one of specialize. Never
// compiled.
#pragma once

#include "hspmd/runtime/trainer.h"
#include "hspmd/specialize/schedule.h"
