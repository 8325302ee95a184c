#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace madpipe::solver {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct Var {
  int index = -1;
};
struct Row {
  int index = -1;
};

// One coefficient of a row: coeff * var.
struct Term {
  int var = -1;
  double coeff = 0;
  bool operator==(const Term& o) const { return var == o.var && coeff == o.coeff; }
};

// A mixed-integer linear program, always minimized: a plain value (copy, compare, export) with no
// backend inside. Rows read lb <= sum(terms) <= ub; bounds may be +-kInf. Names of variables are
// unique (MPS export, CBC MIP start), as are names of rows. Read access is by index.
class Model {
 public:
  Var add_var(double lb, double ub, bool integer, std::string name);
  Row add_row(double lb, double ub, std::string name);
  // Adds coeff * var to the row; a second term on the same (row, var) adds to the first.
  void add_term(Row row, Var var, double coeff);
  void set_objective(Var var, double coeff);
  void set_objective_offset(double c);
  // Advisory MIP start value; a second call on the same variable replaces the first.
  void set_hint(Var var, double value);

  int num_vars() const noexcept { return static_cast<int>(var_lb_.size()); }
  int num_rows() const noexcept { return static_cast<int>(row_lb_.size()); }
  bool has_integers() const noexcept;

  double var_lb(int v) const { return var_lb_.at(static_cast<std::size_t>(v)); }
  double var_ub(int v) const { return var_ub_.at(static_cast<std::size_t>(v)); }
  bool var_integer(int v) const { return var_integer_.at(static_cast<std::size_t>(v)); }
  const std::string& var_name(int v) const { return var_name_.at(static_cast<std::size_t>(v)); }

  double row_lb(int r) const { return row_lb_.at(static_cast<std::size_t>(r)); }
  double row_ub(int r) const { return row_ub_.at(static_cast<std::size_t>(r)); }
  const std::string& row_name(int r) const { return row_name_.at(static_cast<std::size_t>(r)); }
  const std::vector<Term>& row_terms(int r) const {
    return row_terms_.at(static_cast<std::size_t>(r));
  }

  double objective_coeff(int v) const { return objective_.at(static_cast<std::size_t>(v)); }
  const std::vector<double>& objective_coeffs() const noexcept { return objective_; }
  double objective_offset() const noexcept { return objective_offset_; }

  // Hints in the order of the variables: (variable, value).
  std::vector<std::pair<Var, double>> hints() const;

  bool operator==(const Model& o) const;
  bool operator!=(const Model& o) const { return !(*this == o); }

 private:
  void check_var(Var var, const char* what) const;

  std::vector<double> var_lb_, var_ub_;
  std::vector<bool> var_integer_;
  std::vector<std::string> var_name_;
  std::vector<double> objective_;
  std::vector<bool> has_hint_;
  std::vector<double> hint_;
  double objective_offset_ = 0;

  std::vector<double> row_lb_, row_ub_;
  std::vector<std::string> row_name_;
  std::vector<std::vector<Term>> row_terms_;
  // Lookup only (derived from the names above).
  std::unordered_set<std::string> var_names_, row_names_;
};

}  // namespace madpipe::solver
