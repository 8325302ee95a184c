#pragma once

// Umbrella header of the planner (no LibTorch, MPI or CUDA): profiles (analytic ones too),
// platforms, plans, schedules, the validator, the simulator and the partitioners.

#include "core/analytic_profile.hpp"
#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/data_parallel.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"
