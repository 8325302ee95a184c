#include "partition/stage_options.hpp"

#include "remat/offload_replay.hpp"
#include "remat/pofo.hpp"

#include <algorithm>
#include <limits>

// An option is of use when it recomputes or offloads (the plain stage has the same time
// otherwise) or keeps less.
static bool beats_plain(const madpipe::remat::RematOption& option,
                        const madpipe::remat::SequenceReplay& plain) {
  return option.backward_ms > plain.backward_ms * (1 + 1e-12) + 1e-12 ||
         option.stored_bytes < plain.stored_bytes;
}

madpipe::partition::StageOptions::StageOptions(const Profile& profile, RematSettings settings)
    : profile_(profile), settings_(settings) {}

const std::vector<madpipe::remat::RematOption>& madpipe::partition::StageOptions::of(int first,
                                                                                     int last) {
  static const std::vector<remat::RematOption> kNone;
  if (!enabled()) return kNone;
  const Range key = representative(first, last);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const remat::RematChain chain = remat::stage_remat_chain(profile_, key.first, key.second);
  const remat::SequenceReplay plain =
      remat::replay_sequence(chain, remat::store_all_sequence(chain));
  std::vector<remat::RematOption> candidates;
  if (settings_.remat == RematStrategy::Rotor)
    candidates = remat::remat_options(chain, settings_.slots, settings_.threshold_steps);
  if (settings_.offload == OffloadStrategy::Host) {
    for (int b = 1; b <= settings_.offload_budgets; ++b) {
      const std::int64_t budget = plain.peak_bytes * b / settings_.offload_budgets;
      const remat::OffloadResult result =
          settings_.remat == RematStrategy::Rotor
              ? remat::optimal_offload_remat(chain, budget, settings_.host_bytes_per_ms,
                                             settings_.offload_steps)
              : remat::optimal_offload_only(chain, budget, settings_.host_bytes_per_ms,
                                            settings_.offload_steps);
      if (!result.feasible) continue;
      remat::RematOption option;
      option.forward_ms = result.replay.forward_ms;
      option.backward_ms = result.replay.backward_ms;
      option.stored_bytes = result.replay.stored_bytes;
      // A runtime frees an offloaded tensor only when its copy is done, and it does not hold a
      // forward back until memory is free as the DP's budget did: it may run ahead of its
      // offloads, so what it holds is the larger of the two replays'.
      const remat::OffloadReplay unthrottled = remat::replay_offload_sequence(
          chain, result.sequence, std::numeric_limits<std::int64_t>::max() / 4,
          settings_.host_bytes_per_ms);
      option.transient_bytes = std::max(result.replay.peak_bytes_release_at_completion,
                                        unthrottled.peak_bytes_release_at_completion) -
                               option.stored_bytes;
      option.sequence = result.sequence;
      candidates.push_back(std::move(option));
    }
  }
  // Keep what beats the plain stage somewhere and that nothing else is at least as fast with no
  // more memory.
  std::vector<remat::RematOption> options;
  for (remat::RematOption& option : candidates)
    if (beats_plain(option, plain)) remat::add_to_front(options, std::move(option));
  remat::sort_fastest_first(options);
  return cache_.emplace(key, std::move(options)).first->second;
}

int madpipe::partition::StageOptions::fastest_fitting(int first, int last, int nca,
                                                      double budget_bytes) {
  const std::vector<remat::RematOption>& options = of(first, last);
  for (std::size_t i = 0; i < options.size(); ++i)
    if (static_cast<double>(remat::in_flight_bytes(
            options[i].stored_bytes, options[i].transient_bytes, nca)) <= budget_bytes)
      return static_cast<int>(i);
  return -1;
}

std::int64_t madpipe::partition::StageOptions::least_bytes(int first, int last, int nca) {
  if (!enabled()) return -1;
  const Range key = representative(first, last);
  auto memory_of = [nca](const remat::RematOption& option) {
    return remat::in_flight_bytes(option.stored_bytes, option.transient_bytes, nca);
  };
  if (settings_.offload == OffloadStrategy::Host || cache_.count(key) > 0) {
    std::int64_t least = -1;
    for (const remat::RematOption& option : of(key.first, key.second))
      if (least < 0 || memory_of(option) < least) least = memory_of(option);
    return least;
  }
  auto it = least_.find(key);
  if (it == least_.end()) {
    const remat::RematChain chain = remat::stage_remat_chain(profile_, key.first, key.second);
    std::optional<remat::RematOption> least = remat::least_memory_option(chain, settings_.slots);
    if (least &&
        !beats_plain(*least, remat::replay_sequence(chain, remat::store_all_sequence(chain))))
      least.reset();
    it = least_.emplace(key, std::move(least)).first;
  }
  return it->second ? memory_of(*it->second) : -1;
}

madpipe::partition::StageOptions::Range madpipe::partition::StageOptions::representative(int first,
                                                                                         int last) {
  const Range range{first, last};
  if (auto known = representative_.find(range); known != representative_.end())
    return known->second;
  const remat::RematChain chain = remat::stage_remat_chain(profile_, first, last);
  const std::uint64_t hash = remat::costs_hash(chain);
  Range found = range;
  const auto [begin, end] = representatives_by_hash_.equal_range(hash);
  for (auto candidate = begin; candidate != end; ++candidate) {
    const Range other = candidate->second;
    if (other.second - other.first == last - first &&
        remat::same_costs(chain, remat::stage_remat_chain(profile_, other.first, other.second))) {
      found = other;
      break;
    }
  }
  if (found == range) representatives_by_hash_.emplace(hash, range);
  representative_.emplace(range, found);
  return found;
}
