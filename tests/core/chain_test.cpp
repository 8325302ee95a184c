#include "core/chain.hpp"

#include "support/test_support.hpp"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

namespace mt = madpipe::testing;

TEST(ChainCosts, WorkspaceOfEveryRangeIsTheLargestOfItsLayers) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int64_t> bytes(0, 1'000'000);
  for (int layers : {1, 2, 3, 5, 8, 13, 33}) {
    madpipe::Profile profile = mt::random_chain(rng, layers);
    for (madpipe::Layer& layer : profile.layers) {
      layer.forward_workspace_bytes = bytes(rng);
      layer.backward_workspace_bytes = bytes(rng);
    }
    const madpipe::ChainCosts costs(profile);
    for (int first = 0; first < layers; ++first) {
      std::int64_t largest = 0;
      for (int last = first; last < layers; ++last) {
        const madpipe::Layer& layer = profile.layers[last];
        largest =
            std::max({largest, layer.forward_workspace_bytes, layer.backward_workspace_bytes});
        ASSERT_EQ(costs.workspace_bytes(first, last), largest)
            << layers << " layers, range " << first << ".." << last;
      }
    }
  }
}
