// The model of PyTorch's caching allocator that static arenas are compared with.

#include "arena/caching_allocator.hpp"

#include "arena/address_plan.hpp"
#include "core/error.hpp"

#include <vector>

#include <gtest/gtest.h>

namespace marena = madpipe::arena;

constexpr std::int64_t MiB = 1 << 20;

TEST(CachingAllocator, ChainOfLargeTensorsFragmentsWhereAnArenaDoesNot) {
  // The fragmentation chain of address_plan_test.cpp, at 12 MiB per unit:
  // A (1) -> B (2) -> C (2) -> D (1).
  const std::vector<marena::Buffer> chain = {
      {"A", 12 * MiB, 0, 1}, {"B", 24 * MiB, 1, 2}, {"C", 24 * MiB, 2, 3}, {"D", 12 * MiB, 3, 4}};
  const marena::CachingAllocatorPeak peak = marena::simulate_caching_allocator(chain);
  // C cannot use A's freed 12 MiB segment while B holds its own: a third segment.
  EXPECT_EQ(peak.reserved_bytes, 60 * MiB);
  EXPECT_EQ(peak.allocated_bytes, 48 * MiB);
  EXPECT_EQ(peak.segments, 3);
  EXPECT_EQ(marena::live_bytes_lower_bound(chain), 48 * MiB);
}

TEST(CachingAllocator, SmallRequestsShareATwoMebibyteSegment) {
  const std::vector<marena::Buffer> small = {
      {"a", 100000, 0, 2}, {"b", 100000, 0, 2}, {"c", 100000, 1, 2}};
  const marena::CachingAllocatorPeak peak = marena::simulate_caching_allocator(small);
  EXPECT_EQ(peak.reserved_bytes, 2 * MiB);
  EXPECT_EQ(peak.allocated_bytes, 3 * 100352);  // rounded up to 512 B
  EXPECT_EQ(peak.segments, 1);
}

TEST(CachingAllocator, FreedBlocksAreReused) {
  std::vector<marena::Buffer> sequential;
  for (int t = 0; t < 5; ++t) sequential.push_back({"x", 16 * MiB, t, t});
  const marena::CachingAllocatorPeak peak = marena::simulate_caching_allocator(sequential);
  EXPECT_EQ(peak.reserved_bytes, 16 * MiB);
  EXPECT_EQ(peak.segments, 1);
}

TEST(CachingAllocator, MidSizedRequestsSplitATwentyMebibyteSegment) {
  const std::vector<marena::Buffer> two = {{"a", 4 * MiB, 0, 1}, {"b", 4 * MiB, 1, 1}};
  const marena::CachingAllocatorPeak peak = marena::simulate_caching_allocator(two);
  EXPECT_EQ(peak.reserved_bytes, 20 * MiB);
  EXPECT_EQ(peak.segments, 1);
  EXPECT_EQ(peak.allocated_bytes, 8 * MiB);
}

TEST(CachingAllocator, MergedNeighboursServeALargerRequest) {
  // Two 4 MiB blocks freed side by side in one 20 MiB segment hold an 8 MiB request later.
  const std::vector<marena::Buffer> buffers = {
      {"a", 4 * MiB, 0, 0}, {"b", 4 * MiB, 0, 0}, {"keep", 12 * MiB, 0, 2}, {"c", 8 * MiB, 1, 1}};
  const marena::CachingAllocatorPeak peak = marena::simulate_caching_allocator(buffers);
  // keep takes the segment's last 12 MiB; without the merge, c would need a segment of its own.
  EXPECT_EQ(peak.reserved_bytes, 20 * MiB);
  EXPECT_EQ(peak.segments, 1);
}

TEST(CachingAllocator, RefusesWrappingLifetimes) {
  EXPECT_THROW(marena::simulate_caching_allocator({{"w", 10, 3, 1}}), madpipe::Error);
}
