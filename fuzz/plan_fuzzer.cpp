// Fuzz target of the plan reader (madpipe.plan/1): read_plan on the input as a file, then what
// `madpipe show` and `madpipe simulate` do with an accepted plan: validate(plan),
// validate(plan, profile) against a shipped profile (the one the plan names when there is one),
// and for a plan without violations the writer's round trip and the timeline of a step.

#include "fuzz_support.hpp"

#include "core/error.hpp"
#include "core/profile.hpp"
#include "plan/plan.hpp"
#include "plan/timeline.hpp"
#include "plan/validate.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mplan = madpipe::plan;

// The profiles the seed plans of fuzz/corpus/plan_fuzzer/ were made for (madpipe plan --profile
// FILE --output); the first one is the fallback.
static const std::vector<madpipe::Profile>& profiles() {
  static const std::vector<madpipe::Profile> list = [] {
    std::vector<madpipe::Profile> out;
    for (const char* file :
         {"/tests/data/profiles/resnet50_first5.json", "/tests/data/profiles/minimal.json",
          "/configs/profiles/gpt2_small.json", "/configs/profiles/resnet50.json"})
      out.push_back(madpipe::read_profile(std::string(MADPIPE_FUZZ_ROOT) + file));
    return out;
  }();
  return list;
}

static const madpipe::Profile& profile_named(const std::string& name) {
  for (const madpipe::Profile& profile : profiles())
    if (profile.name == name) return profile;
  return profiles().front();
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const madpipe::Profile& fallback = profiles().front();
  const auto plan = madpipe::fuzz::read_input(
      data, size, ".json", [](const std::string& path) { return mplan::read_plan(path); });
  if (!plan) return 0;
  const std::vector<mplan::Violation> violations = mplan::validate(*plan);
  (void)mplan::validate(*plan, profile_named(plan->profile));
  (void)mplan::validate(*plan, fallback);
  try {
    mplan::throw_if_invalid(violations, "plan.json");
  } catch (const madpipe::Error& e) {
    madpipe::fuzz::expect_user_error(e);
    return 0;
  }
  madpipe::fuzz::expect_round_trip(*plan, mplan::plan_to_json, mplan::plan_from_json, "plan");
  try {
    (void)mplan::timeline_of_plan(*plan);
  } catch (const madpipe::Error& e) {
    madpipe::fuzz::expect_user_error(e);
  }
  return 0;
}
