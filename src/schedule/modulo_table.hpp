#pragma once

#include <optional>
#include <utility>
#include <vector>

namespace madpipe::schedule {

// Busy intervals of one resource (a GPU or a link) on the circle [0, T): what modulo list
// scheduling places ops into.
class ModuloTable {
 public:
  explicit ModuloTable(double period) : period_(period) {}

  // Earliest absolute time >= ready at which [t, t + d) is free modulo T, if any.
  std::optional<double> earliest_fit(double ready, double duration) const;
  // Latest absolute start <= deadline - d at which [t, t + d) is free modulo T, if any.
  std::optional<double> latest_fit(double deadline, double duration) const;
  void occupy(double t, double duration);

 private:
  bool is_free(double start, double duration) const;

  double period_;
  std::vector<std::pair<double, double>> busy_;
};

}  // namespace madpipe::schedule
