#include "runtime/train/sync_pipeline.hpp"

#include "core/error.hpp"
#include "core/units.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/comm/nccl.hpp"
#include "runtime/train/layer_migration.hpp"
#include "runtime/train/stop_request.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace madpipe::runtime {
namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

madpipe::plan::LowerOptions lower_options(const madpipe::runtime::OutputSettings& c,
                                          const madpipe::plan::Plan& plan,
                                          const madpipe::runtime::LayerOutputs& outputs,
                                          int micro_batches, bool train) {
  madpipe::plan::LowerOptions options;
  options.micro_batches = micro_batches;
  options.train = train;
  options.posting = c.receive_buffers;
  options.lookahead = c.receive_lookahead;
  options.message_bytes = madpipe::runtime::stage_message_bytes(plan, outputs);
  return options;
}

madpipe::plan::Program lower_checked(const madpipe::plan::Plan& plan,
                                     const madpipe::plan::LowerOptions& options) {
  madpipe::plan::Program program = madpipe::plan::lower(plan, options);
  const std::string stuck = madpipe::plan::dry_run(program);
  if (!stuck.empty())
    throw madpipe::Error(madpipe::ErrorKind::Internal, "", "plan",
                         "the lowered plan deadlocks:\n" + stuck);
  return program;
}

void report_receive_arena(const madpipe::runtime::PipelineExecutor& executor,
                          const madpipe::runtime::ReplicaLayout& layout,
                          const std::function<void(const std::string&)>& say) {
  using madpipe::format_bytes;
  const auto& use = executor.arena_use();
  std::vector<double> all(5 * static_cast<std::size_t>(layout.pipeline_ranks), 0.0);
  if (layout.replica == 0) {
    const std::size_t at = 5 * static_cast<std::size_t>(layout.position);
    all[at] = static_cast<double>(use.planned_bytes);
    all[at + 1] = static_cast<double>(use.high_water_bytes);
    all[at + 2] = static_cast<double>(use.peak_live_bytes);
    all[at + 3] = static_cast<double>(use.sum_bytes);
    all[at + 4] = use.buffers;
  }
  all = madpipe::runtime::all_reduce_sum(all);
  std::string text =
      "receive arena per rank (planned / highest end used / most live / all buffers of the step):";
  for (int r = 0; r < layout.pipeline_ranks; ++r) {
    const double* u = &all[5 * static_cast<std::size_t>(r)];
    text += "\n  rank " + std::to_string(r) + ": ";
    text += u[4] == 0 ? "receives nothing"
                      : format_bytes(u[0]) + " / " + format_bytes(u[1]) + " / " +
                            format_bytes(u[2]) + " / " + format_bytes(u[3]) + " (" +
                            std::to_string(static_cast<int>(u[4])) + " buffers)";
  }
  say(text);
}

// `states`: optimizer state to restore into the new optimizers, by parameter (null: fresh).
std::unique_ptr<SyncPipeline> build_sync_pipeline(const madpipe::runtime::TrainConfig& c,
                                                  const madpipe::plan::Plan& plan,
                                                  madpipe::runtime::ChainModel& model,
                                                  const madpipe::runtime::LayerOutputs& outputs,
                                                  const madpipe::runtime::ReplicaGroups& groups,
                                                  const madpipe::runtime::ParamStates* states,
                                                  const madpipe::runtime::MasterWeights* masters) {
  using namespace madpipe;
  auto p = std::make_unique<SyncPipeline>();
  p->plan = plan;
  p->masters = masters;
  p->program = lower_checked(p->plan, lower_options(c, p->plan, outputs, c.micro_batches, true));
  p->eval_program =
      lower_checked(p->plan, lower_options(c, p->plan, outputs, c.eval_micro_batches, false));
  const int rank = groups.layout().position;
  p->transport = runtime::make_transport(c, p->plan, groups);
  p->executor =
      std::make_unique<runtime::PipelineExecutor>(model, p->plan, rank, *p->transport, outputs);
  if (groups.layout().replicas > 1) {
    p->averager = std::make_unique<runtime::GradientAverager>(
        groups.nccl() ? runtime::make_nccl_reducer(*groups.nccl())
                      : runtime::make_mpi_reducer(groups.replicas()),
        groups.layout().replicas, static_cast<int>(p->plan.stages.size()), c.micro_batches);
    p->averager->set_timeout(c.transfer_timeout);
  }
  // After each backward of a stage: bf16 gradients into the masters' fp32 ones, then the
  // stage's all-reduce over the replicas once its last backward of the step is done.
  if (masters || p->averager) {
    SyncPipeline* self = p.get();
    p->executor->on_backward([self](int s, int) {
      if (self->masters) self->masters->fold_gradients(self->executor->stage_parameters(s));
      if (self->averager)
        self->averager->backward_done(s, [&] { return self->trained_parameters(s); });
    });
  }
  if (!model.tied_parameters.empty())
    p->tied =
        std::make_unique<runtime::TiedGradients>(model, p->plan, rank, groups.pipeline(), masters);
  // A tensor that several local layers share (tied parameters) is stepped once, by the optimizer
  // of the first stage that has it.
  std::set<const c10::TensorImpl*> stepped;
  for (int s : p->executor->local_stages()) {
    std::vector<torch::Tensor> parameters;
    for (const torch::Tensor& parameter : p->trained_parameters(s))
      if (stepped.insert(parameter.unsafeGetTensorImpl()).second) parameters.push_back(parameter);
    torch::optim::Optimizer* optimizer = nullptr;
    if (!parameters.empty()) {
      p->optimizers.push_back(runtime::make_optimizer(c, parameters));
      optimizer = p->optimizers.back().get();
      if (states)
        for (const torch::Tensor& parameter : parameters) {
          auto it = states->find(runtime::param_key(parameter));
          if (it != states->end()) runtime::import_param_state(*optimizer, parameter, it->second);
        }
    }
    p->stage_optimizers.emplace_back(s, optimizer);
  }
  return p;
}

std::vector<torch::Tensor> SyncPipeline::trained_parameters(int stage) const {
  std::vector<torch::Tensor> parameters = executor->stage_parameters(stage);
  return masters ? masters->masters_of(parameters) : parameters;
}

// The mean compute time of every stage since the executors' last reset, on every rank.
std::vector<madpipe::partition::MeasuredStage> measured_stages(
    madpipe::runtime::PipelineExecutor& executor, double time_scale) {
  const auto& times = executor.stage_times();
  std::vector<double> sums;
  for (const auto& t : times)
    sums.insert(sums.end(), {t.forward_ms, t.backward_ms, static_cast<double>(t.forwards),
                             static_cast<double>(t.backwards)});
  sums = madpipe::runtime::all_reduce_sum(sums);
  std::vector<madpipe::partition::MeasuredStage> measured(times.size());
  for (std::size_t s = 0; s < times.size(); ++s) {
    auto& m = measured[s];
    m.forwards = static_cast<int>(sums[4 * s + 2]);
    m.backwards = static_cast<int>(sums[4 * s + 3]);
    m.forward_ms = m.forwards > 0 ? sums[4 * s] / m.forwards * time_scale : 0;
    m.backward_ms = m.backwards > 0 ? sums[4 * s + 1] / m.backwards * time_scale : 0;
  }
  return measured;
}

bool replan(const madpipe::runtime::TrainConfig& c, const madpipe::Profile& profile,
            double time_scale, int step, int first_measured,
            std::unique_ptr<SyncPipeline>& pipeline, madpipe::runtime::ChainModel& model,
            const madpipe::runtime::LayerOutputs& outputs,
            const madpipe::runtime::ReplicaGroups& groups, int rank,
            const std::function<void(const std::string&)>& say) {
  using namespace madpipe;
  const auto started = std::chrono::steady_clock::now();
  const std::vector<partition::MeasuredStage> measured =
      measured_stages(*pipeline->executor, time_scale);
  const std::string decision = computed_on_rank0(rank, [&] {
    std::string table = partition::format_measurements(pipeline->plan, measured);
    table.pop_back();  // say() ends the line
    say("re-planning after step " + std::to_string(step) +
        " on the stage times measured in steps " + std::to_string(first_measured) + ".." +
        std::to_string(step) + ":\n" + table);
    const partition::ReplanOutcome outcome = partition::replan_from_measurements(
        profile, pipeline->plan, measured, c.planner, c.replan_min_gain);
    say(outcome.reason);
    return outcome.switch_plan ? plan_text(outcome.plan) : std::string();
  });
  if (decision.empty()) return false;
  const plan::Plan next = plan::plan_from_json(nlohmann::json::parse(decision), "plan");
  runtime::ParamStates states;
  for (const auto& [s, optimizer] : pipeline->stage_optimizers)
    if (optimizer)
      for (const torch::Tensor& parameter : pipeline->executor->stage_parameters(s)) {
        std::vector<torch::Tensor> state = runtime::export_param_state(*optimizer, parameter);
        if (!state.empty()) states[runtime::param_key(parameter)] = std::move(state);
      }
  int moved = 0;
  for (int l = 0; l < model.size(); ++l)
    moved += runtime::rank_of_layer(pipeline->plan, l) != runtime::rank_of_layer(next, l) ? 1 : 0;
  const plan::Plan previous = pipeline->plan;
  pipeline.reset();  // the old executor and optimizers refer to tensors about to change hands
  runtime::migrate_layers(model, previous, next, groups.layout().position, states, outputs.device,
                          groups.pipeline());
  pipeline = build_sync_pipeline(c, next, model, outputs, groups, &states);
  if (rank == 0) plan::write_plan(next, (fs::path(c.output_dir) / "plan.json").string());
  char line[160];
  std::snprintf(line, sizeof line,
                "moved %d layer%s between ranks in %.2f s; new plan: %zu stages, predicted %s per "
                "micro-batch",
                moved, moved == 1 ? "" : "s", seconds_since(started), next.stages.size(),
                format_ms(next.predicted.period_ms).c_str());
  say(line);
  say(stage_summary(next, model));
  return true;
}

namespace {
bool all_finite(const std::vector<torch::Tensor>& parameters) {
  for (const torch::Tensor& p : parameters)
    if (p.grad().defined() && !torch::isfinite(p.grad()).all().item<bool>()) return false;
  return true;
}

// The step's health reduction: minima of the first kMinima entries, sums of the others.
enum HealthEntry {
  kBadMicroBatch,
  kBadStage,
  kStopSignal,
  kNegatedPeakBytes,  // a maximum, as the minimum of its negation
  kMinima,
  kSquaredNorm = kMinima,
  kLossSum,
  kLossCount,
  kHealthEntries
};

void reduce_health(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const double*>(in);
  auto* b = static_cast<double*>(inout);
  for (int i = 0; i < *count; ++i)
    b[i] = i % kHealthEntries < kMinima ? std::min(a[i], b[i]) : a[i] + b[i];
}

MPI_Op health_op() {
  static const MPI_Op op = [] {
    MPI_Op made = MPI_OP_NULL;
    MPI_Op_create(&reduce_health, 1, &made);
    return made;
  }();
  return op;
}

// This rank's local stages with gradients, and for each the sum of its gradients' squares (in
// double) over all of its parameters and over those the global norm counts here, read from the
// device at once (a read per parameter would wait for the device as many times). The norm
// reduces without a temporary of the gradient's size, where isfinite() holds several beyond the
// memory the plan gives the stage; a sum is finite only if every value is (a NaN or an infinity
// carries into it).
struct GradientSquares {
  std::vector<int> stages;
  std::vector<double> all, counted;
};

GradientSquares gradient_squares(const SyncPipeline& pipeline, bool counts_norm) {
  GradientSquares out;
  std::set<const void*> seen;  // a tied tensor on two local stages is one parameter
  std::vector<torch::Tensor> sums;
  for (const auto& [s, optimizer] : pipeline.stage_optimizers) {
    torch::Tensor all, counted;  // running sums: two scalars per stage, one more at a time
    for (const torch::Tensor& p : pipeline.trained_parameters(s)) {
      if (!p.grad().defined() || !seen.insert(param_key(p)).second) continue;
      // In the gradient's dtype (a dtype argument would cast the whole gradient first).
      const torch::Tensor square = at::linalg_vector_norm(p.grad()).to(torch::kDouble).square_();
      if (!all.defined()) {
        all = torch::zeros({}, square.options());
        counted = torch::zeros({}, square.options());
      }
      all.add_(square);
      if (counts_norm && !(pipeline.tied && pipeline.tied->is_later_copy(p))) counted.add_(square);
    }
    if (!all.defined()) continue;
    out.stages.push_back(s);
    sums.push_back(all);
    sums.push_back(counted);
  }
  if (sums.empty()) return out;
  pipeline.transport->await_compute("for this step's backward to finish");
  const torch::Tensor on_host = torch::stack(sums).to(torch::kCPU);
  const double* values = on_host.data_ptr<double>();
  for (std::size_t k = 0; k < out.stages.size(); ++k) {
    out.all.push_back(values[2 * k]);
    out.counted.push_back(values[2 * k + 1]);
  }
  return out;
}
}  // namespace

StepHealth agree_on_health(const SyncPipeline& pipeline, int bad_micro_batch, const StepLoss& loss,
                           std::int64_t peak_bytes, bool counts_norm, double timeout_s) {
  const GradientSquares squares = gradient_squares(pipeline, counts_norm);
  double local[kHealthEntries] = {static_cast<double>(bad_micro_batch),
                                  INT_MAX,
                                  -static_cast<double>(madpipe::runtime::stop_signal()),
                                  -static_cast<double>(peak_bytes),
                                  0.0,
                                  loss.sum,
                                  static_cast<double>(loss.count)};
  for (std::size_t k = 0; k < squares.stages.size(); ++k) {
    const int s = squares.stages[k];
    if (!std::isfinite(squares.all[k]) && !all_finite(pipeline.trained_parameters(s)))
      local[kBadStage] = std::min(local[kBadStage], static_cast<double>(s));
    local[kSquaredNorm] += squares.counted[k];
  }
  double all[kHealthEntries];
  all_reduce_within(local, all, kHealthEntries, MPI_DOUBLE, health_op(), MPI_COMM_WORLD, timeout_s,
                    "for the other ranks to end the step (is a rank stuck or gone? a longer "
                    "step needs a larger --transfer-timeout)");
  StepHealth health;
  health.stop_signal = -static_cast<int>(all[kStopSignal]);
  health.peak_bytes = -static_cast<std::int64_t>(all[kNegatedPeakBytes]);
  health.grad_norm = std::sqrt(all[kSquaredNorm]);
  health.loss = all[kLossSum] / std::max(1.0, all[kLossCount]);
  const auto& stages = pipeline.plan.stages;
  if (all[kBadMicroBatch] != INT_MAX)
    health.problem = "the loss of micro-batch " +
                     std::to_string(static_cast<int>(all[kBadMicroBatch])) + " (stage " +
                     std::to_string(stages.size() - 1) + " on rank " +
                     std::to_string(stages.back().gpu) + ") is not finite";
  else if (all[kBadStage] != INT_MAX) {
    health.only_gradients = true;
    health.problem =
        "a gradient of stage " + std::to_string(static_cast<int>(all[kBadStage])) + " (rank " +
        std::to_string(stages[static_cast<std::size_t>(all[kBadStage])].gpu) + ") is not finite";
  }
  return health;
}

void clip_gradients(const SyncPipeline& pipeline, double grad_norm, double max_norm) {
  // torch.nn.utils.clip_grad_norm_'s factor: the norm plus 1e-6 to max_norm, at most 1.
  const double factor = max_norm / (grad_norm + 1e-6);
  if (!(factor < 1)) return;
  std::set<const void*> seen;
  torch::NoGradGuard no_grad;
  for (const auto& [s, optimizer] : pipeline.stage_optimizers)
    for (const torch::Tensor& p : pipeline.trained_parameters(s))
      if (p.grad().defined() && seen.insert(param_key(p)).second) p.grad().mul_(factor);
}

}  // namespace madpipe::runtime

std::unique_ptr<madpipe::runtime::Transport> madpipe::runtime::make_transport(
    const OutputSettings& c, const plan::Plan& plan, const ReplicaGroups& groups) {
  if (NcclCommunicators* nccl = groups.nccl()) {
    nccl->add_channels(plan::message_channels(plan));
    return make_nccl_transport(*nccl);
  }
  return make_mpi_transport(static_cast<int>(plan.stages.size()), c.transfer_timeout,
                            groups.pipeline());
}
