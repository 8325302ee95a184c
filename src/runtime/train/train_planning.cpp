#include "runtime/train/train_planning.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/units.hpp"
#include "partition/data_parallel.hpp"
#include "partition/plan_or_explain.hpp"
#include "plan/validate.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/device/op_timer.hpp"
#include "runtime/model/precision.hpp"
#include "runtime/profile/profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace madpipe::runtime {

std::string plan_text(const madpipe::plan::Plan& plan) {
  std::ostringstream out;
  madpipe::plan::write_plan(plan, out);
  return out.str();
}

// The platform of one replica's pipeline (partition::replica_platform: its own nodes when the
// replicas sit alike on them, else every link at the slowest bandwidth).
madpipe::Platform platform_of(const madpipe::runtime::PlanningSettings& c) {
  if (c.replicas == 1) return c.platform;  // its own nodes, a partial last one included
  return madpipe::partition::replica_platform(c.platform, pipeline_ranks(c));
}

// Rank 0 plans (or reads the plan) and every rank gets the same plan.
madpipe::plan::Plan agree_on_plan(const madpipe::runtime::TrainConfig& c,
                                  const madpipe::Profile& profile, int rank,
                                  const std::function<void(const std::string&)>& say) {
  const std::string text = computed_on_rank0(rank, [&] {
    madpipe::plan::Plan plan;
    if (!c.plan.empty()) {
      plan = madpipe::plan::read_plan(c.plan);
      madpipe::plan::throw_if_invalid(madpipe::plan::validate(plan), c.plan);
      if (plan.step_order && plan.step_order->micro_batches != c.micro_batches)
        say("plan note: its step order is for " + std::to_string(plan.step_order->micro_batches) +
            " micro-batches, this run's steps have " + std::to_string(c.micro_batches) +
            ": they follow the pattern (plan with --micro-batches " +
            std::to_string(c.micro_batches) + " to run an order)");
    } else {
      madpipe::partition::PlannerOptions options = c.planner;
      options.progress = [&say](const std::string& line) { say("planning: " + line); };
      madpipe::partition::Explaining explaining;
      explaining.field = "memory";
      const auto result =
          madpipe::partition::plan_or_explain(profile, platform_of(c), options, explaining);
      plan = result.plan;
      for (const std::string& note : result.notes) say("planner note: " + note);
      say(std::string("planned with ") + madpipe::partition::to_string(options.algorithm) + " in " +
          std::to_string(result.planning_seconds).substr(0, 5) + " s");
    }
    if (!c.plan.empty() && plan.replicas != c.replicas)
      throw madpipe::Error(
          madpipe::ErrorKind::InvalidInput, c.plan, "/replicas",
          "the plan is for " + std::to_string(plan.replicas) + " data-parallel replica" +
              (plan.replicas == 1 ? "" : "s") + " but --replicas is " + std::to_string(c.replicas) +
              " (run it with --replicas " + std::to_string(plan.replicas) + " --gpus " +
              std::to_string(plan.replicas * plan.platform.gpus) + ")");
    plan.replicas = c.replicas;
    if (plan.platform.gpus != pipeline_ranks(c))
      throw madpipe::Error(
          madpipe::ErrorKind::InvalidInput, c.plan, "/platform/gpus",
          "the plan is for " + std::to_string(plan.platform.gpus) + " GPUs but " +
              (c.replicas == 1 ? "--gpus is " + std::to_string(c.platform.gpus)
                               : "--gpus " + std::to_string(c.platform.gpus) + " with --replicas " +
                                     std::to_string(c.replicas) + " gives pipelines of " +
                                     std::to_string(pipeline_ranks(c)) + " GPUs"));
    if (plan.stages.back().last_layer + 1 != static_cast<int>(profile.layers.size()))
      throw madpipe::Error(madpipe::ErrorKind::InvalidInput, c.plan, "/stages",
                           "the plan covers " + std::to_string(plan.stages.back().last_layer + 1) +
                               " layers but the model has " +
                               std::to_string(profile.layers.size()));
    return plan_text(plan);
  });
  return madpipe::plan::plan_from_json(nlohmann::json::parse(text), "plan");
}

// Every rank runs `measure`; when it throws on any rank, every rank throws the message of the
// first rank where it did, so that no rank is left waiting in a collective.
template <typename Measure>
void on_every_rank(const Measure& measure) {
  std::string failure;
  try {
    measure();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int mine = failure.empty() ? size : rank, first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return;
  failure = madpipe::runtime::broadcast_string(failure, first);
  throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "",
                       "rank " + std::to_string(first) + ": " + failure);
}

// Every rank measures the model at once (or rank 0 reads --profile) and every rank gets the same
// profile, which rank 0 also writes to <output_dir>/profile.json. Measuring on every rank at once
// gives the speed of the run: ranks that share cores, or a GPU, slow each other down as they will
// in training. The profile keeps each layer's mean time over the ranks.
madpipe::Profile agree_on_profile(const madpipe::runtime::TrainConfig& c,
                                  madpipe::runtime::ChainModel& model,
                                  const madpipe::runtime::Batch& sample,
                                  const torch::Device& device, int rank,
                                  const std::function<void(const std::string&)>& say,
                                  double* cpu_sharing) {
  if (cpu_sharing) *cpu_sharing = 1;
  auto written = [&](const madpipe::Profile& profile) {
    const std::string json = madpipe::profile_to_json(profile).dump(1);
    madpipe::write_file_atomically((fs::path(c.output_dir) / "profile.json").string(), json + "\n");
    return json;
  };
  std::string text;
  if (!c.profile.empty()) {
    text = computed_on_rank0(rank, [&] {
      const madpipe::Profile profile = madpipe::read_profile(c.profile);
      if (static_cast<int>(profile.layers.size()) != model.size())
        throw madpipe::Error(madpipe::ErrorKind::InvalidInput, c.profile, "/layers",
                             "the profile has " + std::to_string(profile.layers.size()) +
                                 " layers but the model has " + std::to_string(model.size()));
      const std::string measured = profile.dtype.empty() ? "float32" : profile.dtype;
      const std::string wanted = madpipe::compute_dtype_name(c.precision);
      const bool reduced = measured == "bfloat16" || measured == "float16" || wanted != "float32";
      if (reduced && measured != wanted)
        throw madpipe::Error(madpipe::ErrorKind::InvalidInput, c.profile, "/dtype",
                             "the profile was measured in " + measured +
                                 " but this run trains in " + wanted + " (--precision " +
                                 name_of(madpipe::runtime::kPrecisionNames, c.precision) +
                                 "): profile again with the same --precision");
      // A profile's costs are for its micro-batch size: another size would plan another model.
      if (profile.batch > 0 && profile.batch != c.micro_batch_size)
        throw madpipe::Error(madpipe::ErrorKind::InvalidInput, c.profile, "/batch",
                             "the profile was measured with micro-batches of " +
                                 std::to_string(profile.batch) +
                                 " samples but this run trains "
                                 "with --micro-batch-size " +
                                 std::to_string(c.micro_batch_size) +
                                 ": profile again at that size, or train with "
                                 "--micro-batch-size " +
                                 std::to_string(profile.batch));
      say("profile of " + std::to_string(profile.layers.size()) + " layers read from " + c.profile);
      return written(profile);
    });
  } else {
    madpipe::Profile profile;
    double wall_s = 0, cpu_s = 0;
    on_every_rank([&] {
      madpipe::runtime::ProfilerOptions options;
      options.device = device;
      options.clock = madpipe::runtime::HostClock::ThreadCpu;
      options.layer_dtype = madpipe::runtime::compute_dtype(c.precision);
      const auto wall_start = std::chrono::steady_clock::now();
      const double cpu_start = thread_cpu_seconds();
      profile = madpipe::runtime::profile_model(
                    model, sample, name_of(madpipe::runtime::kModelKindNames, c.model), options)
                    .profile;
      cpu_s = thread_cpu_seconds() - cpu_start;
      wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    });
    std::vector<double> sums{wall_s / std::max(cpu_s, 1e-9)};
    for (const madpipe::Layer& layer : profile.layers)
      sums.insert(sums.end(), {layer.forward_ms, layer.backward_ms});
    sums = all_reduce_sum(sums);
    int ranks = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    // CPU ranks time each op by its CPU time (what it costs) and scale it by how much slower than
    // alone the ranks ran while all measured at once: wall time over CPU time. Ranks that share
    // cores get their share of them in training too (a waiting rank polls MPI), so a layer then
    // takes its cost times that factor. A wall clock around each op would miss most of it: an op
    // of a few milliseconds mostly runs within one time slice, at full speed.
    const double slowdown = device.is_cpu() ? std::max(1.0, sums[0] / ranks) : 1.0;
    if (cpu_sharing) *cpu_sharing = slowdown;
    for (std::size_t l = 0; l < profile.layers.size(); ++l) {
      profile.layers[l].forward_ms = sums[1 + 2 * l] / ranks * slowdown;
      set_backward_ms(profile.layers[l], sums[2 + 2 * l] / ranks * slowdown);
    }
    char shared[160] = "";
    if (slowdown > 1.05)
      std::snprintf(shared, sizeof shared,
                    "; the ranks share the cores, each ran %.2fx slower than alone: times scaled",
                    slowdown);
    say("profiled " + std::to_string(profile.layers.size()) + " layers on " + profile.device +
        (ranks > 1 ? ", all " + std::to_string(ranks) + " ranks at once (mean times)" : "") +
        shared);
    text = computed_on_rank0(rank, [&] { return written(profile); });
  }
  return madpipe::profile_from_json(nlohmann::json::parse(text), "profile");
}

std::string stage_summary(const madpipe::plan::Plan& plan,
                          const madpipe::runtime::ChainModel& model) {
  std::ostringstream out;
  for (const auto& stage : plan.stages)
    out << "  stage " << stage.id << ": layers " << model.names[stage.first_layer] << ".."
        << model.names[stage.last_layer] << " on rank " << stage.gpu
        << (stage.splits_backward() ? " (backward split: W apart)" : "") << '\n';
  return out.str();
}

}  // namespace madpipe::runtime
