// When the MILP solver fails (time limit without a solution, infeasible, numerical trouble, an
// exception), the planner keeps its heuristic plan and says so; a test backend forces each path.

#include "core/error.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "plan/validate.hpp"
#include "solver/solve.hpp"
#include "support/test_support.hpp"

#include <string>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace msv = madpipe::solver;
namespace mt = madpipe::testing;

namespace {

enum class Failure { Timeout, Infeasible, Numerical, Throws };

// A backend that fails in one chosen way and counts its calls.
class FailingBackend final : public msv::Backend {
 public:
  explicit FailingBackend(Failure failure) : failure_(failure) {}
  std::string_view name() const override { return "failing"; }
  msv::SolveResult solve(const msv::Model&, const msv::SolveOptions&) override {
    ++calls;
    msv::SolveResult result;
    switch (failure_) {
      case Failure::Timeout:
        result.status = msv::Status::Timeout;
        break;
      case Failure::Infeasible:
        result.status = msv::Status::Infeasible;
        break;
      case Failure::Numerical:
        result.status = msv::Status::Error;
        result.message = "numerical difficulties";
        break;
      case Failure::Throws:
        throw madpipe::Error(madpipe::ErrorKind::Solver, "", "solver", "the solver crashed");
    }
    return result;
  }
  static inline int calls = 0;

 private:
  Failure failure_;
};

// ResNet-50 on 4 GPUs of 8 GiB: the heuristic schedules stay above the lower bound, so the
// planner asks the ILP scheduler.
madpipe::Profile resnet50() { return madpipe::read_profile(mt::shipped_profile_path("resnet50")); }
madpipe::Platform tight_platform() { return mt::make_platform(4, std::int64_t{8} << 30, 12e6, 3); }

mp::PlanResult plan_with(Failure failure, mp::Algorithm algorithm) {
  msv::register_backend("failing", [failure] { return std::make_unique<FailingBackend>(failure); });
  FailingBackend::calls = 0;
  mp::PlannerOptions options;
  options.algorithm = algorithm;
  options.scheduler = mp::Scheduler::Ilp;
  options.milp.backend = "failing";
  return mp::make_plan(resnet50(), tight_platform(), options);
}

mp::PlanResult heuristic_plan() {
  mp::PlannerOptions options;
  options.scheduler = mp::Scheduler::Heuristic;
  return mp::make_plan(resnet50(), tight_platform(), options);
}

bool has_note(const mp::PlanResult& result, const std::string& text) {
  for (const std::string& note : result.notes)
    if (note.find(text) != std::string::npos) return true;
  return false;
}

std::string notes_of(const mp::PlanResult& result) {
  std::string all;
  for (const std::string& note : result.notes) all += note + "\n";
  return all;
}

}  // namespace

TEST(SolverFallback, ATimeoutKeepsTheHeuristicScheduleWithANote) {
  const mp::PlanResult result = plan_with(Failure::Timeout, mp::Algorithm::MadPipe);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_GT(FailingBackend::calls, 0);
  EXPECT_TRUE(has_note(result, "keeping the heuristic schedule")) << notes_of(result);
  EXPECT_TRUE(madpipe::plan::validate(result.plan).empty());
  EXPECT_DOUBLE_EQ(result.plan.predicted.period_ms, heuristic_plan().plan.predicted.period_ms);
}

TEST(SolverFallback, NumericalTroubleKeepsTheHeuristicScheduleWithANote) {
  const mp::PlanResult result = plan_with(Failure::Numerical, mp::Algorithm::MadPipe);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(has_note(result, "keeping the heuristic schedule")) << notes_of(result);
  EXPECT_TRUE(madpipe::plan::validate(result.plan).empty());
}

TEST(SolverFallback, AnInfeasibleIlpKeepsTheHeuristicSchedule) {
  const mp::PlanResult result = plan_with(Failure::Infeasible, mp::Algorithm::MadPipe);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(madpipe::plan::validate(result.plan).empty());
  EXPECT_DOUBLE_EQ(result.plan.predicted.period_ms, heuristic_plan().plan.predicted.period_ms);
}

TEST(SolverFallback, ASolverThatThrowsKeepsTheHeuristicScheduleWithANote) {
  const mp::PlanResult result = plan_with(Failure::Throws, mp::Algorithm::MadPipe);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(has_note(result, "the solver crashed")) << notes_of(result);
  EXPECT_TRUE(madpipe::plan::validate(result.plan).empty());
}

TEST(SolverFallback, TheFullIlpReturnsItsWarmStartOnATimeout) {
  const mp::PlanResult result = plan_with(Failure::Timeout, mp::Algorithm::Ilp);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(has_note(result, "full ILP: ")) << notes_of(result);
  EXPECT_TRUE(has_note(result, "returning the warm start")) << notes_of(result);
  EXPECT_TRUE(madpipe::plan::validate(result.plan).empty());
}

TEST(SolverFallback, TheFullIlpReturnsItsWarmStartWhenTheSolverThrows) {
  const mp::PlanResult result = plan_with(Failure::Throws, mp::Algorithm::Ilp);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(has_note(result, "the solver crashed")) << notes_of(result);
}

TEST(SolverFallback, RegisteredBackendsAreListedAfterTheBuiltOnes) {
  msv::register_backend("failing",
                        [] { return std::make_unique<FailingBackend>(Failure::Timeout); });
  const auto names = msv::built_backends();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "failing");
  EXPECT_EQ(msv::make_backend("failing")->name(), "failing");
}
