#include "core/platform.hpp"

#include "core/error.hpp"

#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

madpipe::Platform valid_platform() {
  madpipe::Platform platform;
  platform.gpus = 4;
  platform.memory_bytes = 1 << 30;
  platform.bandwidth_bytes_per_ms = 1e7;
  return platform;
}

std::vector<std::string> fields_of(const madpipe::Platform& platform) {
  std::vector<std::string> fields;
  for (const madpipe::PlatformProblem& p : madpipe::platform_problems(platform))
    fields.push_back(p.field);
  return fields;
}

TEST(PlatformProblems, AValidPlatformHasNone) {
  EXPECT_TRUE(madpipe::platform_problems(valid_platform()).empty());
  madpipe::Platform largest = valid_platform();
  largest.gpus = madpipe::kMaxGpus;
  largest.gpus_per_node = 8;
  largest.host_bandwidth_bytes_per_ms = 1e6;
  largest.inter_node_bandwidth_bytes_per_ms = 1e6;
  EXPECT_TRUE(madpipe::platform_problems(largest).empty());
  EXPECT_NO_THROW(madpipe::check_platform(largest));
}

TEST(PlatformProblems, EveryFieldIsCheckedInMemberOrder) {
  madpipe::Platform bad;
  bad.gpus = 0;
  bad.memory_bytes = 0;
  bad.bandwidth_bytes_per_ms = std::numeric_limits<double>::infinity();
  bad.weight_copies = 0;
  bad.host_bandwidth_bytes_per_ms = -1;
  bad.gpus_per_node = -1;
  bad.inter_node_bandwidth_bytes_per_ms = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(fields_of(bad),
            (std::vector<std::string>{"gpus", "memory_bytes", "bandwidth_bytes_per_ms",
                                      "weight_copies", "host_bandwidth_bytes_per_ms",
                                      "gpus_per_node", "inter_node_bandwidth_bytes_per_ms"}));
}

TEST(PlatformProblems, OneLimitOnTheNumberOfGpus) {
  madpipe::Platform platform = valid_platform();
  platform.gpus = madpipe::kMaxGpus + 1;
  const std::vector<madpipe::PlatformProblem> problems = madpipe::platform_problems(platform);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].problem, "must be at most 4096, got 4097");
}

TEST(PlatformProblems, ZeroBandwidthIsRefusedButZeroOptionalBandwidthsAreNot) {
  madpipe::Platform platform = valid_platform();
  platform.bandwidth_bytes_per_ms = 0;
  EXPECT_EQ(fields_of(platform), (std::vector<std::string>{"bandwidth_bytes_per_ms"}));
  EXPECT_EQ(madpipe::platform_problems(platform)[0].problem, "must be a finite number > 0, got 0");
}

TEST(CheckPlatform, NamesTheFileAndThePrefixedField) {
  madpipe::Platform platform = valid_platform();
  platform.weight_copies = 0;
  try {
    madpipe::check_platform(platform, "plan.json", "/platform/");
    FAIL() << "no error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_NE(std::string(e.what()).find("plan.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/platform/weight_copies"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("must be >= 1, got 0"), std::string::npos) << e.what();
  }
}

}  // namespace
