#include "partition/stage_options.hpp"

#include <algorithm>
#include <tuple>

#include "schedule/pofo.hpp"

madpipe::partition::StageOptions::StageOptions(const Profile& profile, RematSettings settings)
    : profile_(profile), settings_(settings) {}

// What storing everything keeps from forward to backward.
static std::int64_t chain_stored(const madpipe::schedule::RematChain& chain) {
  return madpipe::schedule::replay_sequence(chain, madpipe::schedule::store_all_sequence(chain))
      .stored_bytes;
}

const std::vector<madpipe::schedule::RematOption>& madpipe::partition::StageOptions::of(int first,
                                                                                       int last) {
  static const std::vector<schedule::RematOption> kNone;
  if (!enabled()) return kNone;
  const auto key = std::make_pair(first, last);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const schedule::RematChain chain = schedule::stage_remat_chain(profile_, first, last);
  double plain_backward = 0;
  for (int k = 1; k <= chain.length(); ++k) plain_backward += chain.backward_ms[k];
  std::vector<schedule::RematOption> candidates;
  if (settings_.rotor)
    candidates = schedule::remat_options(chain, settings_.slots, settings_.threshold_steps);
  if (settings_.host_offload) {
    const std::int64_t peak =
        schedule::replay_sequence(chain, schedule::store_all_sequence(chain)).peak_bytes;
    for (int b = 1; b <= settings_.offload_budgets; ++b) {
      const std::int64_t budget = peak * b / settings_.offload_budgets;
      const schedule::OffloadResult result =
          settings_.rotor ? schedule::optimal_offload_remat(chain, budget, settings_.host_bytes_per_ms,
                                                            settings_.offload_steps)
                          : schedule::optimal_offload_only(chain, budget, settings_.host_bytes_per_ms,
                                                           settings_.offload_steps);
      if (!result.feasible) continue;
      schedule::RematOption option;
      option.forward_ms = result.replay.forward_ms;
      option.backward_ms = result.replay.backward_ms;
      option.stored_bytes = result.replay.stored_bytes;
      // A runtime frees an offloaded tensor only when its copy is done.
      option.transient_bytes = result.replay.peak_bytes_release_at_completion - option.stored_bytes;
      option.sequence = result.sequence;
      candidates.push_back(std::move(option));
    }
  }
  // Keep what beats the plain stage somewhere: it recomputes or offloads (the plain stage has the
  // same time otherwise), and nothing else is at least as fast with no more memory.
  auto time = [](const schedule::RematOption& o) { return o.forward_ms + o.backward_ms; };
  auto dominates = [&](const schedule::RematOption& a, const schedule::RematOption& b) {
    return time(a) <= time(b) && a.stored_bytes <= b.stored_bytes &&
           a.transient_bytes <= b.transient_bytes;
  };
  std::vector<schedule::RematOption> options;
  for (schedule::RematOption& option : candidates) {
    if (option.backward_ms <= plain_backward * (1 + 1e-12) + 1e-12 &&
        option.stored_bytes >= chain_stored(chain))
      continue;
    if (std::any_of(options.begin(), options.end(),
                    [&](const schedule::RematOption& o) { return dominates(o, option); }))
      continue;
    options.erase(std::remove_if(options.begin(), options.end(),
                                 [&](const schedule::RematOption& o) { return dominates(option, o); }),
                  options.end());
    options.push_back(std::move(option));
  }
  std::sort(options.begin(), options.end(), [&](const schedule::RematOption& a, const schedule::RematOption& b) {
    return std::make_tuple(time(a), a.stored_bytes, a.transient_bytes) <
           std::make_tuple(time(b), b.stored_bytes, b.transient_bytes);
  });
  return cache_.emplace(key, std::move(options)).first->second;
}

int madpipe::partition::StageOptions::fastest_fitting(int first, int last, int nca,
                                                      double budget_bytes) {
  const std::vector<schedule::RematOption>& options = of(first, last);
  for (std::size_t i = 0; i < options.size(); ++i)
    if (static_cast<double>(nca) * static_cast<double>(options[i].stored_bytes) +
            static_cast<double>(options[i].transient_bytes) <=
        budget_bytes)
      return static_cast<int>(i);
  return -1;
}
