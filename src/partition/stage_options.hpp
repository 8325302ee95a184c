#pragma once

#include "core/names.hpp"
#include "core/profile.hpp"
#include "remat/rotor.hpp"
#include "schedule/stage.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace madpipe::partition {

// What a stage that does not fit may recompute (`--remat`) and where it may put activations
// (`--offload`).
using schedule::kOffloadStrategyNames;
using schedule::kRematStrategyNames;
using schedule::OffloadStrategy;
using schedule::RematStrategy;

// Per-stage rematerialization and offloading the partitioners may use (`--remat rotor`,
// `--offload host`).
struct RematSettings {
  RematStrategy remat = RematStrategy::None;
  int slots = 200;           // memory slots of the ROTOR DP, over the stage's store-all peak
  int threshold_steps = 24;  // values of the memory left free at the loss (pipelined variant)
  // Host: offloading with recomputation (pofo), needs host_bytes_per_ms.
  OffloadStrategy offload = OffloadStrategy::None;
  double host_bytes_per_ms = 0;
  int offload_steps = 50;   // discretization of the offloading DP
  int offload_budgets = 8;  // budgets (fractions of the store-all peak) it is solved for
};

// The ways to run a stage [first, last] that keep less memory than the plain one, computed on
// first use (ROTOR's pipelined Pareto front, and with offloading the offloading DP at several
// budgets): non-dominated, fastest first, plain excluded. They are computed once per distinct
// stage chain: in a run of identical layers (a language model's blocks) the ranges [i, j] and
// [i + k, j + k] have the same costs and share them, which makes the work grow with the run's
// length instead of its square.
class StageOptions {
 public:
  StageOptions(const Profile& profile, RematSettings settings);

  bool enabled() const noexcept {
    return settings_.remat != RematStrategy::None || settings_.offload != OffloadStrategy::None;
  }
  const RematSettings& settings() const noexcept { return settings_; }
  const std::vector<remat::RematOption>& of(int first, int last);
  // Index in of(first, last) of the fastest option with nca * stored + transient <= budget; -1
  // if none.
  int fastest_fitting(int first, int last, int nca, double budget_bytes);
  // Distinct stage chains whose options were computed.
  std::size_t ranges_computed() const noexcept { return cache_.size(); }

  // Least nca * stored + transient over the options of [first, last], or -1 when there are none.
  // Without offloading and before of(first, last) is computed, it comes from
  // remat::least_memory_option() (one ROTOR table, no front), which of() holds or beats: the
  // memory it gives is always reachable with of()'s options.
  std::int64_t least_bytes(int first, int last, int nca);

 private:
  using Range = std::pair<int, int>;
  // The first range asked for whose stage chain has the costs of [first, last]'s.
  Range representative(int first, int last);

  const Profile& profile_;
  RematSettings settings_;
  std::map<Range, Range> representative_;
  std::unordered_multimap<std::uint64_t, Range> representatives_by_hash_;
  std::map<Range, std::vector<remat::RematOption>> cache_;    // by representative
  std::map<Range, std::optional<remat::RematOption>> least_;  // by representative
};

}  // namespace madpipe::partition
