#include "runtime/train_planning.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/units.hpp"
#include "partition/data_parallel.hpp"
#include "partition/infeasible.hpp"
#include "plan/validate.hpp"
#include "runtime/mpi_session.hpp"
#include "runtime/profiler.hpp"

#include <filesystem>
#include <sstream>

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
madpipe::Platform platform_of(const madpipe::runtime::TrainConfig& c) {
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
    } else {
      madpipe::partition::PlannerOptions options = c.planner;
      options.progress = [&say](const std::string& line) { say("planning: " + line); };
      const auto result = madpipe::partition::make_plan(profile, platform_of(c), options);
      if (!result.feasible)
        throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "memory",
                             madpipe::partition::explain_infeasible(result.reason, profile,
                                                                    platform_of(c), options));
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

// Rank 0 measures the model (or reads --profile) and every rank gets the same profile, which
// rank 0 also writes to <output_dir>/profile.json.
madpipe::Profile agree_on_profile(const madpipe::runtime::TrainConfig& c,
                                  madpipe::runtime::ChainModel& model,
                                  const madpipe::runtime::Batch& sample,
                                  const torch::Device& device, int rank,
                                  const std::function<void(const std::string&)>& say) {
  const std::string text = computed_on_rank0(rank, [&] {
    madpipe::Profile profile;
    if (!c.profile.empty()) {
      profile = madpipe::read_profile(c.profile);
      if (profile.layers.size() != model.layers.size())
        throw madpipe::Error(madpipe::ErrorKind::InvalidInput, c.profile, "/layers",
                             "the profile has " + std::to_string(profile.layers.size()) +
                                 " layers but the model has " +
                                 std::to_string(model.layers.size()));
      say("profile of " + std::to_string(profile.layers.size()) + " layers read from " + c.profile);
    } else {
      madpipe::runtime::ProfilerOptions options;
      options.device = device;
      profile = madpipe::runtime::profile_model(model, sample, c.model, options).profile;
      say("profiled " + std::to_string(profile.layers.size()) + " layers on " + profile.device);
    }
    const std::string json = madpipe::profile_to_json(profile).dump(1);
    madpipe::write_file_atomically((fs::path(c.output_dir) / "profile.json").string(), json + "\n");
    return json;
  });
  return madpipe::profile_from_json(nlohmann::json::parse(text), "profile");
}

std::string stage_summary(const madpipe::plan::Plan& plan,
                          const madpipe::runtime::ChainModel& model) {
  std::ostringstream out;
  for (const auto& stage : plan.stages)
    out << "  stage " << stage.id << ": layers " << model.names[stage.first_layer] << ".."
        << model.names[stage.last_layer] << " on rank " << stage.gpu << '\n';
  return out.str();
}

}  // namespace madpipe::runtime
