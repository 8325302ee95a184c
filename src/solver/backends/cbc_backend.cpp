// CBC backend: OsiClpSolverInterface + CbcModel, solved through CbcMain1 (cuts, heuristics and the
// MIP start are applied there).

#include "solver/backends/backends.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <coin/CbcEventHandler.hpp>
#include <coin/CbcModel.hpp>
#include <coin/CbcSolver.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

namespace {

class CbcBackend final : public madpipe::solver::Backend {
 public:
  std::string_view name() const override { return "cbc"; }
  madpipe::solver::SolveResult solve(const madpipe::solver::Model& model,
                                     const madpipe::solver::SolveOptions& options) override;
};

// Records when the first integer solution appears (CBC clones handlers: the record is shared).
class FirstSolutionClock final : public CbcEventHandler {
 public:
  struct Record {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    double first_seconds = -1;
  };
  explicit FirstSolutionClock(std::shared_ptr<Record> record) : record_(std::move(record)) {}
  CbcAction event(CbcEvent which) override {
    if ((which == solution || which == heuristicSolution) && record_->first_seconds < 0)
      record_->first_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - record_->start).count();
    return noAction;
  }
  CbcEventHandler* clone() const override { return new FirstSolutionClock(*this); }

 private:
  std::shared_ptr<Record> record_;
};

}  // namespace

static double to_coin(double x, double infinity) {
  if (x == madpipe::solver::kInf) return infinity;
  if (x == -madpipe::solver::kInf) return -infinity;
  return x;
}

static double from_coin(double x) {
  if (x >= 1e30) return madpipe::solver::kInf;
  if (x <= -1e30) return -madpipe::solver::kInf;
  return x;
}

// CbcMain1 calls its callback unconditionally (a null one crashes on LPs).
static int ignore_event(CbcModel* /*model*/, int /*where_from*/) { return 0; }

// CBC's conclusion as ours. Checked in this order (isContinuousUnbounded before
// isProvenInfeasible):
//   isProvenOptimal()                         -> Optimal (within allowable gap)
//   isContinuousUnbounded()                   -> Error "unbounded"
//   isProvenInfeasible()                      -> Infeasible, unless the time limit
//                                                was spent before any node or LP
//                                                iteration: then Timeout
//   status() 1 (stopped on a limit), incumbent -> Feasible
//   status() 1, no incumbent                  -> Timeout
//   status() 2 (abandoned), anything else     -> Error with message
static madpipe::solver::Status map_status(const CbcModel& cbc, bool time_spent,
                                          std::string& message) {
  using madpipe::solver::Status;
  if (cbc.isProvenOptimal()) return Status::Optimal;
  if (cbc.isContinuousUnbounded()) {
    message = "cbc: problem is unbounded";
    return Status::Error;
  }
  const bool incumbent = cbc.bestSolution() != nullptr;
  if (cbc.isProvenInfeasible()) {
    // With a limit of a few milliseconds, CBC's preprocessing can stop on the
    // clock and still flag the model infeasible, without having solved a
    // single LP. Only a proof that did some work is believed.
    const bool no_work = cbc.getNodeCount() == 0 && cbc.getIterationCount() == 0 &&
                         !cbc.isInitialSolveProvenPrimalInfeasible();
    if (!(time_spent && no_work)) return Status::Infeasible;
    return incumbent ? Status::Feasible : Status::Timeout;
  }
  if (cbc.status() == 1) return incumbent ? Status::Feasible : Status::Timeout;
  if (cbc.status() == 2) {
    message = "cbc: search abandoned (numerical difficulties)";
    return Status::Error;
  }
  message = "cbc: unexpected status " + std::to_string(cbc.status()) + ", secondary " +
            std::to_string(cbc.secondaryStatus());
  return Status::Error;
}

madpipe::solver::SolveResult CbcBackend::solve(const madpipe::solver::Model& model,
                                               const madpipe::solver::SolveOptions& options) {
  using madpipe::solver::Status;
  madpipe::solver::SolveResult result;
  const int n = model.num_vars();
  if (n == 0) {  // CBC cannot take a model without columns
    bool feasible = true;
    for (int r = 0; r < model.num_rows(); ++r)
      feasible = feasible && model.row_lb(r) <= 0 && model.row_ub(r) >= 0;
    result.status = feasible ? Status::Optimal : Status::Infeasible;
    if (feasible) result.objective = result.bound = model.objective_offset();
    return result;
  }

  OsiClpSolverInterface osi;
  const double inf = osi.getInfinity();
  osi.setIntParam(OsiNameDiscipline, 2);
  std::vector<double> col_lb(static_cast<std::size_t>(n)), col_ub(col_lb.size()),
      obj(col_lb.size());
  for (int v = 0; v < n; ++v) {
    col_lb[static_cast<std::size_t>(v)] = to_coin(model.var_lb(v), inf);
    col_ub[static_cast<std::size_t>(v)] = to_coin(model.var_ub(v), inf);
    obj[static_cast<std::size_t>(v)] = model.objective_coeff(v);
  }
  const int m = model.num_rows();
  std::vector<double> row_lb(static_cast<std::size_t>(m)), row_ub(row_lb.size());
  CoinPackedMatrix matrix(false, 0, 0);  // row-ordered
  matrix.setDimensions(0, n);
  for (int r = 0; r < m; ++r) {
    row_lb[static_cast<std::size_t>(r)] = to_coin(model.row_lb(r), inf);
    row_ub[static_cast<std::size_t>(r)] = to_coin(model.row_ub(r), inf);
    std::vector<int> idx;
    std::vector<double> val;
    for (const madpipe::solver::Term& t : model.row_terms(r)) {
      idx.push_back(t.var);
      val.push_back(t.coeff);
    }
    matrix.appendRow(static_cast<int>(idx.size()), idx.data(), val.data());
  }
  osi.loadProblem(matrix, col_lb.data(), col_ub.data(), obj.data(), row_lb.data(), row_ub.data());
  for (int v = 0; v < n; ++v) {
    osi.setColName(v, model.var_name(v));
    if (model.var_integer(v)) osi.setInteger(v);
  }
  for (int r = 0; r < m; ++r) osi.setRowName(r, model.row_name(r));
  if (!options.log) osi.messageHandler()->setLogLevel(0);

  CbcModel cbc(osi);  // clones osi: results are read from cbc, never from osi
  CbcSolverUsefulData data;
  CbcMain0(cbc, data);
  cbc.setLogLevel(options.log ? 1 : 0);
  if (!options.log) {
    cbc.messageHandler()->setLogLevel(0);
    cbc.solver()->messageHandler()->setLogLevel(0);
  }
  std::vector<std::pair<std::string, double>> start;
  for (const auto& [var, value] : model.hints())
    start.emplace_back(model.var_name(var.index), value);
  if (!start.empty()) cbc.setMIPStart(start);
  auto clock = std::make_shared<FirstSolutionClock::Record>();
  const FirstSolutionClock handler(clock);
  cbc.passInEventHandler(&handler);

  const std::string seconds = std::to_string(std::max(0.0, options.time_limit_s));
  const std::string ratio = std::to_string(std::max(0.0, options.relative_gap));
  const std::string threads = std::to_string(std::max(1, options.threads));
  const std::string log = options.log ? "1" : "0";
  std::vector<const char*> argv = {"madpipe",       "-log",   log.c_str(),  "-sec",
                                   seconds.c_str(), "-ratio", ratio.c_str()};
  if (options.threads > 1) {
    argv.push_back("-threads");
    argv.push_back(threads.c_str());
  }
  argv.push_back("-solve");
  argv.push_back("-quit");
  const auto started = std::chrono::steady_clock::now();
  CbcMain1(static_cast<int>(argv.size()), argv.data(), cbc, ignore_event, data);
  const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - started;

  result.status = map_status(cbc, spent.count() >= options.time_limit_s, result.message);
  const double offset = model.objective_offset();
  if ((result.status == Status::Optimal || result.status == Status::Feasible) &&
      cbc.bestSolution()) {
    const double* x = cbc.bestSolution();
    result.values.assign(x, x + n);
    for (int v = 0; v < n; ++v)  // snap integers: 0.9999999 reads as 1
      if (model.var_integer(v)) result.values[static_cast<std::size_t>(v)] = std::round(x[v]);
    result.objective = cbc.getObjValue() + offset;
  } else if (result.status == Status::Optimal || result.status == Status::Feasible) {
    result.status = Status::Error;
    result.message = "cbc: reported a solution but returned none";
  }
  if (result.has_solution())
    result.first_solution_seconds = clock->first_seconds >= 0 ? clock->first_seconds : 0.0;
  const double bound = from_coin(cbc.getBestPossibleObjValue());
  result.bound = std::isfinite(bound) ? bound + offset : bound;
  return result;
}

std::unique_ptr<madpipe::solver::Backend> madpipe::solver::detail::make_cbc_backend() {
  return std::make_unique<CbcBackend>();
}
