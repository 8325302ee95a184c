#include "support/remat_support.hpp"

madpipe::remat::RematChain madpipe::testing::chain_of(const std::vector<double>& forward,
                                                      const std::vector<double>& backward,
                                                      const std::vector<std::int64_t>& a,
                                                      const std::vector<std::int64_t>& abar) {
  const int stages = static_cast<int>(forward.size()) - 1;  // without the loss
  remat::RematChain chain = remat::make_remat_chain(stages);
  for (int k = 1; k <= stages + 1; ++k) {
    chain.forward_ms[k] = forward[k - 1];
    chain.backward_ms[k] = backward[k - 1];
  }
  for (int k = 0; k <= stages + 1; ++k) {
    chain.a[k] = a[k];
    chain.abar[k] = abar[k];
    chain.delta[k] = k == stages + 1 ? 0 : a[k];
  }
  return chain;
}

madpipe::remat::RematChain madpipe::testing::small_integer_chain(std::mt19937& rng, int min_stages,
                                                                 int max_stages) {
  std::uniform_int_distribution<int> size(1, 7), length(min_stages, max_stages), time(1, 5);
  const int stages = length(rng);
  std::vector<double> forward, backward;
  std::vector<std::int64_t> a, abar;
  for (int k = 0; k <= stages; ++k) {
    forward.push_back(time(rng));
    backward.push_back(time(rng));
  }
  for (int k = 0; k <= stages + 1; ++k) {
    a.push_back(size(rng));
    abar.push_back(k == 0 ? a[0] : a[k] + size(rng) - 1);
  }
  remat::RematChain chain = chain_of(forward, backward, a, abar);
  for (int k = 1; k <= stages + 1; ++k) {
    chain.forward_overhead[k] = size(rng) - 1;
    chain.backward_overhead[k] = size(rng) - 1;
  }
  return chain;
}
