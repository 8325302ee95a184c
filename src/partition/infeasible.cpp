#include "partition/infeasible.hpp"

#include "core/chain.hpp"
#include "core/units.hpp"
#include "partition/memory_floor.hpp"
#include "schedule/memory.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

constexpr double kRematHintSeconds = 2;

static std::string bytes(std::int64_t value) {
  return madpipe::format_bytes(static_cast<double>(value));
}

// A memory size that suffices, as the reader may pass it back: rounded up.
static std::string enough_bytes(std::int64_t value) {
  return madpipe::format_bytes_up(static_cast<double>(value));
}

static std::string layers_of(const madpipe::Profile& profile, int first, int last) {
  const auto name = [&](int l) { return profile.layers[static_cast<std::size_t>(l)].name; };
  return first == last ? "layer " + std::to_string(first) + " (" + name(first) + ")"
                       : "layers " + std::to_string(first) + ".." + std::to_string(last) + " (" +
                             name(first) + ".." + name(last) + ")";
}

// "the smallest memory per GPU for which madpipe finds a plan is X (...)": what binds there,
// and how exact X is.
static std::string describe_floor(const madpipe::partition::MemoryFloor& floor,
                                  const madpipe::Profile& profile, const std::string& with,
                                  bool contiguous_algorithm, const std::string& saving,
                                  std::int64_t limit_bytes) {
  const bool cut = floor.cut;
  std::string floor_text = madpipe::format_bytes_up(static_cast<double>(floor.bytes));
  // Rounded, the floor may read as the limit that it exceeds: then in bytes, both.
  if (floor_text == bytes(limit_bytes))
    floor_text += " (" + std::to_string(floor.bytes) + " bytes; the limit is " +
                  std::to_string(limit_bytes) + ")";
  std::string text = "the smallest memory per GPU for which madpipe finds a plan" + with + " is " +
                     (cut ? "at most " : "") + floor_text + " (the fullest GPU then holds " +
                     layers_of(profile, floor.binding_first, floor.binding_last) + " with " +
                     std::to_string(floor.binding_in_flight) + " micro-batch" +
                     (floor.binding_in_flight == 1 ? "" : "es") + " in flight" +
                     (floor.binding_saves_memory ? ", " + saving : "");
  if (cut)
    text += "; at least " + bytes(floor.at_least_bytes) + ": the time limit cut the search";
  else if (contiguous_algorithm || floor.any_allocation_bytes >= floor.bytes)
    text += "; exact";
  else if (floor.any_allocation_bytes > 0)
    text +=
        "; exact for allocations whose GPUs each hold one range of layers, and no allocation "
        "fits in less than " +
        bytes(floor.any_allocation_bytes);
  else
    text += "; exact for allocations whose GPUs each hold one range of layers";
  return text + ")";
}

std::string madpipe::partition::explain_infeasible(const std::string& reason,
                                                   const Profile& profile, const Platform& platform,
                                                   const PlannerOptions& options) {
  const std::string with = options.algorithm == Algorithm::MadPipe
                               ? ""
                               : std::string(" with --algorithm ") + to_string(options.algorithm);
  if (uses_fixed_placement(options.algorithm)) {
    // Too few layers (the reason says so), or its least-memory pattern.
    if (static_cast<int>(profile.layers.size()) < 2 * platform.gpus) return reason;
    const std::int64_t need = smallest_feasible_memory(profile, platform, options);
    if (need < 0) return reason + "; its placement has no pattern that runs";
    return reason + "; its placement (fixed chunks, no rematerialization) needs " +
           enough_bytes(need) + " per GPU";
  }
  const bool contiguous = places_contiguously(options.algorithm);
  const ChainCosts costs(profile);
  std::string text = reason;
  const auto started = std::chrono::steady_clock::now();
  const auto after = [&](double seconds) {
    const auto deadline = started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(std::min(seconds, 1e9)));
    return [deadline] { return std::chrono::steady_clock::now() > deadline; };
  };
  const std::function<bool()> out_of_time = after(options.time_limit_s);
  // What rematerialization would gain is a hint: on long chains the exact answer needs the ROTOR
  // tables of many long stages, so it gets a few seconds at most and may come as a range.
  const std::function<bool()> hint_out_of_time =
      after(std::min(options.time_limit_s, kRematHintSeconds));
  StageOptions asked(profile, options.remat);
  const MemoryFloor floor = algorithm_memory_floor(costs, platform, options, &asked, out_of_time);
  if (!floor.fits)
    text += "; madpipe finds no plan" + with + " with any memory per GPU";
  else
    text += "; " + describe_floor(floor, profile, with, contiguous,
                                  options.remat.offload == OffloadStrategy::None ? "rematerializing"
                                  : options.remat.remat == RematStrategy::Rotor
                                      ? "recomputing or offloading"
                                      : "offloading",
                                  platform.memory_bytes);
  if (options.remat.remat != RematStrategy::Rotor) {
    RematSettings rotor = options.remat;
    rotor.remat = RematStrategy::Rotor;
    StageOptions remat(profile, rotor);
    const MemoryFloor with_remat =
        algorithm_memory_floor(costs, platform, options, &remat, hint_out_of_time);
    if (with_remat.fits && (!floor.fits || with_remat.bytes < floor.bytes * 99 / 100))
      text += std::string("; with --remat rotor") +
              (options.remat.offload == OffloadStrategy::Host
                   ? " as well (recompute activations in the backward too)"
                   : " (recompute activations in the backward)") +
              " it is " +
              (with_remat.cut ? "between " + bytes(with_remat.at_least_bytes) + " and " +
                                    enough_bytes(with_remat.bytes) + " (the search was cut short)"
                              : enough_bytes(with_remat.bytes));
  }
  // The largest layer alone: C weight copies, what one micro-batch keeps, its workspace.
  int largest = 0;
  std::int64_t largest_bytes = -1;
  for (int l = 0; l < costs.num_layers(); ++l) {
    const std::int64_t layer_bytes = schedule::layer_alone_bytes(costs, l, platform);
    if (layer_bytes > largest_bytes) {
      largest_bytes = layer_bytes;
      largest = l;
    }
  }
  if (largest_bytes > platform.memory_bytes)
    text += "; " + layers_of(profile, largest, largest) + " alone keeps " + bytes(largest_bytes) +
            ": its weights " + std::to_string(platform.weight_copies) +
            " times, one micro-batch's activations and its workspace";
  return text;
}
