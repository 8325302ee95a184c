// A solver run in a child process: results come back whole, a crash or an abort becomes an
// error result instead of ending the planner.

#include "solver/isolated_backend.hpp"

#include "solver/model.hpp"

#include <chrono>
#include <cstdlib>
#include <limits>

#include <gtest/gtest.h>

namespace msv = madpipe::solver;

namespace {

enum class Behaviour { Answer, Abort, Throw, Hang, AnswerLate };

class ScriptedBackend final : public msv::Backend {
 public:
  explicit ScriptedBackend(Behaviour behaviour) : behaviour_(behaviour) {}
  std::string_view name() const override { return "scripted"; }
  msv::SolveResult solve(const msv::Model&, const msv::SolveOptions&) override {
    if (behaviour_ == Behaviour::Abort) std::abort();
    if (behaviour_ == Behaviour::Throw) throw 42;  // not even a std::exception
    if (behaviour_ == Behaviour::Hang)
      for (volatile bool forever = true; forever;) {
      }
    if (behaviour_ == Behaviour::AnswerLate) {  // works half a second, past the parent's first poll
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    msv::SolveResult result;
    result.status = msv::Status::Feasible;
    result.objective = 12.5;
    result.bound = 10;
    result.gap = 0.2;
    result.first_solution_seconds = 0.25;
    result.values = {1, 0, 3.75};
    result.message = "time limit";
    return result;
  }

 private:
  Behaviour behaviour_;
};

msv::SolveResult solve_isolated(Behaviour behaviour, msv::SolveOptions options = {}) {
  auto backend = msv::isolate_backend(std::make_unique<ScriptedBackend>(behaviour));
  return backend->solve(msv::Model{}, options);
}

}  // namespace

TEST(IsolatedBackend, TheChildsResultComesBackWhole) {
  const msv::SolveResult result = solve_isolated(Behaviour::Answer);
  EXPECT_EQ(result.status, msv::Status::Feasible);
  EXPECT_DOUBLE_EQ(result.objective, 12.5);
  EXPECT_DOUBLE_EQ(result.bound, 10);
  EXPECT_DOUBLE_EQ(result.gap, 0.2);
  EXPECT_DOUBLE_EQ(result.first_solution_seconds, 0.25);
  EXPECT_EQ(result.values, (std::vector<double>{1, 0, 3.75}));
  EXPECT_EQ(result.message, "time limit");
}

TEST(IsolatedBackend, AnAbortingSolverGivesAnErrorResult) {
  const msv::SolveResult result = solve_isolated(Behaviour::Abort);
  EXPECT_EQ(result.status, msv::Status::Error);
  EXPECT_NE(result.message.find("the scripted solver crashed (signal 6"), std::string::npos)
      << result.message;
  EXPECT_FALSE(result.has_solution());
}

TEST(IsolatedBackend, AnyExceptionInTheChildGivesAnErrorResult) {
  const msv::SolveResult result = solve_isolated(Behaviour::Throw);
  EXPECT_EQ(result.status, msv::Status::Error);
  EXPECT_EQ(result.message, "the solver failed with an exception");
}

// A solver that never returns is stopped at its wall-clock limit: a timeout without a solution.
TEST(IsolatedBackend, ASolverPastItsWallClockLimitIsStopped) {
  msv::SolveOptions options;
  options.wall_limit_s = 0.2;
  const msv::SolveResult result = solve_isolated(Behaviour::Hang, options);
  EXPECT_EQ(result.status, msv::Status::Timeout);
  EXPECT_EQ(result.backend, "scripted");
  EXPECT_EQ(result.message, "stopped at its wall-clock limit");
  EXPECT_FALSE(result.has_solution());
}

// A request without a time limit (madpipe.plan(time_limit=None)) has an infinite one: the child
// runs as long as it needs, and its answer comes back.
TEST(IsolatedBackend, ASolverWithoutATimeLimitIsNotStopped) {
  msv::SolveOptions options;
  options.time_limit_s = std::numeric_limits<double>::infinity();
  const msv::SolveResult result = solve_isolated(Behaviour::AnswerLate, options);
  EXPECT_EQ(result.status, msv::Status::Feasible) << result.message;
  EXPECT_DOUBLE_EQ(result.objective, 12.5);
}
