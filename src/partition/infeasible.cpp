#include "partition/infeasible.hpp"

#include "core/chain.hpp"
#include "core/units.hpp"

std::string madpipe::partition::explain_infeasible(const std::string& reason,
                                                   const Profile& profile,
                                                   const Platform& platform,
                                                   const PlannerOptions& options) {
  const std::string with = options.algorithm == Algorithm::MadPipe
                               ? ""
                               : std::string(" with --algorithm ") + to_string(options.algorithm);
  std::string text = reason;
  const std::int64_t smallest = smallest_feasible_memory(profile, platform, options);
  if (smallest < 0)
    text += "; madpipe finds no plan" + with + " with any memory per GPU";
  else
    text += "; the smallest memory per GPU for which madpipe finds a plan" + with + " is " +
            format_bytes(static_cast<double>(smallest));
  if (!options.remat.rotor) {
    PlannerOptions remat = options;
    remat.remat.rotor = true;
    const std::int64_t with_remat = smallest_feasible_memory(profile, platform, remat);
    if (with_remat >= 0 && (smallest < 0 || with_remat < smallest * 99 / 100))
      text += "; with --remat rotor (recompute activations in the backward) it is " +
              format_bytes(static_cast<double>(with_remat));
  }
  // The largest layer alone: C weight copies, what one micro-batch keeps, its workspace.
  const ChainCosts costs(profile);
  int largest = 0;
  std::int64_t largest_bytes = -1;
  for (int l = 0; l < costs.num_layers(); ++l) {
    const std::int64_t bytes = platform.weight_copies * costs.weight_bytes(l, l) +
                               costs.stored_bytes(l, l) + costs.workspace_bytes(l, l);
    if (bytes > largest_bytes) {
      largest_bytes = bytes;
      largest = l;
    }
  }
  if (largest_bytes > platform.memory_bytes)
    text += "; layer " + std::to_string(largest) + " (" + profile.layers[largest].name +
            ") alone keeps " + format_bytes(static_cast<double>(largest_bytes)) + ": its weights " +
            std::to_string(platform.weight_copies) +
            " times, one micro-batch's activations and its workspace";
  return text;
}
