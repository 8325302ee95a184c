#pragma once

#include "core/chain.hpp"
#include "remat/rotor.hpp"
#include "schedule/stage.hpp"

#include <map>
#include <utility>
#include <vector>

namespace madpipe::partition {

// Stage boundaries and the GPU of each stage, before any schedule exists.
struct Allocation {
  std::vector<int> first_layers;   // ascending, starts at 0
  std::vector<int> gpus;           // one per stage
  double estimated_period_ms = 0;  // what the partitioner expected
  // Rematerialization chosen for stages, by (first, last) layer: a stage whose range is not here
  // (or changed) runs plain.
  std::map<std::pair<int, int>, remat::RematOption> remat;
};

bool operator==(const Allocation& a, const Allocation& b);

std::vector<schedule::Stage> stages_of(const ChainCosts& costs, const Allocation& allocation);

// Makes `stage` run `option`: its effective times and memory, the sequence, remat "rotor" when it
// recomputes and offload "host" when it offloads.
void apply_remat(schedule::Stage& stage, const remat::RematOption& option);

// C(l) of the thesis: time to send a_l and receive delta_l over one link. The DPs cut the chain
// before they know which GPUs a cut links: this is over the slowest link of the platform.
double link_ms(const ChainCosts& costs, int layer, const Platform& platform);

// C(l) over the fastest link of the platform: what any allocation that cuts after layer l pays
// at least (lower bounds).
double fastest_link_ms(const ChainCosts& costs, int layer, const Platform& platform);

// On a platform whose links differ (multi-node, has_uniform_links() false): the allocation with
// its GPUs renumbered so that the GPUs that exchange the most bytes share a node, when that
// shortens its slowest link (the busiest GPU pair's transfer time), or at equal slowest link,
// their sum. Stage boundaries do not move. Otherwise the allocation as it is.
Allocation place_on_nodes(const ChainCosts& costs, const Platform& platform,
                          const Allocation& allocation);

}  // namespace madpipe::partition
