#include "partition/stage_options.hpp"

madpipe::partition::StageOptions::StageOptions(const Profile& profile, RematSettings settings)
    : profile_(profile), settings_(settings) {}

const std::vector<madpipe::schedule::RematOption>& madpipe::partition::StageOptions::of(int first,
                                                                                       int last) {
  static const std::vector<schedule::RematOption> kNone;
  if (!settings_.rotor) return kNone;
  const auto key = std::make_pair(first, last);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const schedule::RematChain chain = schedule::stage_remat_chain(profile_, first, last);
  double plain_backward = 0;
  for (int k = 1; k <= chain.length(); ++k) plain_backward += chain.backward_ms[k];
  std::vector<schedule::RematOption> options;
  // Options that recompute nothing are the plain stage with a more pessimistic transient.
  for (schedule::RematOption& option :
       schedule::remat_options(chain, settings_.slots, settings_.threshold_steps))
    if (option.backward_ms > plain_backward * (1 + 1e-12) + 1e-12) options.push_back(std::move(option));
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
