#include "plan/step_order_check.hpp"

#include "core/error.hpp"
#include "plan/simulate.hpp"

#include <map>
#include <string>
#include <tuple>

namespace madpipe::plan {

namespace {
using ActionKey = std::tuple<int, int, int>;  // stage, kind, micro-batch

constexpr int kMaxListedMissing = 8;

// The ops a step of the plan's stages has, in a readable order.
std::vector<schedule::StepAction> step_actions(const Plan& plan, int micro_batches) {
  std::vector<schedule::StepAction> actions;
  for (int i = 0; i < micro_batches; ++i)
    for (int s = 0; s < static_cast<int>(plan.stages.size()); ++s) {
      actions.push_back({schedule::OpKind::F, s, i});
      actions.push_back({schedule::OpKind::B, s, i});
      if (plan.stages[s].splits_backward()) actions.push_back({schedule::OpKind::W, s, i});
    }
  return actions;
}
// The links' lists, where the order has them: every transfer of the step exactly once, in the
// list of its link.
template <typename Add>
void check_link_orders(const Plan& plan, const Add& add) {
  const schedule::StepOrder& order = *plan.step_order;
  if (order.per_link.empty()) return;
  const int gpus = plan.platform.gpus;
  std::map<ActionKey, std::pair<int, int>> link_of;  // the step's transfers -> their link
  for (const schedule::Op& op : schedule::micro_batch_chain(plan.stages, plan.platform))
    if (schedule::is_transfer(op.kind))
      for (int i = 0; i < order.micro_batches; ++i)
        link_of[{op.stage, static_cast<int>(op.kind), i}] = {op.link.a, op.link.b};
  std::map<ActionKey, int> seen;
  for (std::size_t l = 0; l < order.per_link.size(); ++l) {
    const schedule::LinkOrder& link = order.per_link[l];
    const std::string field = "/step_order/links/" + std::to_string(l);
    if (link.link.a < 0 || link.link.a >= link.link.b || link.link.b >= gpus) {
      add(field + "/link", "must be [a, b] with 0 <= a < b < " + std::to_string(gpus));
      continue;
    }
    for (std::size_t i = 0; i < link.transfers.size(); ++i) {
      const schedule::StepAction& a = link.transfers[i];
      const ActionKey key{a.stage, static_cast<int>(a.kind), a.micro_batch};
      const auto it = link_of.find(key);
      const std::string at = field + "/order/" + std::to_string(i);
      if (it == link_of.end())
        add(at, schedule::to_string(a) + " is not a transfer of the step");
      else if (it->second != std::make_pair(link.link.a, link.link.b))
        add(at, schedule::to_string(a) + " runs on link [" + std::to_string(it->second.first) +
                    ", " + std::to_string(it->second.second) + "]");
      else if (!seen.emplace(key, static_cast<int>(i)).second)
        add(at, schedule::to_string(a) + " appears twice");
    }
  }
  for (const auto& [key, link] : link_of)
    if (seen.count(key) == 0) {
      const auto [stage, kind, micro_batch] = key;
      add("/step_order/links",
          schedule::to_string({static_cast<schedule::OpKind>(kind), stage, micro_batch}) +
              " is in no link's list");
      return;  // one is enough to say the lists are incomplete
    }
}

}  // namespace

std::vector<Violation> step_order_violations(const Plan& plan, bool stages_ok) {
  std::vector<Violation> violations;
  if (!plan.step_order) return violations;
  const schedule::StepOrder& order = *plan.step_order;
  const auto add = [&](std::string field, std::string problem) {
    violations.push_back({std::move(field), std::move(problem)});
  };
  const int gpus = plan.platform.gpus;
  const int num_stages = static_cast<int>(plan.stages.size());
  if (order.micro_batches < 1)
    add("/step_order/micro_batches", "must be >= 1, got " + std::to_string(order.micro_batches));
  if (static_cast<int>(order.per_gpu.size()) != gpus)
    add("/step_order/gpus", "must have one list per gpu (" + std::to_string(gpus) + "), got " +
                                std::to_string(order.per_gpu.size()));
  if (plan.predicted.step && plan.predicted.step->micro_batches != order.micro_batches)
    add("/step_order/micro_batches", "must equal the predicted step's micro_batches (" +
                                         std::to_string(plan.predicted.step->micro_batches) +
                                         "), got " + std::to_string(order.micro_batches));
  if (!violations.empty() || !stages_ok) return violations;
  std::map<ActionKey, int> position;  // where each op is in its GPU's list
  for (int g = 0; g < gpus; ++g) {
    const std::vector<schedule::StepAction>& actions = order.per_gpu[g];
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      const schedule::StepAction& a = actions[i];
      const std::string field = "/step_order/gpus/" + std::to_string(g) + "/" + std::to_string(i);
      const std::string name = schedule::to_string(a);
      if (schedule::is_transfer(a.kind)) {
        add(field, name + ": a gpu's list holds F, B and W only (transfers go in links)");
        continue;
      }
      if (a.stage >= num_stages) {
        add(field, name + ": the plan has " + std::to_string(num_stages) + " stages");
        continue;
      }
      if (a.micro_batch >= order.micro_batches) {
        add(field,
            name + ": the step has micro-batches 0.." + std::to_string(order.micro_batches - 1));
        continue;
      }
      if (a.kind == schedule::OpKind::W && !plan.stages[a.stage].splits_backward()) {
        add(field, name + ": stage " + std::to_string(a.stage) +
                       " does not split its backward, it has no W");
        continue;
      }
      if (plan.stages[a.stage].gpu != g) {
        add(field, name + " runs on gpu " + std::to_string(plan.stages[a.stage].gpu) +
                       " (its stage's), not on gpu " + std::to_string(g));
        continue;
      }
      const auto [it, inserted] =
          position.emplace(ActionKey{a.stage, static_cast<int>(a.kind), a.micro_batch}, i);
      if (!inserted)
        add(field, name + " appears twice (also at " + std::to_string(it->second) + ")");
    }
  }
  int missing = 0;
  std::string listed;
  for (const schedule::StepAction& a : step_actions(plan, order.micro_batches)) {
    if (position.count({a.stage, static_cast<int>(a.kind), a.micro_batch}) > 0) continue;
    if (++missing <= kMaxListedMissing)
      listed += (listed.empty() ? "" : ", ") + schedule::to_string(a);
  }
  if (missing > 0)
    add("/step_order/gpus",
        "the step's " + listed +
            (missing > kMaxListedMissing
                 ? " and " + std::to_string(missing - kMaxListedMissing) + " more"
                 : std::string()) +
            (missing == 1 ? " is" : " are") + " in no gpu's list");
  for (const auto& [key, at] : position) {
    const auto [stage, kind, micro_batch] = key;
    if (kind == static_cast<int>(schedule::OpKind::F)) continue;
    const schedule::OpKind earlier =
        kind == static_cast<int>(schedule::OpKind::W) ? schedule::OpKind::B : schedule::OpKind::F;
    const auto before = position.find({stage, static_cast<int>(earlier), micro_batch});
    if (before == position.end() || before->second < at) continue;
    const schedule::StepAction later{static_cast<schedule::OpKind>(kind), stage, micro_batch};
    add("/step_order/gpus/" + std::to_string(plan.stages[stage].gpu) + "/" + std::to_string(at),
        schedule::to_string(later) + " comes before " +
            schedule::to_string({earlier, stage, micro_batch}) + ", which it needs");
  }
  check_link_orders(plan, add);
  if (!violations.empty()) return violations;
  SimOptions run;
  run.micro_batches = order.micro_batches;
  run.policy = StartPolicy::Asap;
  try {
    simulate(plan, run);
  } catch (const Error& e) {
    add(e.field().empty() ? "/step_order" : e.field(), e.problem());
  }
  return violations;
}

}  // namespace madpipe::plan
