#pragma once

#include "solver/model.hpp"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace madpipe::solver {

// What the solver concluded (FORMATS.md solver.status). A solver that fails inside (an
// Error{Solver}, any other exception) gives Error with the message; an invalid model still throws
// madpipe::Error.
enum class Status { Optimal, Feasible, Infeasible, Timeout, Error };

// "optimal", "feasible", "infeasible", "timeout", "error".
std::string_view to_string(Status status) noexcept;

struct SolveOptions {
  double time_limit_s = 60, relative_gap = 1e-4;
  int threads = 1;
  bool log = false;  // backend log to stdout
  // Wall-clock seconds after which an isolated solver (make_backend) is killed and the solve
  // ends as a timeout without a solution; 0: twice time_limit_s plus 30 s. Backends count their
  // time limit their own way (CBC in CPU seconds, past it in preprocessing).
  double wall_limit_s = 0;
};

struct SolveResult {
  Status status = Status::Error;
  // objective includes the model's offset; gap = |objective - bound| / max(1e-9, |objective|).
  double objective = kInf, bound = -kInf, gap = kInf, seconds = 0;
  // When the first incumbent appeared (a MIP start counts, at 0); -1 without one or when the
  // backend does not tell.
  double first_solution_seconds = -1;
  std::vector<double> values;  // one per variable, empty without a solution
  std::string backend, message;

  double value(Var v) const;
  bool has_solution() const noexcept { return !values.empty(); }
};

class Backend {
 public:
  virtual ~Backend();
  virtual std::string_view name() const = 0;
  virtual SolveResult solve(const Model& model, const SolveOptions& options) = 0;
};

// "cbc", "glpk" or a registered name; throws madpipe::Error(Unsupported) naming the available
// backends otherwise. The returned backend fills backend, seconds and gap of every result it
// returns.
std::unique_ptr<Backend> make_backend(std::string_view name);

// Makes another MILP solver available under `name` (e.g. a commercial one an embedder links),
// after the built ones: the planner's --solver NAME and MilpSettings::backend find it. A second
// registration of a name replaces the first. Not thread-safe: register before planning.
using BackendFactory = std::function<std::unique_ptr<Backend>()>;
void register_backend(const std::string& name, BackendFactory factory);

// Names of the backends compiled in, in a fixed order, then the registered ones.
std::vector<std::string> built_backends();

// The relative gap of a result: |objective - bound| / max(1e-9, |objective|), kInf when either is
// not finite. Applied by the solver layer to every backend result.
double relative_gap(double objective, double bound) noexcept;

}  // namespace madpipe::solver
