// The time budget of a planning request, on a clock the test moves: phases, the deadline, and the
// progress a user sees.

#include "partition/planning_budget.hpp"

#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;

namespace {
struct Fixture {
  double now = 100;
  std::vector<std::string> lines;

  mp::PlanningBudget make(double limit, bool detailed = false) {
    mp::PlanningBudget::Settings settings;
    settings.time_limit_s = limit;
    settings.progress = [this](const std::string& line) { lines.push_back(line); };
    settings.detailed = detailed;
    settings.clock = [this] { return now; };
    return mp::PlanningBudget(std::move(settings));
  }
};
}  // namespace

TEST(PlanningBudget, ChargesEachPhaseItsTime) {
  Fixture f;
  mp::PlanningBudget budget = f.make(10);
  budget.enter("dp");
  f.now += 2;
  budget.enter("schedule");
  f.now += 0.5;
  budget.enter("dp");
  f.now += 1;
  const std::vector<mp::PhaseTime> phases = budget.phases();
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[0].phase, "dp");
  EXPECT_DOUBLE_EQ(phases[0].seconds, 3);
  EXPECT_EQ(phases[1].phase, "schedule");
  EXPECT_DOUBLE_EQ(phases[1].seconds, 0.5);
  EXPECT_DOUBLE_EQ(budget.elapsed_s(), 3.5);
}

TEST(PlanningBudget, DeadlineAndShares) {
  Fixture f;
  mp::PlanningBudget budget = f.make(10);
  EXPECT_TRUE(budget.has_limit());
  EXPECT_FALSE(budget.expired());
  f.now += 5;
  EXPECT_DOUBLE_EQ(budget.seconds_left(), 5);
  EXPECT_TRUE(budget.used(0.5));
  EXPECT_FALSE(budget.used(0.75));
  f.now += 5;
  EXPECT_TRUE(budget.expired());
  mp::PlanningBudget unlimited = f.make(std::numeric_limits<double>::infinity());
  f.now += 1e6;
  EXPECT_FALSE(unlimited.has_limit());
  EXPECT_FALSE(unlimited.expired());
  EXPECT_FALSE(unlimited.used(0.5));
}

// Nothing for the first second; then a line at each new phase and at most one a second, with
// the phase, its step, the best period and the time left.
TEST(PlanningBudget, StatusLinesOnlyForLongRequests) {
  Fixture f;
  mp::PlanningBudget budget = f.make(10);
  budget.enter("contiguous-dp");
  budget.improved(12.5);
  f.now += 0.9;
  budget.step("3/10 targets");
  EXPECT_TRUE(f.lines.empty());
  f.now += 0.2;
  budget.step("4/10 targets");
  ASSERT_EQ(f.lines.size(), 1u);
  EXPECT_EQ(f.lines[0],
            "1.1 s: contiguous-dp (4/10 targets), best 12.50 ms per micro-batch, 8.9 s left");
  f.now += 0.5;
  budget.step("5/10 targets");
  EXPECT_EQ(f.lines.size(), 1u);  // within the second
  budget.enter("schedule");       // a new phase is always shown
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_EQ(f.lines[1], "1.6 s: schedule, best 12.50 ms per micro-batch, 8.4 s left");
  f.now += 1.5;
  budget.detail("scheduled allocation 1/3");  // details are not shown, but tick the status
  ASSERT_EQ(f.lines.size(), 3u);
}

TEST(PlanningBudget, DetailedProgressShowsEveryStepAndNoStatus) {
  Fixture f;
  mp::PlanningBudget budget = f.make(std::numeric_limits<double>::infinity(), true);
  budget.enter("dp");
  budget.detail("madpipe-dp iteration 1/10");
  f.now += 5;
  budget.enter("schedule");
  ASSERT_EQ(f.lines.size(), 1u);
  EXPECT_EQ(f.lines[0], "madpipe-dp iteration 1/10");
}

TEST(PlanningBudget, CutsAreKeptOnce) {
  Fixture f;
  mp::PlanningBudget budget = f.make(1);
  budget.cut("the local search");
  budget.cut("the stage ILPs");
  budget.cut("the local search");
  EXPECT_EQ(budget.cuts(), (std::vector<std::string>{"the local search", "the stage ILPs"}));
}
