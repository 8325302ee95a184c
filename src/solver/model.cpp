#include "solver/model.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

static void check_name(const std::string& name, const std::string& kind) {
  if (name.empty()) madpipe::throw_invalid("", "solver", kind + " name must not be empty");
  const bool blank = std::any_of(name.begin(), name.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0 ||
           std::iscntrl(static_cast<unsigned char>(c)) != 0;
  });
  if (blank)
    madpipe::throw_invalid("", "solver", kind + " name '" + name + "' contains whitespace");
}

static void check_bounds(double lb, double ub, const std::string& what) {
  if (std::isnan(lb) || std::isnan(ub))
    madpipe::throw_invalid("", "solver", what + ": bound is NaN");
  if (lb == madpipe::solver::kInf || ub == -madpipe::solver::kInf)
    madpipe::throw_invalid("", "solver", what + ": lower bound +inf or upper bound -inf");
  if (lb > ub) {
    madpipe::throw_invalid("", "solver",
                           what + ": lower bound " + std::to_string(lb) + " exceeds upper bound " +
                               std::to_string(ub));
  }
}

static void check_finite(double value, const std::string& what) {
  if (!std::isfinite(value)) madpipe::throw_invalid("", "solver", what + " must be finite");
}

void madpipe::solver::Model::check_var(Var var, const char* what) const {
  if (var.index < 0 || var.index >= num_vars()) {
    throw_invalid("", "solver",
                  std::string(what) + ": unknown variable index " + std::to_string(var.index));
  }
}

madpipe::solver::Var madpipe::solver::Model::add_var(double lb, double ub, bool integer,
                                                     std::string name) {
  check_name(name, "variable");
  check_bounds(lb, ub, "variable '" + name + "'");
  if (!var_names_.insert(name).second)
    throw_invalid("", "solver", "duplicate variable name '" + name + "'");
  var_lb_.push_back(lb);
  var_ub_.push_back(ub);
  var_integer_.push_back(integer);
  var_name_.push_back(std::move(name));
  objective_.push_back(0);
  has_hint_.push_back(false);
  hint_.push_back(0);
  return Var{num_vars() - 1};
}

madpipe::solver::Row madpipe::solver::Model::add_row(double lb, double ub, std::string name) {
  check_name(name, "row");
  check_bounds(lb, ub, "row '" + name + "'");
  if (!row_names_.insert(name).second)
    throw_invalid("", "solver", "duplicate row name '" + name + "'");
  row_lb_.push_back(lb);
  row_ub_.push_back(ub);
  row_name_.push_back(std::move(name));
  row_terms_.emplace_back();
  return Row{num_rows() - 1};
}

void madpipe::solver::Model::add_term(Row row, Var var, double coeff) {
  if (row.index < 0 || row.index >= num_rows())
    throw_invalid("", "solver", "add_term: unknown row index " + std::to_string(row.index));
  check_var(var, "add_term");
  check_finite(coeff, "add_term: coefficient");
  std::vector<Term>& terms = row_terms_[static_cast<std::size_t>(row.index)];
  for (Term& t : terms) {
    if (t.var == var.index) {
      t.coeff += coeff;
      return;
    }
  }
  terms.push_back(Term{var.index, coeff});
}

void madpipe::solver::Model::set_objective(Var var, double coeff) {
  check_var(var, "set_objective");
  check_finite(coeff, "set_objective: coefficient");
  objective_[static_cast<std::size_t>(var.index)] = coeff;
}

void madpipe::solver::Model::set_objective_offset(double c) {
  check_finite(c, "set_objective_offset: offset");
  objective_offset_ = c;
}

void madpipe::solver::Model::set_hint(Var var, double value) {
  check_var(var, "set_hint");
  check_finite(value, "set_hint: value");
  has_hint_[static_cast<std::size_t>(var.index)] = true;
  hint_[static_cast<std::size_t>(var.index)] = value;
}

bool madpipe::solver::Model::has_integers() const noexcept {
  return std::find(var_integer_.begin(), var_integer_.end(), true) != var_integer_.end();
}

std::vector<std::pair<madpipe::solver::Var, double>> madpipe::solver::Model::hints() const {
  std::vector<std::pair<Var, double>> out;
  for (std::size_t v = 0; v < hint_.size(); ++v)
    if (has_hint_[v]) out.emplace_back(Var{static_cast<int>(v)}, hint_[v]);
  return out;
}

bool madpipe::solver::Model::operator==(const Model& o) const {
  return var_lb_ == o.var_lb_ && var_ub_ == o.var_ub_ && var_integer_ == o.var_integer_ &&
         var_name_ == o.var_name_ && objective_ == o.objective_ && has_hint_ == o.has_hint_ &&
         hint_ == o.hint_ && objective_offset_ == o.objective_offset_ && row_lb_ == o.row_lb_ &&
         row_ub_ == o.row_ub_ && row_name_ == o.row_name_ && row_terms_ == o.row_terms_;
}
