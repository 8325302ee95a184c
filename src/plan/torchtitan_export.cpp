#include "plan/torchtitan_export.hpp"

#include "core/error.hpp"

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace madpipe::plan {
namespace {

std::string stages_text(const std::vector<int>& stages) {
  std::string out;
  for (int s : stages) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out;
}

}  // namespace

std::vector<int> torchtitan_ranks(const Plan& plan) {
  const int gpus = plan.platform.gpus;
  const int stages = static_cast<int>(plan.stages.size());
  if (stages % gpus != 0)
    throw Error(ErrorKind::Unsupported, "", "stages",
                "torchtitan runs P = " + std::to_string(gpus) +
                    " pipeline ranks with the same number of stages each, but the plan has " +
                    std::to_string(stages) +
                    " stages (plan with stages a multiple of the GPUs, e.g. --algorithm "
                    "interleaved, or run the plan with madpipe train or --format torch)");
  std::vector<int> rank_of_gpu(static_cast<std::size_t>(gpus), -1);
  std::map<int, std::vector<int>> stages_of_gpu;
  for (const schedule::Stage& stage : plan.stages) {
    stages_of_gpu[stage.gpu].push_back(stage.id);
    int& rank = rank_of_gpu[static_cast<std::size_t>(stage.gpu)];
    if (rank < 0) rank = stage.id % gpus;
    if (rank != stage.id % gpus)
      throw Error(ErrorKind::Unsupported, "", "stages",
                  "GPU " + std::to_string(stage.gpu) + " holds stages " +
                      stages_text(stages_of_gpu[stage.gpu]) +
                      ", but torchtitan places stage s on rank s % " + std::to_string(gpus) +
                      " (a looped placement): this plan's placement does not run there (run it "
                      "with madpipe train or --format torch)");
  }
  if (plan.platform.gpus_per_node > 0)
    for (int g = 0; g < gpus; ++g)
      if (rank_of_gpu[static_cast<std::size_t>(g)] != g)
        throw Error(ErrorKind::Unsupported, "", "stages",
                    "the plan puts stage " +
                        std::to_string(rank_of_gpu[static_cast<std::size_t>(g)]) + " on GPU " +
                        std::to_string(g) +
                        ", and on a multi-node platform torchtitan's rank order cannot be changed "
                        "without moving stages between nodes");
  return rank_of_gpu;
}

TorchtitanExport torchtitan_export(const Plan& plan, int micro_batches,
                                   const std::vector<std::vector<std::string>>& module_names) {
  const int layers = plan.stages.back().last_layer + 1;
  if (static_cast<int>(module_names.size()) != layers)
    throw_invalid("", "module-names",
                  std::to_string(module_names.size()) + " entries, but the plan's chain has " +
                      std::to_string(layers) + " layers (one list of module names per layer)");
  TorchtitanExport out;
  out.rank_of_gpu = torchtitan_ranks(plan);
  const TorchSchedule by_gpu = torch_schedule(plan, micro_batches);
  out.schedule.micro_batches = by_gpu.micro_batches;
  out.schedule.actions.assign(by_gpu.actions.size(), {});
  for (std::size_t g = 0; g < by_gpu.actions.size(); ++g)
    out.schedule.actions[static_cast<std::size_t>(out.rank_of_gpu[g])] = by_gpu.actions[g];
  for (int gpu : by_gpu.stage_to_rank)
    out.schedule.stage_to_rank.push_back(out.rank_of_gpu[static_cast<std::size_t>(gpu)]);
  for (const schedule::Stage& stage : plan.stages) {
    std::vector<std::string> part;
    for (int l = stage.first_layer; l <= stage.last_layer; ++l)
      for (const std::string& name : module_names[static_cast<std::size_t>(l)])
        part.push_back(name);
    out.parts.push_back(part);
  }
  return out;
}

std::vector<std::vector<std::string>> decoder_module_names(const Profile& profile,
                                                           const std::string& file) {
  std::vector<std::vector<std::string>> names;
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const std::string& name = profile.layers[l].name;
    if (name == "embed") {
      names.push_back({"tok_embeddings"});
    } else if (name == "head") {
      names.push_back({"norm", "output"});
    } else if (name.rfind("block", 0) == 0 && name.size() > 5 &&
               name.find_first_not_of("0123456789", 5) == std::string::npos) {
      names.push_back({"layers." + name.substr(5)});
    } else {
      throw_invalid(file, "/layers/" + std::to_string(l) + "/name",
                    "'" + name +
                        "' is not a layer of madpipe's decoder (embed, block<i>, head): give "
                        "torchtitan's module names of each layer with --module-names FILE");
    }
  }
  return names;
}

std::string torchtitan_toml(const TorchtitanExport& exported, const std::string& csv_path,
                            int micro_batch_size) {
  const std::size_t ranks = exported.schedule.actions.size();
  std::string parts = "[\n";
  for (const std::vector<std::string>& part : exported.parts)
    parts += "  " + nlohmann::json(part).dump() + ",\n";
  parts += "]";
  // One stage per rank is a single-stage schedule to torchtitan, more a multi-stage one (it
  // checks which); with a CSV it runs the CSV's order either way.
  const bool single = exported.parts.size() == ranks;
  std::string toml = "[parallelism]\n";
  toml += "pipeline_parallel_degree = " + std::to_string(ranks) + "\n";
  toml += std::string("pipeline_parallel_schedule = \"") +
          (single ? "PipelineScheduleSingle" : "PipelineScheduleMulti") + "\"\n";
  toml += "pipeline_parallel_schedule_csv = " + nlohmann::json(csv_path).dump() + "\n";
  toml += "module_fqns_per_model_part = " + parts + "\n";
  if (micro_batch_size > 0)
    toml += "pipeline_parallel_microbatch_size = " + std::to_string(micro_batch_size) +
            "\n\n[training]\n"
            "local_batch_size = " +
            std::to_string(micro_batch_size * exported.schedule.micro_batches) + "\n";
  return toml;
}

}  // namespace madpipe::plan
