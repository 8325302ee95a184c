// Plans exported as torch.distributed.pipelining schedules (plan/torch_schedule.hpp), on plans
// that make_plan makes from the shipped profiles.

#include "plan/torch_schedule.hpp"

#include "core/error.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "plan/program.hpp"
#include "schedule/stage.hpp"
#include "support/planner_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mplan = madpipe::plan;
namespace mp = madpipe::partition;
namespace mt = madpipe::testing;

static mplan::Plan plan_for(const std::string& profile_name, mp::Algorithm algorithm, int gpus,
                            double memory_gib, double bandwidth_gb_per_s) {
  return mt::shipped_plan(profile_name, algorithm, gpus, memory_gib, bandwidth_gb_per_s);
}

// ResNet-50 on 4 GPUs: one stage per GPU.
static const mplan::Plan& contiguous_plan() {
  static const mplan::Plan plan = plan_for("resnet50", mp::Algorithm::Contiguous, 4, 8, 12);
  return plan;
}

// GPT-2-XL width on 4 GPUs of 16 GiB: MadPipe puts several stages on one GPU.
static const mplan::Plan& non_contiguous_plan() {
  static const mplan::Plan plan = plan_for("gpt2_xl16", mp::Algorithm::MadPipe, 4, 16, 50);
  return plan;
}

// GPT-2 small with 1F1B on 4 GPUs: 3 stages, GPU 3 runs none.
static const mplan::Plan& idle_gpu_plan() {
  static const mplan::Plan plan = plan_for("gpt2_small", mp::Algorithm::OneFOneB, 4, 16, 12);
  return plan;
}

struct Action {
  int stage = 0;
  char type = 'F';
  int micro_batch = 0;
};

// "12B3" -> {12, 'B', 3}; a failure for anything else.
static Action parse_action(const std::string& token) {
  std::istringstream in(token);
  Action action;
  in >> action.stage >> action.type >> action.micro_batch;
  EXPECT_TRUE(in && in.peek() == std::char_traits<char>::eof()) << token;
  EXPECT_TRUE(action.type == 'F' || action.type == 'B') << token;
  return action;
}

// One row per GPU; every stage's F and B of each micro-batch exactly once, on its GPU, F before B;
// each rank's order that of the lowered program's forwards and backwards.
static void expect_schedule_follows_plan(const mplan::Plan& plan, int micro_batches) {
  const mplan::TorchSchedule schedule = mplan::torch_schedule(plan, micro_batches);
  EXPECT_EQ(schedule.micro_batches, micro_batches);
  ASSERT_EQ(static_cast<int>(schedule.actions.size()), plan.platform.gpus);
  ASSERT_EQ(schedule.stage_to_rank.size(), plan.stages.size());
  for (std::size_t s = 0; s < plan.stages.size(); ++s)
    EXPECT_EQ(schedule.stage_to_rank[s], plan.stages[s].gpu);

  std::map<std::tuple<int, char, int>, int> seen;
  for (int rank = 0; rank < plan.platform.gpus; ++rank) {
    std::set<std::pair<int, int>> forwards;
    for (const std::string& token : schedule.actions[rank]) {
      const Action action = parse_action(token);
      EXPECT_EQ(plan.stages.at(action.stage).gpu, rank) << token;
      EXPECT_GE(action.micro_batch, 0);
      EXPECT_LT(action.micro_batch, micro_batches);
      ++seen[{action.stage, action.type, action.micro_batch}];
      if (action.type == 'F')
        forwards.insert({action.stage, action.micro_batch});
      else
        EXPECT_TRUE(forwards.count({action.stage, action.micro_batch})) << token << " before F";
    }
  }
  EXPECT_EQ(seen.size(), 2 * plan.stages.size() * micro_batches);
  for (const auto& entry : seen) EXPECT_EQ(entry.second, 1);

  const mplan::Program program = mplan::lower(plan, micro_batches);
  for (int rank = 0; rank < plan.platform.gpus; ++rank) {
    std::vector<std::string> lowered;
    for (const mplan::Instr& instr : program.per_gpu[rank])
      if (instr.kind == mplan::InstrKind::Forward || instr.kind == mplan::InstrKind::Backward)
        lowered.push_back(std::to_string(instr.stage) +
                          (instr.kind == mplan::InstrKind::Forward ? "F" : "B") +
                          std::to_string(instr.micro_batch));
    EXPECT_EQ(schedule.actions[rank], lowered) << "rank " << rank;
  }
}

TEST(TorchSchedule, ContiguousPlanFollowsTheLoweredProgram) {
  const mplan::Plan& plan = contiguous_plan();
  ASSERT_EQ(plan.stages.size(), 4u);
  for (int micro_batches : {1, 3, 8, 13}) expect_schedule_follows_plan(plan, micro_batches);
  // 1F1B*'s warm-up: the first stage runs the forwards of several micro-batches before its
  // first backward, the last one alternates.
  const mplan::TorchSchedule schedule = mplan::torch_schedule(plan, 8);
  EXPECT_EQ(schedule.actions[0].front(), "0F0");
  EXPECT_EQ(schedule.actions[3].front(), "3F0");
  EXPECT_EQ(schedule.actions[3][1], "3B0");
  EXPECT_EQ(schedule.actions[0].back(), "0B7");
}

TEST(TorchSchedule, NonContiguousPlanPutsSeveralStagesOnOneRank) {
  const mplan::Plan& plan = non_contiguous_plan();
  ASSERT_FALSE(madpipe::schedule::is_contiguous_allocation(plan.stages));
  for (int micro_batches : {1, 4, 8, 11}) expect_schedule_follows_plan(plan, micro_batches);
  const mplan::TorchSchedule schedule = mplan::torch_schedule(plan, 8);
  std::map<int, int> stages_per_rank;
  for (int rank : schedule.stage_to_rank) ++stages_per_rank[rank];
  int most = 0;
  for (const auto& entry : stages_per_rank) most = std::max(most, entry.second);
  EXPECT_GE(most, 2);
  for (int rank = 0; rank < plan.platform.gpus; ++rank)
    EXPECT_EQ(static_cast<int>(schedule.actions[rank].size()), 2 * 8 * stages_per_rank[rank]);
}

TEST(TorchSchedule, KPeriodicPlanFollowsTheLoweredProgram) {
  const mplan::Plan plan = plan_for("gpt2_xl16", mp::Algorithm::GPipe, 4, 32, 50);
  ASSERT_GT(plan.pattern.k, 1);
  for (int micro_batches : {1, plan.pattern.k, 2 * plan.pattern.k + 1})
    expect_schedule_follows_plan(plan, micro_batches);
}

TEST(TorchSchedule, AGpuWithoutAStageGetsAnEmptyRow) {
  const mplan::Plan& plan = idle_gpu_plan();
  ASSERT_EQ(plan.stages.size(), 3u);
  expect_schedule_follows_plan(plan, 6);
  const mplan::TorchSchedule schedule = mplan::torch_schedule(plan, 6);
  EXPECT_TRUE(schedule.actions[3].empty());
  const std::string csv = mplan::torch_schedule_csv(schedule);
  EXPECT_EQ(csv.substr(csv.size() - 2), "\n\n");  // rank 3's line is empty
  const std::vector<std::string> notes = mplan::torch_schedule_notes(plan);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("rank 3 runs no stage, and torch.distributed.pipelining needs one on "
                           "every rank of its pipeline group",
                           0),
            0u)
      << notes[0];
}

TEST(TorchSchedule, RejectsFewerThanOneMicroBatch) {
  for (int micro_batches : {0, -2}) {
    try {
      mplan::torch_schedule(contiguous_plan(), micro_batches);
      ADD_FAILURE() << "no error for " << micro_batches << " micro-batches";
    } catch (const madpipe::Error& e) {
      EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
      EXPECT_EQ(e.field(), "micro-batches");
      EXPECT_EQ(e.problem(), "must be >= 1, got " + std::to_string(micro_batches));
    }
  }
}

TEST(TorchSchedule, CsvHasOneLinePerRankOfCommaSeparatedActions) {
  mplan::TorchSchedule schedule;
  schedule.micro_batches = 2;
  schedule.stage_to_rank = {0, 1, 0};
  schedule.actions = {
      {"0F0", "0F1", "2F0", "2B0", "0B0", "2F1", "2B1", "0B1"}, {"1F0", "1F1", "1B0", "1B1"}, {}};
  EXPECT_EQ(mplan::torch_schedule_csv(schedule),
            "0F0,0F1,2F0,2B0,0B0,2F1,2B1,0B1\n1F0,1F1,1B0,1B1\n\n");

  const mplan::TorchSchedule exported = mplan::torch_schedule(contiguous_plan(), 4);
  const std::string csv = mplan::torch_schedule_csv(exported);
  std::istringstream lines(csv);
  std::string line;
  int rank = 0;
  while (std::getline(lines, line)) {
    std::string joined;
    for (const std::string& action : exported.actions.at(rank))
      joined += (joined.empty() ? "" : ",") + action;
    EXPECT_EQ(line, joined);
    ++rank;
  }
  EXPECT_EQ(rank, 4);
  EXPECT_EQ(csv.back(), '\n');
}

TEST(TorchSchedule, StagesJsonNamesEachStagesRankAndLayers) {
  const mplan::Plan& plan = non_contiguous_plan();
  const mplan::TorchSchedule schedule = mplan::torch_schedule(plan, 8);
  const nlohmann::ordered_json j = mplan::torch_stages_json(plan, schedule);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"format", "profile", "micro_batches", "ranks",
                                            "num_stages", "stages", "notes"}));
  EXPECT_EQ(j["format"], "madpipe.torch-stages/1");
  EXPECT_EQ(j["profile"], "gpt2_xl16");
  EXPECT_EQ(j["micro_batches"], 8);
  EXPECT_EQ(j["ranks"], 4);
  EXPECT_EQ(j["num_stages"], static_cast<int>(plan.stages.size()));
  ASSERT_EQ(j["stages"].size(), plan.stages.size());
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const nlohmann::ordered_json& stage = j["stages"][s];
    std::vector<std::string> stage_keys;
    for (auto it = stage.begin(); it != stage.end(); ++it) stage_keys.push_back(it.key());
    EXPECT_EQ(stage_keys, (std::vector<std::string>{"stage", "rank", "first_layer", "last_layer",
                                                    "remat", "offload"}));
    EXPECT_EQ(stage["stage"], static_cast<int>(s));
    EXPECT_EQ(stage["rank"], plan.stages[s].gpu);
    EXPECT_EQ(stage["first_layer"], plan.stages[s].first_layer);
    EXPECT_EQ(stage["last_layer"], plan.stages[s].last_layer);
    EXPECT_EQ(stage["remat"], "none");
    EXPECT_EQ(stage["offload"], "none");
  }
  EXPECT_TRUE(j["notes"].empty());

  // The text is the same JSON, one stage a line.
  const std::string text = mplan::torch_stages_text(plan, schedule);
  EXPECT_EQ(nlohmann::ordered_json::parse(text), j);
  EXPECT_NE(text.find("\n    {\"stage\": 0, \"rank\": " + std::to_string(plan.stages[0].gpu) +
                      ", \"first_layer\": 0, \"last_layer\": " +
                      std::to_string(plan.stages[0].last_layer) +
                      ", \"remat\": \"none\", \"offload\": \"none\"},\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.substr(text.size() - 16), "  \"notes\": []\n}\n");
}

TEST(TorchSchedule, NotesNameStagesThatRecomputeOrOffloadAndReplicas) {
  mplan::Plan plan = contiguous_plan();
  plan.stages[1].remat = madpipe::schedule::RematStrategy::Rotor;
  plan.stages[2].offload = madpipe::schedule::OffloadStrategy::Host;
  plan.stages[3].remat = madpipe::schedule::RematStrategy::Rotor;
  plan.stages[3].offload = madpipe::schedule::OffloadStrategy::Host;
  plan.replicas = 2;
  const std::vector<std::string> notes = mplan::torch_schedule_notes(plan);
  ASSERT_EQ(notes.size(), 4u);
  EXPECT_EQ(notes[0],
            "stage 1 recomputes activations (remat rotor) in madpipe; torch.distributed.pipelining "
            "runs its module as given, which keeps every activation on the GPU unless the module "
            "itself does otherwise, so rank 1 needs more memory than the plan predicts");
  EXPECT_EQ(
      notes[1].rfind("stage 2 offloads activations to host memory (offload host) in madpipe; ", 0),
      0u);
  EXPECT_EQ(notes[2].rfind("stage 3 recomputes activations and offloads them to host memory "
                           "(remat rotor, offload host) in madpipe; ",
                           0),
            0u);
  EXPECT_EQ(notes[3].rfind("the plan runs 2 data-parallel replicas of this pipeline", 0), 0u);

  const mplan::TorchSchedule schedule = mplan::torch_schedule(plan, 2);
  const nlohmann::ordered_json j = mplan::torch_stages_json(plan, schedule);
  EXPECT_EQ(j["stages"][1]["remat"], "rotor");
  EXPECT_EQ(j["stages"][2]["offload"], "host");
  EXPECT_EQ(j["notes"], nlohmann::ordered_json(notes));
}
