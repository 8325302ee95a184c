#pragma once

#include "solver/model.hpp"

#include <string>
#include <vector>

namespace madpipe::solver {

// constant + sum(coeff * var): a value type for writing constraints the way they read on paper,
// e.g. add_constraint(model, tau[b] - tau[a] - d + K * (1 - w), 0, kInf, "order").
class LinearExpr {
 public:
  LinearExpr() = default;
  LinearExpr(double constant) : constant_(constant) {}             // NOLINT: implicit by design
  LinearExpr(Var var) { terms_.push_back(Term{var.index, 1.0}); }  // NOLINT

  double constant() const noexcept { return constant_; }
  const std::vector<Term>& terms() const noexcept { return terms_; }

  LinearExpr& operator+=(const LinearExpr& o);
  LinearExpr& operator-=(const LinearExpr& o);
  LinearExpr& operator*=(double c);

  // Value under a solution (one value per variable of the model).
  double evaluate(const std::vector<double>& values) const;

 private:
  double constant_ = 0;
  std::vector<Term> terms_;  // may repeat a variable; Model::add_term sums repeats
};

LinearExpr operator+(LinearExpr a, const LinearExpr& b);
LinearExpr operator-(LinearExpr a, const LinearExpr& b);
LinearExpr operator-(LinearExpr a);
LinearExpr operator*(double c, LinearExpr a);
LinearExpr operator*(LinearExpr a, double c);

// Adds lb <= expr <= ub as a row (the constant moves to the bounds).
Row add_constraint(Model& model, const LinearExpr& expr, double lb, double ub, std::string name);

}  // namespace madpipe::solver
