// Tied weights in a profile: the format (read, written, refused with the field named) and the
// chain's sums (a weight shared by two layers of one range counted once).

#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "support/test_support.hpp"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mt = madpipe::testing;

namespace {

// The error message of reading `profile` with `edit` applied to its JSON.
template <typename Edit>
std::string error_reading(Edit edit) {
  nlohmann::json j = madpipe::profile_to_json(mt::tied_chain());
  edit(j);
  try {
    madpipe::profile_from_json(j, "tied.json");
  } catch (const madpipe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TiedWeights, RoundTripThroughTheProfileFormat) {
  const madpipe::Profile profile = mt::tied_chain();
  const nlohmann::json j = madpipe::profile_to_json(profile);
  ASSERT_TRUE(j.contains("tied_weights"));
  EXPECT_EQ(j["tied_weights"][0]["layers"], nlohmann::json::array({0, 3}));
  EXPECT_EQ(j["tied_weights"][0]["bytes"], 600);
  EXPECT_EQ(madpipe::profile_from_json(j, "tied.json"), profile);
  // A profile without ties writes no key (files of untied models are unchanged).
  EXPECT_FALSE(madpipe::profile_to_json(mt::make_chain({1, 1})).contains("tied_weights"));
}

TEST(TiedWeights, MalformedGroupsAreRefusedNamingTheField) {
  EXPECT_NE(error_reading([](nlohmann::json& j) {
              j["tied_weights"][0]["layers"] = {0, 4};
            }).find("/tied_weights/0/layers/1: must be a layer index in [0, 3], got 4"),
            std::string::npos);
  EXPECT_NE(error_reading([](nlohmann::json& j) {
              j["tied_weights"][0]["layers"] = {3, 0};
            }).find("/tied_weights/0/layers/1: layer indices must be ascending"),
            std::string::npos);
  EXPECT_NE(error_reading([](nlohmann::json& j) {
              j["tied_weights"][0]["layers"] = {3};
            }).find("/tied_weights/0/layers: must be an array of at least two layer indices"),
            std::string::npos);
  EXPECT_NE(error_reading([](nlohmann::json& j) { j["tied_weights"][0]["bytes"] = 800; })
                .find("/tied_weights/0/bytes: must be at most the weight_bytes of each of its "
                      "layers"),
            std::string::npos);
  EXPECT_NE(error_reading([](nlohmann::json& j) {
              j["tied_weights"][0]["bytes"] = 0;
            }).find("/tied_weights/0/bytes: must be > 0"),
            std::string::npos);
  EXPECT_NE(error_reading([](nlohmann::json& j) {
              j["tied_weights"].push_back({{"layers", {2, 3}}, {"bytes", 10}});
            }).find("/tied_weights/1/layers/1: layer 3 is already in tied_weights/0"),
            std::string::npos);
  EXPECT_NE(error_reading([](nlohmann::json& j) {
              j["tied_weights"] = 3;
            }).find("/tied_weights: must be an array"),
            std::string::npos);
}

TEST(TiedWeights, ARangeHoldingBothLayersCountsTheSharedWeightOnce) {
  const madpipe::ChainCosts costs(mt::tied_chain());
  EXPECT_EQ(costs.weight_bytes(0, 0), 1000);
  EXPECT_EQ(costs.weight_bytes(1, 3), 800);
  EXPECT_EQ(costs.weight_bytes(0, 2), 1100);
  EXPECT_EQ(costs.weight_bytes(0, 3), 1800 - 600);
  EXPECT_EQ(costs.tied_groups_in(1, 2), std::vector<int>{});
  EXPECT_EQ(costs.tied_groups_in(2, 3), std::vector<int>{0});
  EXPECT_EQ(costs.tied_groups_in(0, 3), std::vector<int>{0});
}
