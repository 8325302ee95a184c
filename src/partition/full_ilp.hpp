#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "solver/solve.hpp"

#include <optional>
#include <string>
#include <vector>

namespace madpipe::partition {

struct ScheduledStages {
  std::vector<schedule::Stage> stages;
  schedule::Pattern pattern;
};

struct FullIlpOptions {
  std::string backend = "cbc";
  solver::SolveOptions solve{};
  // A 1-periodic plan of the same chain: the MIP start and the period to beat.
  std::optional<ScheduledStages> warm_start;
  double period_lower_bound_ms = 0;
  std::string mps_path;  // also write the model there (MPS) before solving
};

struct FullIlpResult {
  std::optional<ScheduledStages> plan;  // the solver's incumbent, valid and within memory
  solver::SolveResult solve;            // values dropped
  bool warm_started = false;
};

// The ILP of thesis ch. 6: allocation of every layer to a GPU (non-contiguous allowed) together
// with a 1-periodic pattern, exact memory; layers with a split backward get W nodes. Layers that
// the solution runs back to back on one GPU are merged into one stage when that costs neither
// period nor memory. Throws Error(Unsupported) when the backend is not built.
FullIlpResult full_ilp(const ChainCosts& costs, const Platform& platform,
                       const FullIlpOptions& options);

// One stage per layer running `scheduled`: each stage's F, B and W become back-to-back ops of its
// layers with the stage's shift (F in layer order, B and W in reverse; W of the layers that split).
// With whole backwards memory never grows: a layer's activations are in flight for a sub-interval
// of its stage's. A split layer holds its weight_kept_bytes from the end of its own B, before
// its stage's B ends: where they exceed its stored_bytes the start may not fit, and the solver
// drops it.
ScheduledStages expand_to_layers(const ChainCosts& costs, const ScheduledStages& scheduled);

// Merges neighbouring stages on one GPU whose merge keeps the period and fits memory.
ScheduledStages merge_stages(const ChainCosts& costs, const Platform& platform,
                             ScheduledStages scheduled);

}  // namespace madpipe::partition
