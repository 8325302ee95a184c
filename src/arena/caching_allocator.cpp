#include "arena/caching_allocator.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>

namespace madpipe::arena {
namespace {

constexpr std::int64_t kMinBlock = 512;
constexpr std::int64_t kSmallSize = 1 << 20;  // requests up to this use the small pool
constexpr std::int64_t kSmallSegment = 2 << 20;
constexpr std::int64_t kMinLargeAlloc = 10 << 20;
constexpr std::int64_t kLargeSegment = 20 << 20;
constexpr std::int64_t kRoundLarge = 2 << 20;

std::int64_t round_up(std::int64_t bytes, std::int64_t to) { return (bytes + to - 1) / to * to; }

// One pool: segments of address space cut into blocks, each free or in use.
class Pool {
 public:
  explicit Pool(bool small) : small_(small) {}

  // Returns the block's address; may create a segment of `segment_bytes`.
  std::int64_t allocate(std::int64_t size, std::int64_t segment_bytes, std::int64_t& reserved) {
    auto it = free_.lower_bound({size, -1});
    if (it == free_.end()) {
      const std::int64_t base = next_address_;
      next_address_ += segment_bytes + kRoundLarge;  // segments never touch
      reserved += segment_bytes;
      ++segments_;
      blocks_[base] = {segment_bytes, false, base};
      it = free_.insert({segment_bytes, base}).first;
    }
    const auto [block_size, address] = *it;
    free_.erase(it);
    Block& block = blocks_.at(address);
    const std::int64_t rest = block_size - size;
    if (small_ ? rest >= kMinBlock : rest > kSmallSize) {
      block.size = size;
      blocks_[address + size] = {rest, false, block.segment};
      free_.insert({rest, address + size});
    }
    blocks_.at(address).in_use = true;
    return address;
  }

  void release(std::int64_t address) {
    auto it = blocks_.find(address);
    it->second.in_use = false;
    // Merge with the next block, then with the previous one, within the segment.
    auto next = std::next(it);
    if (next != blocks_.end() && !next->second.in_use &&
        next->second.segment == it->second.segment) {
      free_.erase({next->second.size, next->first});
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto previous = std::prev(it);
      if (!previous->second.in_use && previous->second.segment == it->second.segment) {
        free_.erase({previous->second.size, previous->first});
        previous->second.size += it->second.size;
        blocks_.erase(it);
        it = previous;
      }
    }
    free_.insert({it->second.size, it->first});
  }

  int segments() const noexcept { return segments_; }

 private:
  struct Block {
    std::int64_t size = 0;
    bool in_use = false;
    std::int64_t segment = 0;  // base address of its segment
  };
  bool small_;
  std::map<std::int64_t, Block> blocks_;                  // by address
  std::set<std::pair<std::int64_t, std::int64_t>> free_;  // (size, address): best fit first
  std::int64_t next_address_ = 0;
  int segments_ = 0;
};

}  // namespace

CachingAllocatorPeak simulate_caching_allocator(const std::vector<Buffer>& buffers) {
  int horizon = 0;
  for (const Buffer& b : buffers) {
    if (b.first > b.last)
      throw Error(ErrorKind::InvalidInput, "", "buffers",
                  "the caching allocator replays one pass; buffer '" + b.name + "' wraps around");
    horizon = std::max(horizon, b.last + 1);
  }
  std::vector<std::vector<int>> starting(static_cast<std::size_t>(horizon) + 1),
      ending(static_cast<std::size_t>(horizon) + 1);
  for (int i = 0; i < static_cast<int>(buffers.size()); ++i) {
    if (buffers[i].size_bytes <= 0) continue;
    starting[buffers[i].first].push_back(i);
    ending[buffers[i].last].push_back(i);
  }
  Pool small(true), large(false);
  std::vector<std::int64_t> address(buffers.size(), -1);
  CachingAllocatorPeak peak;
  std::int64_t reserved = 0, allocated = 0;
  for (int t = 0; t < horizon; ++t) {
    for (int i : starting[t]) {
      const std::int64_t size = round_up(buffers[i].size_bytes, kMinBlock);
      if (size <= kSmallSize) {
        address[i] = small.allocate(size, kSmallSegment, reserved);
      } else {
        const std::int64_t segment =
            size < kMinLargeAlloc ? kLargeSegment : round_up(size, kRoundLarge);
        address[i] = large.allocate(size, segment, reserved);
      }
      allocated += size;
      peak.allocated_bytes = std::max(peak.allocated_bytes, allocated);
      peak.reserved_bytes = std::max(peak.reserved_bytes, reserved);
    }
    for (int i : ending[t]) {
      const std::int64_t size = round_up(buffers[i].size_bytes, kMinBlock);
      (size <= kSmallSize ? small : large).release(address[i]);
      allocated -= size;
    }
  }
  peak.segments = small.segments() + large.segments();
  return peak;
}

}  // namespace madpipe::arena
