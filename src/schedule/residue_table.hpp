#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace madpipe::schedule {

// Values keyed by a row (a stage, or an op kind and stage) and a residue r in [0, k): a table where
// rows * k is small, a map otherwise (k may be huge in a plan read from a file). Rows outside
// [0, rows) are ignored on writes and empty on reads.
template <typename T>
class ResidueTable {
 public:
  ResidueTable(int rows, int k, T empty) : rows_(rows), k_(k), empty_(empty) {
    constexpr std::int64_t kLargestTable = 1 << 22;
    if (static_cast<std::int64_t>(rows) * k <= kLargestTable)
      table_.assign(static_cast<std::size_t>(rows) * static_cast<std::size_t>(k), empty);
    else
      large_ = true;
  }
  // Stores value at (row, r) unless something is there already.
  void set_if_empty(int row, int r, T value) {
    if (row < 0 || row >= rows_) return;
    if (large_) {
      map_.emplace(std::make_pair(row, r), value);
    } else {
      T& slot = table_[index(row, r)];
      if (slot == empty_) slot = value;
    }
  }
  // Stores value at (row, r), replacing what was there.
  void set(int row, int r, T value) {
    if (row < 0 || row >= rows_) return;
    if (large_)
      map_[{row, r}] = value;
    else
      table_[index(row, r)] = value;
  }
  T get(int row, int r) const {
    if (row < 0 || row >= rows_) return empty_;
    if (!large_) return table_[index(row, r)];
    const auto it = map_.find({row, r});
    return it == map_.end() ? empty_ : it->second;
  }

 private:
  std::size_t index(int row, int r) const {
    return static_cast<std::size_t>(row) * static_cast<std::size_t>(k_) +
           static_cast<std::size_t>(r);
  }
  int rows_;
  int k_;
  T empty_;
  bool large_ = false;
  std::vector<T> table_;
  std::map<std::pair<int, int>, T> map_;
};

}  // namespace madpipe::schedule
