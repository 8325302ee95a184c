#pragma once

#include "partition/planner.hpp"
#include "solver/solve.hpp"

#include <vector>

namespace madpipe::testing {

// The planning algorithms this build can run: all of them, less the full ILP where no MILP
// backend (CBC, GLPK) was built.
inline std::vector<partition::Algorithm> runnable_algorithms() {
  std::vector<partition::Algorithm> out;
  for (partition::Algorithm algorithm : partition::all_algorithms())
    if (algorithm != partition::Algorithm::Ilp || !solver::built_backends().empty())
      out.push_back(algorithm);
  return out;
}

}  // namespace madpipe::testing
