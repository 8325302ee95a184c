#include "solver/solve.hpp"

#include "core/error.hpp"
#include "solver/backends/backends.hpp"
#include "solver/isolated_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>

namespace {

// Wraps a backend: times the call and fills the fields every backend shares (backend, seconds,
// gap), so no backend computes them on its own.
class FinishingBackend final : public madpipe::solver::Backend {
 public:
  explicit FinishingBackend(std::unique_ptr<madpipe::solver::Backend> inner)
      : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  madpipe::solver::SolveResult solve(const madpipe::solver::Model& model,
                                     const madpipe::solver::SolveOptions& options) override;

 private:
  std::unique_ptr<madpipe::solver::Backend> inner_;
};

}  // namespace

static void finish_result(madpipe::solver::SolveResult& result, std::string_view backend,
                          double seconds) {
  using madpipe::solver::Status;
  result.backend = std::string(backend);
  result.seconds = seconds;
  const bool has_incumbent = result.status == Status::Optimal || result.status == Status::Feasible;
  if (!has_incumbent) {
    result.objective = madpipe::solver::kInf;
    result.values.clear();
  }
  if (result.status == Status::Optimal && !std::isfinite(result.bound))
    result.bound = result.objective;
  // A bound never lies above the incumbent of a minimization (a backend's rounding aside).
  if (has_incumbent && std::isfinite(result.bound))
    result.bound = std::min(result.bound, result.objective);
  result.gap = madpipe::solver::relative_gap(result.objective, result.bound);
}

madpipe::solver::SolveResult FinishingBackend::solve(const madpipe::solver::Model& model,
                                                     const madpipe::solver::SolveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  madpipe::solver::SolveResult result;
  // A solver that fails inside (CBC throws CoinError, which is no std::exception) gives an
  // error result, so that the planner keeps its heuristic plan instead of stopping.
  try {
    result = inner_->solve(model, options);
  } catch (const madpipe::Error& e) {
    if (e.kind() != madpipe::ErrorKind::Solver) throw;
    result = {};
    result.message = e.what();
  } catch (const std::exception& e) {
    result = {};
    result.message = std::string("the solver failed: ") + e.what();
  } catch (...) {
    result = {};
    result.message = "the solver failed with an exception";
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  finish_result(result, inner_->name(), elapsed.count());
  return result;
}

std::string_view madpipe::solver::to_string(Status status) noexcept {
  switch (status) {
    case Status::Optimal:
      return "optimal";
    case Status::Feasible:
      return "feasible";
    case Status::Infeasible:
      return "infeasible";
    case Status::Timeout:
      return "timeout";
    case Status::Error:
      return "error";
  }
  return "error";
}

double madpipe::solver::SolveResult::value(Var v) const {
  if (v.index < 0 || static_cast<std::size_t>(v.index) >= values.size()) {
    throw Error(ErrorKind::InvalidInput, "", "solver",
                "no value for variable index " + std::to_string(v.index) + " (status " +
                    std::string(to_string(status)) + ")");
  }
  return values[static_cast<std::size_t>(v.index)];
}

madpipe::solver::Backend::~Backend() = default;

double madpipe::solver::relative_gap(double objective, double bound) noexcept {
  if (!std::isfinite(objective) || !std::isfinite(bound)) return kInf;
  return std::abs(objective - bound) / std::max(1e-9, std::abs(objective));
}

namespace {
std::vector<std::pair<std::string, madpipe::solver::BackendFactory>>& registered() {
  static std::vector<std::pair<std::string, madpipe::solver::BackendFactory>> backends;
  return backends;
}
}  // namespace

void madpipe::solver::register_backend(const std::string& name, BackendFactory factory) {
  for (auto& [existing, f] : registered())
    if (existing == name) {
      f = std::move(factory);
      return;
    }
  registered().emplace_back(name, std::move(factory));
}

std::vector<std::string> madpipe::solver::built_backends() {
  std::vector<std::string> names;
#ifdef MADPIPE_HAVE_CBC
  names.emplace_back("cbc");
#endif
#ifdef MADPIPE_HAVE_GLPK
  names.emplace_back("glpk");
#endif
  for (const auto& entry : registered())
    if (std::find(names.begin(), names.end(), entry.first) == names.end())
      names.push_back(entry.first);
  return names;
}

std::unique_ptr<madpipe::solver::Backend> madpipe::solver::make_backend(std::string_view name) {
  std::unique_ptr<Backend> inner;
  for (const auto& [registered_name, factory] : registered())
    if (name == registered_name) inner = factory();
#ifdef MADPIPE_HAVE_CBC
  if (!inner && name == "cbc") inner = isolate_backend(detail::make_cbc_backend());
#endif
#ifdef MADPIPE_HAVE_GLPK
  if (!inner && name == "glpk") inner = isolate_backend(detail::make_glpk_backend());
#endif
  if (!inner) {
    std::string built;
    for (const std::string& b : built_backends()) built += (built.empty() ? "" : ", ") + b;
    if (built.empty()) built = "none";
    throw Error(ErrorKind::Unsupported, "", "solver",
                "unknown or not built backend '" + std::string(name) + "' (built: " + built + ")");
  }
  return std::make_unique<FinishingBackend>(std::move(inner));
}
