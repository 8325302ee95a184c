#include "remat/remat_chain.hpp"

#include "core/error.hpp"

#include <cstring>

double madpipe::remat::RematChain::sequential_ms() const noexcept {
  double total = 0;
  for (int k = 1; k <= length(); ++k) total += forward_ms[k] + backward_ms[k];
  return total;
}

madpipe::remat::RematChain madpipe::remat::make_remat_chain(int stages) {
  RematChain chain;
  const std::size_t size = static_cast<std::size_t>(stages) + 2;
  chain.forward_ms.assign(size, 0.0);
  chain.backward_ms.assign(size, 0.0);
  chain.a.assign(size, 0);
  chain.abar.assign(size, 0);
  chain.delta.assign(size, 0);
  chain.forward_overhead.assign(size, 0);
  chain.backward_overhead.assign(size, 0);
  return chain;
}

madpipe::remat::RematChain madpipe::remat::stage_remat_chain(const Profile& profile, int first,
                                                             int last) {
  const int layers = static_cast<int>(profile.layers.size());
  if (first < 0 || last < first || last >= layers)
    throw Error(ErrorKind::InvalidInput, "", "layers",
                "layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                    "] is not within the profile's " + std::to_string(layers) + " layers");
  const int n = last - first + 1;
  RematChain chain = make_remat_chain(n);
  chain.first_layer = first;
  chain.a[0] = input_bytes_of_layer(profile, first);
  chain.abar[0] = chain.a[0];
  for (int k = 1; k <= n; ++k) {
    const Layer& layer = profile.layers[first + k - 1];
    chain.forward_ms[k] = layer.forward_ms;
    chain.backward_ms[k] = layer.backward_ms;
    chain.a[k] = k < n ? layer.output_bytes : 0;
    chain.delta[k] = chain.a[k];
    chain.abar[k] = layer.saved_bytes + chain.a[k];
    chain.forward_overhead[k] = layer.forward_workspace_bytes;
    chain.backward_overhead[k] = layer.backward_workspace_bytes;
  }
  return chain;
}

bool madpipe::remat::same_costs(const RematChain& x, const RematChain& y) noexcept {
  return x.forward_ms == y.forward_ms && x.backward_ms == y.backward_ms && x.a == y.a &&
         x.abar == y.abar && x.delta == y.delta && x.forward_overhead == y.forward_overhead &&
         x.backward_overhead == y.backward_overhead;
}

std::uint64_t madpipe::remat::costs_hash(const RematChain& chain) noexcept {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a over the values' bits
  auto mix = [&hash](std::uint64_t bits) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (bits >> (8 * byte)) & 0xff;
      hash *= 0x100000001b3ULL;
    }
  };
  for (const std::vector<double>* times : {&chain.forward_ms, &chain.backward_ms})
    for (double value : *times) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &value, sizeof bits);
      mix(bits);
    }
  for (const std::vector<std::int64_t>* bytes :
       {&chain.a, &chain.abar, &chain.delta, &chain.forward_overhead, &chain.backward_overhead})
    for (std::int64_t value : *bytes) mix(static_cast<std::uint64_t>(value));
  return hash;
}
