// Fuzz target of the profile reader (madpipe.profile/1): read_profile on the input as a file.
// Accepted profiles must survive the writer's round trip unchanged and the planner's range sums
// (ChainCosts), which rely on the reader's limits on sizes.

#include "fuzz_support.hpp"

#include "core/chain.hpp"
#include "core/profile.hpp"

#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto profile = madpipe::fuzz::read_input(
      data, size, ".json", [](const std::string& path) { return madpipe::read_profile(path); });
  if (!profile) return 0;
  madpipe::fuzz::expect_round_trip(*profile, madpipe::profile_to_json, madpipe::profile_from_json,
                                   "profile");
  const madpipe::ChainCosts costs(*profile);
  const int last = costs.num_layers() - 1;
  (void)costs.total_compute_ms();
  (void)costs.weight_bytes(0, last);
  (void)costs.stored_bytes(0, last);
  (void)costs.workspace_bytes(0, last);
  return 0;
}
