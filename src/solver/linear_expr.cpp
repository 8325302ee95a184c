#include "solver/linear_expr.hpp"

#include <utility>

namespace madpipe::solver {

LinearExpr& LinearExpr::operator+=(const LinearExpr& o) {
  constant_ += o.constant_;
  terms_.insert(terms_.end(), o.terms_.begin(), o.terms_.end());
  return *this;
}

LinearExpr& LinearExpr::operator-=(const LinearExpr& o) {
  constant_ -= o.constant_;
  for (const Term& t : o.terms_) terms_.push_back(Term{t.var, -t.coeff});
  return *this;
}

LinearExpr& LinearExpr::operator*=(double c) {
  constant_ *= c;
  for (Term& t : terms_) t.coeff *= c;
  return *this;
}

double LinearExpr::evaluate(const std::vector<double>& values) const {
  double sum = constant_;
  for (const Term& t : terms_) sum += t.coeff * values.at(static_cast<std::size_t>(t.var));
  return sum;
}

LinearExpr operator+(LinearExpr a, const LinearExpr& b) { return a += b; }
LinearExpr operator-(LinearExpr a, const LinearExpr& b) { return a -= b; }
LinearExpr operator-(LinearExpr a) { return a *= -1.0; }
LinearExpr operator*(double c, LinearExpr a) { return a *= c; }
LinearExpr operator*(LinearExpr a, double c) { return a *= c; }

Row add_constraint(Model& model, const LinearExpr& expr, double lb, double ub, std::string name) {
  const Row row = model.add_row(lb - expr.constant(), ub - expr.constant(), std::move(name));
  for (const Term& t : expr.terms())
    if (t.coeff != 0) model.add_term(row, Var{t.var}, t.coeff);
  return row;
}

}  // namespace madpipe::solver
