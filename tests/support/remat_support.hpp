#pragma once

#include "remat/remat_chain.hpp"

#include <cstdint>
#include <random>
#include <vector>

namespace madpipe::testing {

// Chain with delta = a (thesis convention) and delta of the loss 0; vectors per stage, the loss
// last (times) and a_0 first (sizes).
remat::RematChain chain_of(const std::vector<double>& forward, const std::vector<double>& backward,
                           const std::vector<std::int64_t>& a,
                           const std::vector<std::int64_t>& abar);

// Random chain of min_stages..max_stages stages with integer times in [1, 5] and sizes in
// [1, 7], so that one byte per memory slot discretizes exactly.
remat::RematChain small_integer_chain(std::mt19937& rng, int min_stages, int max_stages);

}  // namespace madpipe::testing
