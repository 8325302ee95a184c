#include "solver/model.hpp"

#include "core/error.hpp"
#include "solver/linear_expr.hpp"
#include "solver/mps.hpp"
#include "solver/solve.hpp"

#include <sstream>
#include <string>

#include <gtest/gtest.h>

using madpipe::solver::kInf;
using madpipe::solver::Model;

TEST(SolverModel, BuildsAndReadsBack) {
  Model m;
  const auto x = m.add_var(0, 4, false, "x");
  const auto y = m.add_var(-kInf, kInf, true, "y");
  const auto r = m.add_row(1, 3, "r");
  m.add_term(r, x, 2);
  m.add_term(r, y, -1);
  m.add_term(r, x, 1);  // merged with the first term on x
  m.set_objective(y, 5);
  m.set_objective_offset(7);
  m.set_hint(y, 2);
  m.set_hint(y, 3);
  EXPECT_EQ(m.num_vars(), 2);
  EXPECT_EQ(m.num_rows(), 1);
  EXPECT_EQ(m.var_name(1), "y");
  EXPECT_TRUE(m.var_integer(1));
  EXPECT_EQ(m.var_lb(1), -kInf);
  ASSERT_EQ(m.row_terms(0).size(), 2u);
  EXPECT_EQ(m.row_terms(0)[0].coeff, 3);
  EXPECT_EQ(m.objective_coeff(1), 5);
  EXPECT_EQ(m.objective_offset(), 7);
  ASSERT_EQ(m.hints().size(), 1u);
  EXPECT_EQ(m.hints()[0].first.index, 1);
  EXPECT_EQ(m.hints()[0].second, 3);
  Model copy = m;
  EXPECT_EQ(copy, m);
  copy.set_objective(x, 1);
  EXPECT_NE(copy, m);
}

TEST(SolverModel, RejectsBadInput) {
  Model m;
  const auto x = m.add_var(0, 1, true, "x");
  const auto r = m.add_row(0, 1, "r");
  EXPECT_THROW(m.add_var(0, 1, false, "x"), madpipe::Error);
  EXPECT_THROW(m.add_row(0, 1, "r"), madpipe::Error);
  EXPECT_THROW(m.add_var(0, 1, false, ""), madpipe::Error);
  EXPECT_THROW(m.add_var(0, 1, false, "a b"), madpipe::Error);
  EXPECT_THROW(m.add_var(2, 1, false, "z"), madpipe::Error);
  EXPECT_THROW(m.add_term(r, madpipe::solver::Var{5}, 1), madpipe::Error);
  EXPECT_THROW(m.add_term(r, madpipe::solver::Var{}, 1), madpipe::Error);
  EXPECT_THROW(m.add_term(madpipe::solver::Row{3}, x, 1), madpipe::Error);
  EXPECT_THROW(m.set_objective(madpipe::solver::Var{1}, 1), madpipe::Error);
  EXPECT_THROW(m.set_hint(madpipe::solver::Var{1}, 1), madpipe::Error);
  try {
    m.add_var(0, 1, false, "x");
    FAIL() << "no throw";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
  }
}

TEST(SolverStatus, Names) {
  using madpipe::solver::Status;
  EXPECT_EQ(madpipe::solver::to_string(Status::Optimal), "optimal");
  EXPECT_EQ(madpipe::solver::to_string(Status::Feasible), "feasible");
  EXPECT_EQ(madpipe::solver::to_string(Status::Infeasible), "infeasible");
  EXPECT_EQ(madpipe::solver::to_string(Status::Timeout), "timeout");
  EXPECT_EQ(madpipe::solver::to_string(Status::Error), "error");
}

TEST(SolverBackends, UnknownBackendIsUnsupported) {
  try {
    madpipe::solver::make_backend("gurobi");
    FAIL() << "no throw";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("unknown or not built backend 'gurobi' (built: "),
              std::string::npos);
  }
}

TEST(SolverGap, SharedFormula) {
  EXPECT_DOUBLE_EQ(madpipe::solver::relative_gap(10, 9), 0.1);
  EXPECT_DOUBLE_EQ(madpipe::solver::relative_gap(-10, -11), 0.1);
  EXPECT_EQ(madpipe::solver::relative_gap(10, -kInf), kInf);
  EXPECT_EQ(madpipe::solver::relative_gap(kInf, 0), kInf);
  EXPECT_DOUBLE_EQ(madpipe::solver::relative_gap(0, 0), 0);
}

TEST(SolverMps, GoldenTinyModel) {
  Model m;
  const auto x = m.add_var(0, 4, false, "x");
  const auto y = m.add_var(0, 1, true, "y");
  const auto z = m.add_var(-kInf, kInf, false, "z");
  const auto w = m.add_var(-2, kInf, true, "w");
  const auto f = m.add_var(3, 3, false, "f");
  const auto le = m.add_row(-kInf, 10, "le");
  const auto ge = m.add_row(1, kInf, "ge");
  const auto eq = m.add_row(2, 2, "eq");
  const auto rg = m.add_row(-1, 5, "rg");
  m.add_term(le, x, 1);
  m.add_term(le, y, 2);
  m.add_term(ge, z, 1);
  m.add_term(eq, w, 1);
  m.add_term(rg, x, -1.5);
  m.set_objective(x, 1);
  m.set_objective(w, 0.25);
  m.set_objective_offset(4);
  (void)f;
  std::ostringstream out;
  madpipe::solver::write_mps(m, out);
  const std::string expected =
      "NAME madpipe\n"
      "ROWS\n"
      " N  obj\n"
      " L  le\n"
      " G  ge\n"
      " E  eq\n"
      " G  rg\n"
      "COLUMNS\n"
      "    x  obj  1\n"
      "    x  le  1\n"
      "    x  rg  -1.5\n"
      "    MARKER  'MARKER'  'INTORG'\n"
      "    y  le  2\n"
      "    MARKER  'MARKER'  'INTEND'\n"
      "    z  ge  1\n"
      "    MARKER  'MARKER'  'INTORG'\n"
      "    w  obj  0.25\n"
      "    w  eq  1\n"
      "    MARKER  'MARKER'  'INTEND'\n"
      "    f  obj  0\n"
      "RHS\n"
      "    RHS  obj  -4\n"
      "    RHS  le  10\n"
      "    RHS  ge  1\n"
      "    RHS  eq  2\n"
      "    RHS  rg  -1\n"
      "RANGES\n"
      "    RNG  rg  6\n"
      "BOUNDS\n"
      " UP BND x 4\n"
      " BV BND y\n"
      " FR BND z\n"
      " LO BND w -2\n"
      " PL BND w\n"
      " FX BND f 3\n"
      "ENDATA\n";
  EXPECT_EQ(out.str(), expected);
}

TEST(SolverMps, EmptyModelHasAllSections) {
  std::ostringstream out;
  madpipe::solver::write_mps(Model{}, out);
  EXPECT_EQ(out.str(), "NAME madpipe\nROWS\n N  obj\nCOLUMNS\nRHS\nENDATA\n");
}

TEST(LinearExpr, ArithmeticAndConstraints) {
  using madpipe::solver::LinearExpr;
  madpipe::solver::Model m;
  const madpipe::solver::Var x = m.add_var(0, 10, false, "x");
  const madpipe::solver::Var y = m.add_var(0, 10, true, "y");
  const LinearExpr e = 2.0 * (LinearExpr(x) - y) + 3.0 - (1.0 - LinearExpr(y)) * 4.0;
  // 2x - 2y + 3 - 4 + 4y = 2x + 2y - 1
  EXPECT_DOUBLE_EQ(e.constant(), -1.0);
  EXPECT_DOUBLE_EQ(e.evaluate({1.5, 2.0}), 2 * 1.5 + 2 * 2.0 - 1);
  const auto row = madpipe::solver::add_constraint(m, e, 0, 5, "r");
  EXPECT_DOUBLE_EQ(m.row_lb(row.index), 1.0);  // the constant moves to the bounds
  EXPECT_DOUBLE_EQ(m.row_ub(row.index), 6.0);
  double sum_x = 0, sum_y = 0;
  for (const auto& t : m.row_terms(row.index)) (t.var == x.index ? sum_x : sum_y) += t.coeff;
  EXPECT_DOUBLE_EQ(sum_x, 2.0);
  EXPECT_DOUBLE_EQ(sum_y, 2.0);
  EXPECT_DOUBLE_EQ(
      madpipe::solver::add_constraint(m, -LinearExpr(x), -madpipe::solver::kInf, 0, "s").index, 1);
}
