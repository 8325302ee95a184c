// One conformance suite, run on every built backend.

#include "solver/model.hpp"
#include "solver/solve.hpp"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using madpipe::solver::kInf;
using madpipe::solver::Model;
using madpipe::solver::SolveOptions;
using madpipe::solver::SolveResult;
using madpipe::solver::Status;
using madpipe::solver::Var;

// max sum v_i x_i s.t. sum w_i x_i <= cap, x binary; written as min -value.
static Model knapsack(const std::vector<int>& values, const std::vector<int>& weights, int cap,
                      std::vector<Var>* vars = nullptr) {
  Model m;
  const auto row = m.add_row(-kInf, cap, "capacity");
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto x = m.add_var(0, 1, true, "x" + std::to_string(i));
    m.add_term(row, x, weights[i]);
    m.set_objective(x, -values[i]);
    if (vars) vars->push_back(x);
  }
  return m;
}

// Checks every row and bound of the model at the result's values.
static void expect_feasible(const Model& m, const SolveResult& r, double tol = 1e-6) {
  ASSERT_EQ(r.values.size(), static_cast<std::size_t>(m.num_vars()));
  for (int v = 0; v < m.num_vars(); ++v) {
    const double x = r.values[static_cast<std::size_t>(v)];
    EXPECT_GE(x, m.var_lb(v) - tol) << m.var_name(v);
    EXPECT_LE(x, m.var_ub(v) + tol) << m.var_name(v);
    if (m.var_integer(v)) {
      EXPECT_NEAR(x, std::round(x), tol) << m.var_name(v);
    }
  }
  for (int row = 0; row < m.num_rows(); ++row) {
    double sum = 0;
    for (const auto& t : m.row_terms(row))
      sum += t.coeff * r.values[static_cast<std::size_t>(t.var)];
    EXPECT_GE(sum, m.row_lb(row) - tol) << m.row_name(row);
    EXPECT_LE(sum, m.row_ub(row) + tol) << m.row_name(row);
  }
  double obj = m.objective_offset();
  for (int v = 0; v < m.num_vars(); ++v)
    obj += m.objective_coeff(v) * r.values[static_cast<std::size_t>(v)];
  EXPECT_NEAR(obj, r.objective, 1e-6 * std::max(1.0, std::abs(obj)));
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  SolveResult solve(const Model& m, SolveOptions options = {}) {
    auto backend = madpipe::solver::make_backend(GetParam());
    EXPECT_EQ(backend->name(), GetParam());
    SolveResult r = backend->solve(m, options);
    EXPECT_EQ(r.backend, GetParam());
    EXPECT_GE(r.seconds, 0);
    return r;
  }
};

TEST_P(Conformance, TinyLp) {
  // min -x - 2y s.t. x + y <= 4, x + 3y <= 6, x, y >= 0  ->  x = 3, y = 1, objective -5 (+ 10).
  Model m;
  const auto x = m.add_var(0, kInf, false, "x");
  const auto y = m.add_var(0, kInf, false, "y");
  const auto r1 = m.add_row(-kInf, 4, "r1");
  const auto r2 = m.add_row(-kInf, 6, "r2");
  m.add_term(r1, x, 1);
  m.add_term(r1, y, 1);
  m.add_term(r2, x, 1);
  m.add_term(r2, y, 3);
  m.set_objective(x, -1);
  m.set_objective(y, -2);
  m.set_objective_offset(10);
  const SolveResult r = solve(m);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  EXPECT_NEAR(r.objective, 5, 1e-6);
  EXPECT_NEAR(r.value(x), 3, 1e-6);
  EXPECT_NEAR(r.value(y), 1, 1e-6);
  EXPECT_LE(r.bound, r.objective + 1e-9);
  EXPECT_LE(r.gap, 1e-4);
  expect_feasible(m, r);
}

TEST_P(Conformance, RangedAndEqualityRows) {
  // min x + y s.t. 2 <= x - y <= 3, x + y = 10 (x, y free) -> objective 10, x - y in [2, 3].
  Model m;
  const auto x = m.add_var(-kInf, kInf, false, "x");
  const auto y = m.add_var(-kInf, kInf, false, "y");
  const auto d = m.add_row(2, 3, "d");
  const auto s = m.add_row(10, 10, "s");
  m.add_term(d, x, 1);
  m.add_term(d, y, -1);
  m.add_term(s, x, 1);
  m.add_term(s, y, 1);
  m.set_objective(x, 1);
  m.set_objective(y, 1);
  const SolveResult r = solve(m);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  EXPECT_NEAR(r.objective, 10, 1e-6);
  expect_feasible(m, r);
}

TEST_P(Conformance, KnapsackMip) {
  // values 10, 13, 7, 8; weights 5, 6, 3, 4; capacity 10.
  std::vector<Var> x;
  const Model m = knapsack({10, 13, 7, 8}, {5, 6, 3, 4}, 10, &x);
  const SolveResult r = solve(m);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  EXPECT_NEAR(r.objective, -21, 1e-6);  // 13 + 8 (w 10) beats 13 + 7 (w 9)
  EXPECT_EQ(r.value(x[1]), 1);
  EXPECT_EQ(r.value(x[3]), 1);
  expect_feasible(m, r);
}

TEST_P(Conformance, AssignmentProblem) {
  // 3 workers x 3 jobs; optimum 5 (w0->j1: 1, w1->j0: 2, w2->j2: 2).
  const double cost[3][3] = {{4, 1, 3}, {2, 5, 6}, {3, 4, 2}};
  Model m;
  Var x[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      x[i][j] = m.add_var(0, 1, true, "x_" + std::to_string(i) + "_" + std::to_string(j));
      m.set_objective(x[i][j], cost[i][j]);
    }
  for (int i = 0; i < 3; ++i) {
    const auto w = m.add_row(1, 1, "worker" + std::to_string(i));
    const auto j = m.add_row(1, 1, "job" + std::to_string(i));
    for (int k = 0; k < 3; ++k) {
      m.add_term(w, x[i][k], 1);
      m.add_term(j, x[k][i], 1);
    }
  }
  const SolveResult r = solve(m);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  EXPECT_NEAR(r.objective, 5, 1e-6);
  EXPECT_EQ(r.value(x[0][1]), 1);
  EXPECT_EQ(r.value(x[1][0]), 1);
  EXPECT_EQ(r.value(x[2][2]), 1);
  expect_feasible(m, r);
}

// Three jobs on one machine with release times, big-M disjunctions; minimize the makespan.
static Model scheduling(std::vector<Var>* starts, Var* makespan) {
  const double p[3] = {3, 2, 4};        // processing times
  const double release[3] = {0, 1, 6};  // earliest starts
  const double big_m = 100;
  Model m;
  *makespan = m.add_var(0, kInf, false, "makespan");
  m.set_objective(*makespan, 1);
  for (int i = 0; i < 3; ++i) {
    starts->push_back(m.add_var(release[i], kInf, false, "s" + std::to_string(i)));
    const auto end = m.add_row(p[i], kInf, "end" + std::to_string(i));  // C - s_i >= p_i
    m.add_term(end, *makespan, 1);
    m.add_term(end, (*starts)[static_cast<std::size_t>(i)], -1);
  }
  for (int i = 0; i < 3; ++i)
    for (int j = i + 1; j < 3; ++j) {
      // y = 1: i before j (s_j >= s_i + p_i); y = 0: j before i.
      const std::string ij = std::to_string(i) + std::to_string(j);
      const auto y = m.add_var(0, 1, true, "y" + ij);
      const auto a = m.add_row(p[i] - big_m, kInf, "a" + ij);  // s_j - s_i - M y >= p_i - M
      m.add_term(a, (*starts)[static_cast<std::size_t>(j)], 1);
      m.add_term(a, (*starts)[static_cast<std::size_t>(i)], -1);
      m.add_term(a, y, -big_m);
      const auto b = m.add_row(p[j], kInf, "b" + ij);  // s_i - s_j + M y >= p_j
      m.add_term(b, (*starts)[static_cast<std::size_t>(i)], 1);
      m.add_term(b, (*starts)[static_cast<std::size_t>(j)], -1);
      m.add_term(b, y, big_m);
    }
  return m;
}

TEST_P(Conformance, BigMScheduling) {
  // Jobs 0 [0,3), 1 [3,5), 2 [6,10): makespan 10 (job 2 cannot start before 6).
  std::vector<Var> s;
  Var c;
  const Model m = scheduling(&s, &c);
  const SolveResult r = solve(m);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  EXPECT_NEAR(r.objective, 10, 1e-6);
  EXPECT_NEAR(r.value(c), 10, 1e-6);
  expect_feasible(m, r);
}

TEST_P(Conformance, InfeasibleModel) {
  Model m;
  const auto x = m.add_var(0, 10, true, "x");
  const auto y = m.add_var(0, 10, true, "y");
  const auto a = m.add_row(7, kInf, "a");   // x + y >= 7
  const auto b = m.add_row(-kInf, 5, "b");  // x + y <= 5
  for (const auto& row : {a, b}) {
    m.add_term(row, x, 1);
    m.add_term(row, y, 1);
  }
  m.set_objective(x, 1);
  const SolveResult r = solve(m);
  EXPECT_EQ(r.status, Status::Infeasible) << r.message;
  EXPECT_TRUE(r.values.empty());
  EXPECT_EQ(r.objective, kInf);
  EXPECT_EQ(r.gap, kInf);
}

TEST_P(Conformance, EmptyModel) {
  Model m;
  m.set_objective_offset(3.5);
  const SolveResult r = solve(m);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  EXPECT_EQ(r.objective, 3.5);
  EXPECT_EQ(r.gap, 0);
  EXPECT_TRUE(r.values.empty());
}

TEST_P(Conformance, HintAccepted) {
  std::vector<Var> s;
  Var c;
  Model m = scheduling(&s, &c);
  // A feasible but suboptimal start: jobs 2, 0, 1 -> [6,10), [10,13), [13,15).
  m.set_hint(s[2], 6);
  m.set_hint(s[0], 10);
  m.set_hint(s[1], 13);
  m.set_hint(c, 15);
  for (int v = 0; v < m.num_vars(); ++v) {
    if (m.var_name(v) == "y01") m.set_hint(Var{v}, 1);
    if (m.var_name(v) == "y02") m.set_hint(Var{v}, 0);
    if (m.var_name(v) == "y12") m.set_hint(Var{v}, 0);
  }
  const SolveResult r = solve(m);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  EXPECT_NEAR(r.objective, 10, 1e-6);
  expect_feasible(m, r);
}

// 41 items of similar value/weight ratio, capacity 3/4 of the mean weight per item: branch and
// bound needs ~0.1 s, so a zero time limit stops it.
static Model hard_knapsack() {
  const int n = 41;
  std::vector<int> values, weights;
  unsigned state = 7;
  for (int i = 0; i < n; ++i) {
    state = state * 1103515245u + 12345u;
    const int w = 10000 + static_cast<int>((state >> 8) % 10000);
    weights.push_back(w);
    values.push_back(w + static_cast<int>((state >> 20) % 97));
  }
  return knapsack(values, weights, n * 7500);
}

static void expect_consistent_stop(const Model& m, const SolveResult& r) {
  if (r.status == Status::Timeout) {
    EXPECT_TRUE(r.values.empty());
    EXPECT_EQ(r.objective, kInf);
    EXPECT_EQ(r.gap, kInf);
  } else {
    expect_feasible(m, r);
    EXPECT_LE(r.bound, r.objective + 1e-9);
    EXPECT_GE(r.gap, 0);
    if (r.status == Status::Optimal) {
      EXPECT_LE(r.gap, 1e-6);
    }
  }
}

TEST_P(Conformance, ZeroTimeLimitStopsWithoutProof) {
  const Model m = hard_knapsack();
  SolveOptions options;
  options.time_limit_s = 0;
  options.relative_gap = 0;
  const SolveResult r = solve(m, options);
  EXPECT_TRUE(r.status == Status::Timeout || r.status == Status::Feasible)
      << madpipe::solver::to_string(r.status) << " " << r.message;
  expect_consistent_stop(m, r);
  EXPECT_LT(r.seconds, 5);
}

TEST_P(Conformance, TimeLimitNeverError) {
  const Model m = hard_knapsack();
  SolveOptions options;
  options.time_limit_s = 0.001;
  options.relative_gap = 0;
  const SolveResult r = solve(m, options);
  ASSERT_NE(r.status, Status::Error) << r.message;
  ASSERT_NE(r.status, Status::Infeasible) << r.message;
  expect_consistent_stop(m, r);
  EXPECT_LT(r.seconds, 30);
}

TEST_P(Conformance, GapOptionRespected) {
  const Model m = hard_knapsack();
  SolveOptions options;
  options.relative_gap = 0.05;
  const SolveResult r = solve(m, options);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  EXPECT_LE(r.gap, 0.05 + 1e-9);
  EXPECT_NEAR(r.objective, -308766, 0.05 * 308766);
  expect_feasible(m, r);
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance,
                         ::testing::ValuesIn(madpipe::solver::built_backends()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Conformance);

TEST(SolverBackends, BackendsAgreeOnObjectives) {
  const auto names = madpipe::solver::built_backends();
  if (names.size() < 2) GTEST_SKIP() << "fewer than two backends built";
  std::vector<Model> models;
  models.push_back(knapsack({10, 13, 7, 8}, {5, 6, 3, 4}, 10));
  models.push_back(hard_knapsack());
  std::vector<Var> s;
  Var c;
  models.push_back(scheduling(&s, &c));
  for (const Model& m : models) {
    std::vector<double> objectives;
    for (const auto& name : names) {
      SolveOptions options;
      options.relative_gap = 0;
      const SolveResult r = madpipe::solver::make_backend(name)->solve(m, options);
      ASSERT_EQ(r.status, Status::Optimal) << name << ": " << r.message;
      objectives.push_back(r.objective);
    }
    for (double o : objectives) EXPECT_NEAR(o, objectives.front(), 1e-6);
  }
}

TEST_P(Conformance, FirstSolutionTimeIsWithinTheSolveOrUnknown) {
  const Model m = knapsack({10, 13, 7, 8, 9, 4}, {5, 6, 3, 4, 5, 2}, 12);
  const SolveResult r = solve(m);
  ASSERT_EQ(r.status, Status::Optimal) << r.message;
  if (GetParam() == "cbc") {
    EXPECT_GE(r.first_solution_seconds, 0);
    EXPECT_LE(r.first_solution_seconds, r.seconds);
  } else {
    EXPECT_EQ(r.first_solution_seconds, -1);  // the backend does not tell
  }
  Model infeasible;
  const Var x = infeasible.add_var(0, 1, true, "x");
  const auto row = infeasible.add_row(2, kInf, "impossible");
  infeasible.add_term(row, x, 1);
  EXPECT_EQ(solve(infeasible).first_solution_seconds, -1);
}
