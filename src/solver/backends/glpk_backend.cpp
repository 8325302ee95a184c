// GLPK backend: glp_intopt with the presolver on (it also solves models without integers).

#include "solver/backends/backends.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <glpk.h>

namespace {

struct ProbDeleter {
  void operator()(glp_prob* p) const noexcept { glp_delete_prob(p); }
};
using ProbPtr = std::unique_ptr<glp_prob, ProbDeleter>;

// Restores GLPK's terminal output setting on scope exit.
class TermOut {
 public:
  explicit TermOut(bool on) : previous_(glp_term_out(on ? GLP_ON : GLP_OFF)) {}
  ~TermOut() { glp_term_out(previous_); }
  TermOut(const TermOut&) = delete;
  TermOut& operator=(const TermOut&) = delete;

 private:
  int previous_;
};

class GlpkBackend final : public madpipe::solver::Backend {
 public:
  std::string_view name() const override { return "glpk"; }
  madpipe::solver::SolveResult solve(const madpipe::solver::Model& model,
                                     const madpipe::solver::SolveOptions& options) override;
};

}  // namespace

// GLPK bound type of [lb, ub].
static int bound_type(double lb, double ub) {
  const bool has_lb = std::isfinite(lb), has_ub = std::isfinite(ub);
  if (has_lb && has_ub) return lb == ub ? GLP_FX : GLP_DB;
  if (has_lb) return GLP_LO;
  if (has_ub) return GLP_UP;
  return GLP_FR;
}

static double finite_or_zero(double x) { return std::isfinite(x) ? x : 0.0; }

// Records the best bound of the open nodes while the search runs.
static void track_bound(glp_tree* tree, void* info) {
  double* bound = static_cast<double*>(info);
  const int node = glp_ios_best_node(tree);
  if (node == 0) return;
  const double b = glp_ios_node_bound(tree, node);
  *bound = std::abs(b) >= 1e300 ? -madpipe::solver::kInf : b;  // -DBL_MAX: no bound yet
}

// glp_intopt's return code and glp_mip_status as ours:
//   0 / GLP_EMIPGAP, mip status GLP_OPT     -> Optimal (GLP_EMIPGAP: within mip_gap)
//   0, mip status GLP_NOFEAS / GLP_ENOPFS   -> Infeasible
//   GLP_ETMLIM / GLP_ESTOP, GLP_FEAS or OPT -> Feasible (stopped on a limit with an incumbent)
//   GLP_ETMLIM / GLP_ESTOP, no incumbent    -> Timeout
//   GLP_ENODFS                              -> Error "unbounded"
//   GLP_EBOUND, GLP_EROOT, GLP_EFAIL, other -> Error with message
static madpipe::solver::Status map_status(int ret, int mip_status, std::string& message) {
  using madpipe::solver::Status;
  const bool incumbent = mip_status == GLP_OPT || mip_status == GLP_FEAS;
  switch (ret) {
    case 0:
    case GLP_EMIPGAP:
      if (mip_status == GLP_OPT) return Status::Optimal;
      if (mip_status == GLP_NOFEAS) return Status::Infeasible;
      if (mip_status == GLP_FEAS) return Status::Optimal;  // within the gap tolerance
      message = "glpk: finished without a solution status";
      return Status::Error;
    case GLP_ENOPFS:
      return Status::Infeasible;
    case GLP_ETMLIM:
    case GLP_ESTOP:
      return incumbent ? Status::Feasible : Status::Timeout;
    case GLP_ENODFS:
      message = "glpk: problem is unbounded";
      return Status::Error;
    case GLP_EBOUND:
      message = "glpk: incorrect bounds";
      return Status::Error;
    case GLP_EROOT:
      message = "glpk: no optimal basis for the root LP";
      return Status::Error;
    case GLP_EFAIL:
      message = "glpk: search abandoned (solver failure)";
      return Status::Error;
    default:
      message = "glpk: glp_intopt returned " + std::to_string(ret);
      return Status::Error;
  }
}

madpipe::solver::SolveResult GlpkBackend::solve(const madpipe::solver::Model& model,
                                                const madpipe::solver::SolveOptions& options) {
  using madpipe::solver::Status;
  madpipe::solver::SolveResult result;
  const TermOut term_out(options.log);
  const int n = model.num_vars(), m = model.num_rows();
  if (n == 0) {  // nothing to search
    bool feasible = true;
    for (int r = 0; r < m; ++r) feasible = feasible && model.row_lb(r) <= 0 && model.row_ub(r) >= 0;
    result.status = feasible ? Status::Optimal : Status::Infeasible;
    if (feasible) result.objective = result.bound = model.objective_offset();
    return result;
  }

  ProbPtr prob(glp_create_prob());
  glp_prob* p = prob.get();
  glp_set_obj_dir(p, GLP_MIN);
  glp_set_obj_coef(p, 0, model.objective_offset());
  glp_add_cols(p, n);
  for (int v = 0; v < n; ++v) {
    const int j = v + 1;
    const double lb = model.var_lb(v), ub = model.var_ub(v);
    glp_set_col_name(p, j, model.var_name(v).c_str());
    glp_set_col_bnds(p, j, bound_type(lb, ub), finite_or_zero(lb), finite_or_zero(ub));
    glp_set_col_kind(p, j, model.var_integer(v) ? GLP_IV : GLP_CV);
    glp_set_obj_coef(p, j, model.objective_coeff(v));
  }
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0};
  if (m > 0) glp_add_rows(p, m);
  for (int r = 0; r < m; ++r) {
    const int i = r + 1;
    const double lb = model.row_lb(r), ub = model.row_ub(r);
    glp_set_row_name(p, i, model.row_name(r).c_str());
    glp_set_row_bnds(p, i, bound_type(lb, ub), finite_or_zero(lb), finite_or_zero(ub));
    for (const madpipe::solver::Term& t : model.row_terms(r)) {
      if (t.coeff == 0) continue;
      ia.push_back(i);
      ja.push_back(t.var + 1);
      ar.push_back(t.coeff);
    }
  }
  glp_load_matrix(p, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());

  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = options.log ? GLP_MSG_ON : GLP_MSG_OFF;
  const double ms = std::max(0.0, options.time_limit_s) * 1000.0;
  parm.tm_lim = ms >= static_cast<double>(INT_MAX) ? INT_MAX : static_cast<int>(ms);
  parm.mip_gap = std::max(0.0, options.relative_gap);
  double bound = -madpipe::solver::kInf;  // node bounds are LP objectives: constant included
  parm.cb_func = track_bound;
  parm.cb_info = &bound;
  if (!model.hints().empty())
    result.message = "glpk: hint ignored (this backend takes no MIP start)";

  const int ret = glp_intopt(p, &parm);
  const int mip_status = glp_mip_status(p);
  std::string message;
  result.status = map_status(ret, mip_status, message);
  if (!message.empty())
    result.message = result.message.empty() ? message : result.message + "; " + message;
  if (result.status == Status::Optimal || result.status == Status::Feasible) {
    result.objective = glp_mip_obj_val(p);
    result.values.resize(static_cast<std::size_t>(n));
    for (int v = 0; v < n; ++v) {
      const double x = glp_mip_col_val(p, v + 1);
      result.values[static_cast<std::size_t>(v)] = model.var_integer(v) ? std::round(x) : x;
    }
  }
  result.bound = result.status == Status::Optimal ? result.objective : bound;
  if (result.status == Status::Optimal && ret == GLP_EMIPGAP && std::isfinite(bound))
    result.bound = bound;
  return result;
}

std::unique_ptr<madpipe::solver::Backend> madpipe::solver::detail::make_glpk_backend() {
  return std::make_unique<GlpkBackend>();
}
