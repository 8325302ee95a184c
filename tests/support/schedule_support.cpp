#include "support/schedule_support.hpp"

#include "core/chain.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;

ms::Stage madpipe::testing::hand_stage(int id, int gpu, double forward_ms, double backward_ms,
                                       std::int64_t output_bytes, std::int64_t stored_bytes) {
  ms::Stage stage;
  stage.id = id;
  stage.first_layer = id;
  stage.last_layer = id;
  stage.gpu = gpu;
  stage.forward_ms = forward_ms;
  stage.backward_ms = backward_ms;
  stage.stored_bytes = stored_bytes;
  stage.output_bytes = output_bytes;
  return stage;
}

std::vector<ms::Stage> madpipe::testing::chain_stages(const std::vector<double>& f,
                                                      const std::vector<double>& b) {
  std::vector<ms::Stage> stages;
  for (std::size_t s = 0; s < f.size(); ++s)
    stages.push_back(hand_stage(static_cast<int>(s), static_cast<int>(s), f[s], b[s]));
  return stages;
}

std::vector<ms::Stage> madpipe::testing::random_stages(std::mt19937& rng, const Profile& profile,
                                                       int num_stages, int gpus, bool contiguous) {
  const int layers = static_cast<int>(profile.layers.size());
  std::vector<int> cuts;
  for (int l = 1; l < layers; ++l) cuts.push_back(l);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  std::vector<int> first{0};
  first.insert(first.end(), cuts.begin(), cuts.begin() + (num_stages - 1));
  std::sort(first.begin(), first.end());
  std::vector<int> gpu_of;
  for (int s = 0; s < num_stages; ++s)
    gpu_of.push_back(contiguous ? s : static_cast<int>(rng() % gpus));
  return ms::make_stages(ChainCosts(profile), first, gpu_of);
}

std::vector<ms::Stage> madpipe::testing::random_stages(std::mt19937& rng, int layers,
                                                       int num_stages, int gpus, bool contiguous) {
  const Profile profile = random_chain(rng, layers);
  return random_stages(rng, profile, num_stages, gpus, contiguous);
}

double madpipe::testing::busiest_load(const std::vector<ms::Stage>& stages,
                                      const Platform& platform) {
  std::map<int, double> load;
  for (const ms::Op& op : ms::micro_batch_chain(stages, platform))
    load[ms::resource_of(op, platform.gpus)] += op.duration_ms;
  double most = 0;
  for (const auto& [resource, busy] : load) most = std::max(most, busy);
  return most;
}

double madpipe::testing::chain_length(const std::vector<ms::Stage>& stages,
                                      const Platform& platform) {
  double total = 0;
  for (const ms::Op& op : ms::micro_batch_chain(stages, platform)) total += op.duration_ms;
  return total;
}

double madpipe::testing::max_load(const std::vector<ms::PipelineResource>& resources) {
  double most = 0;
  for (const auto& r : resources) most = std::max(most, r.load_ms());
  return most;
}

double madpipe::testing::sum_of_loads(const std::vector<ms::PipelineResource>& resources) {
  double total = 0;
  for (const auto& r : resources) total += r.load_ms();
  return total;
}

std::vector<ms::Op> madpipe::testing::asap_chain(const std::vector<ms::Stage>& stages,
                                                 const Platform& platform) {
  std::vector<ms::Op> chain = ms::micro_batch_chain(stages, platform);
  double t = 0;
  for (ms::Op& op : chain) {
    op.start_ms = t;
    t += op.duration_ms;
  }
  return chain;
}

mplan::Plan madpipe::testing::plan_of(const std::vector<ms::Stage>& stages,
                                      const Platform& platform, const ms::Pattern& pattern) {
  mplan::Plan plan;
  plan.profile = "hand";
  plan.algorithm = "test";
  plan.platform = platform;
  plan.stages = stages;
  plan.pattern = pattern;
  mplan::fill_predicted(plan, 0.0);
  return plan;
}

mplan::Plan madpipe::testing::chain_plan(const Profile& profile,
                                         const std::vector<int>& first_layers,
                                         const std::vector<int>& gpus, const Platform& platform,
                                         double period_ms) {
  mplan::Plan plan;
  plan.profile = profile.name;
  plan.platform = platform;
  plan.algorithm = "hand";
  plan.stages = ms::make_stages(ChainCosts(profile), first_layers, gpus);
  const std::vector<ms::Op> chain = asap_chain(plan.stages, plan.platform);
  const double length = chain.empty() ? 0.0 : chain.back().start_ms + chain.back().duration_ms;
  plan.pattern = ms::pattern_from_absolute_times(chain, period_ms > 0 ? period_ms : length);
  mplan::fill_predicted(plan, 0.5 * plan.pattern.period_ms);
  return plan;
}

// Micro-batch 0: F0 [0,1) SA [1,1.5) F1 [1.5,2.5) B1 [2.5,4.5) SG [4.5,5) B0 [5,7), so stage 0
// keeps two micro-batches in flight.
mplan::Plan madpipe::testing::pipelined_plan() {
  return chain_plan(two_layer_profile(), {0, 1}, {0, 1}, small_platform(2), 4.0);
}

mplan::Plan madpipe::testing::repeated(const mplan::Plan& plan, int k) {
  mplan::Plan out = plan;
  const double period = plan.pattern.period_ms;
  out.pattern.period_ms = k * period;
  out.pattern.k = k;
  out.pattern.ops.clear();
  for (const ms::Op& op : plan.pattern.ops) {
    for (int c = 0; c < k; ++c) {
      ms::Op copy = op;
      copy.start_ms += c * period;
      copy.shift += c;
      out.pattern.ops.push_back(copy);
    }
  }
  mplan::fill_predicted(out, plan.predicted.lower_bound_period_ms);
  return out;
}

std::size_t madpipe::testing::find_op(const mplan::Plan& plan, ms::OpKind kind, int stage,
                                      std::size_t skip) {
  for (std::size_t i = 0; i < plan.pattern.ops.size(); ++i) {
    const ms::Op& op = plan.pattern.ops[i];
    if (op.kind == kind && op.stage == stage && skip-- == 0) return i;
  }
  ADD_FAILURE() << "no op " << ms::op_token(kind, stage);
  return 0;
}

std::string madpipe::testing::describe(const std::vector<mplan::Violation>& violations) {
  std::ostringstream out;
  for (const mplan::Violation& v : violations) out << v.field << ": " << v.problem << "\n";
  return out.str();
}

std::vector<std::string> madpipe::testing::violated_rows(const solver::Model& model,
                                                         const std::vector<double>& values) {
  std::vector<std::string> out;
  for (int v = 0; v < model.num_vars(); ++v) {
    const double x = values[static_cast<std::size_t>(v)];
    if (x < model.var_lb(v) - 1e-6 || x > model.var_ub(v) + 1e-6)
      out.push_back("bound of " + model.var_name(v));
    if (model.var_integer(v) && std::abs(x - std::round(x)) > 1e-9)
      out.push_back("integrality of " + model.var_name(v));
  }
  for (int r = 0; r < model.num_rows(); ++r) {
    double sum = 0, scale = 1;
    for (const solver::Term& t : model.row_terms(r)) {
      sum += t.coeff * values[static_cast<std::size_t>(t.var)];
      scale = std::max(scale, std::abs(t.coeff * values[static_cast<std::size_t>(t.var)]));
    }
    if (sum < model.row_lb(r) - 1e-7 * scale || sum > model.row_ub(r) + 1e-7 * scale)
      out.push_back(model.row_name(r));
  }
  return out;
}

std::vector<double> madpipe::testing::hint_values(const solver::Model& model) {
  std::vector<double> values(static_cast<std::size_t>(model.num_vars()), 0.0);
  for (const auto& [var, value] : model.hints())
    values[static_cast<std::size_t>(var.index)] = value;
  return values;
}
