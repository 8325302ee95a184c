// The published step orders (interleaved 1F1B, ZB-V) and their spelling.

#include "schedule/step_order.hpp"

#include "core/error.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {

// 2P one-layer stages, stage s on `gpu_of(s)`, backwards split when `split`.
template <typename GpuOf>
std::vector<ms::Stage> two_chunks_per_gpu(int gpus, bool split, GpuOf gpu_of) {
  std::vector<ms::Stage> stages;
  for (int s = 0; s < 2 * gpus; ++s) {
    ms::Stage stage = mt::hand_stage(s, gpu_of(s), 1.0, 2.0);
    if (split) stage.backward_weight_ms = 1.0;
    stages.push_back(stage);
  }
  return stages;
}

std::vector<ms::Stage> loop_stages(int gpus) {
  return two_chunks_per_gpu(gpus, false, [gpus](int s) { return s % gpus; });
}

std::vector<ms::Stage> v_stages(int gpus, bool split = true) {
  return two_chunks_per_gpu(gpus, split, [gpus](int s) { return s < gpus ? s : 2 * gpus - 1 - s; });
}

// Every op of the step once, on its stage's GPU, F before B before W of a micro-batch.
void expect_complete(const ms::StepOrder& order, const std::vector<ms::Stage>& stages, int m) {
  std::map<std::tuple<int, int, int>, int> at;  // (stage, kind, micro-batch) -> index on its GPU
  for (std::size_t g = 0; g < order.per_gpu.size(); ++g)
    for (std::size_t i = 0; i < order.per_gpu[g].size(); ++i) {
      const ms::StepAction& a = order.per_gpu[g][i];
      EXPECT_EQ(stages[a.stage].gpu, static_cast<int>(g)) << ms::to_string(a);
      EXPECT_LT(a.micro_batch, m) << ms::to_string(a);
      EXPECT_TRUE(at.emplace(std::make_tuple(a.stage, static_cast<int>(a.kind), a.micro_batch),
                             static_cast<int>(i))
                      .second)
          << ms::to_string(a) << " twice";
    }
  for (int s = 0; s < static_cast<int>(stages.size()); ++s)
    for (int i = 0; i < m; ++i) {
      const auto f = at.find({s, static_cast<int>(ms::OpKind::F), i});
      const auto b = at.find({s, static_cast<int>(ms::OpKind::B), i});
      ASSERT_NE(f, at.end()) << "F" << s << "." << i << " missing";
      ASSERT_NE(b, at.end()) << "B" << s << "." << i << " missing";
      EXPECT_LT(f->second, b->second);
      const auto w = at.find({s, static_cast<int>(ms::OpKind::W), i});
      EXPECT_EQ(w != at.end(), stages[s].splits_backward());
      if (w != at.end()) {
        EXPECT_LT(b->second, w->second);
      }
    }
}

std::string spelled(const std::vector<ms::StepAction>& actions) {
  std::string text;
  for (const ms::StepAction& a : actions) text += (text.empty() ? "" : " ") + ms::to_string(a);
  return text;
}

}  // namespace

TEST(StepOrder, ActionsSpellAndReadBack) {
  const ms::StepAction action{ms::OpKind::W, 12, 7};
  EXPECT_EQ(ms::to_string(action), "W12.7");
  EXPECT_EQ(ms::parse_step_action("W12.7", "/x"), action);
  const ms::StepAction send{ms::OpKind::SendGrad, 3, 0};
  EXPECT_EQ(ms::to_string(send), "SEND_GRAD3.0");
  EXPECT_EQ(ms::parse_step_action("SEND_GRAD3.0", "/x"), send);
  for (const char* bad :
       {"", "F", "F2", "X2.1", "F.1", "F2.", "F-2.1", "F2.1x", "SEND_X1.0", "1.0"}) {
    SCOPED_TRACE(bad);
    try {
      ms::parse_step_action(bad, "/step_order/gpus/0/3");
      FAIL() << "accepted";
    } catch (const madpipe::Error& e) {
      EXPECT_EQ(e.field(), "/step_order/gpus/0/3");
      EXPECT_NE(e.problem().find("F2.7"), std::string::npos) << e.problem();
    }
  }
}

// The orders of torch.distributed.pipelining's ScheduleInterleaved1F1B and
// ScheduleZBVZeroBubble for P = 2, 3, 4, 8 and several m (tests/data/torch_step_orders.json,
// written by make_torch_step_orders.py next to it).
TEST(StepOrder, AreTorchPipeliningsOrders) {
  std::ifstream in(mt::test_data_path("torch_step_orders.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json reference = nlohmann::json::parse(in);
  int compared = 0;
  for (const char* algorithm : {"interleaved", "zb-v"})
    for (const auto& [key, ranks] : reference.at(algorithm).items()) {
      SCOPED_TRACE(std::string(algorithm) + " p m = " + key);
      std::istringstream numbers(key);
      int p = 0, m = 0;
      numbers >> p >> m;
      const bool v = std::string(algorithm) == "zb-v";
      const std::vector<ms::Stage> stages = v ? v_stages(p) : loop_stages(p);
      const auto order =
          v ? ms::zb_v_order(stages, p, m) : ms::interleaved_1f1b_order(stages, p, m);
      ASSERT_TRUE(order.has_value());
      EXPECT_EQ(order->micro_batches, m);
      ASSERT_EQ(order->per_gpu.size(), ranks.size());
      for (int g = 0; g < p; ++g)
        EXPECT_EQ(spelled(order->per_gpu[g]), ranks[g].get<std::string>()) << "gpu " << g;
      expect_complete(*order, stages, m);
      ++compared;
    }
  EXPECT_GE(compared, 30);
}

// Megatron's order on 2 GPUs, 2 chunks, 4 micro-batches (rounds of 2): GPU 0 warms up with
// (chunks - 1) * 2 + 2 = 4 forwards, GPU 1 with 2.
TEST(StepOrder, InterleavedWarmsUpMegatronsWay) {
  const auto order = ms::interleaved_1f1b_order(loop_stages(2), 2, 4);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(spelled(order->per_gpu[0]),
            "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 B0.2 B0.3");
  EXPECT_EQ(spelled(order->per_gpu[1]),
            "F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 B1.2 B1.3");
}

TEST(StepOrder, InterleavedRefusesWhatItDoesNotDescribe) {
  EXPECT_FALSE(ms::interleaved_1f1b_order(v_stages(4, false), 4, 8).has_value());  // a V
  EXPECT_FALSE(ms::interleaved_1f1b_order(loop_stages(4), 4, 9).has_value());      // 9 % 2 rounds
  std::vector<ms::Stage> split = loop_stages(2);
  split[1].backward_weight_ms = 1.0;
  EXPECT_FALSE(ms::interleaved_1f1b_order(split, 2, 4).has_value());
}

// Without split backwards the V has no W ops; the order is complete either way.
TEST(StepOrder, ZbVWithWholeBackwardsHasNoWeightOps) {
  for (int p : {2, 3, 4, 8})
    for (int m : {1, p, 2 * p - 1, 2 * p, 4 * p})
      for (bool split : {true, false}) {
        SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m) +
                     (split ? " split" : " whole"));
        const auto order = ms::zb_v_order(v_stages(p, split), p, m);
        ASSERT_TRUE(order.has_value());
        expect_complete(*order, v_stages(p, split), m);
      }
  EXPECT_FALSE(ms::zb_v_order(loop_stages(4), 4, 8).has_value());
}
