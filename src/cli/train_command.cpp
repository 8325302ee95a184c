#include "cli/train_command.hpp"

#include "cli/options.hpp"
#include "cli/platform_options.hpp"
#include "cli/train_options.hpp"
#include "core/error.hpp"
#include "runtime/config/launcher_check.hpp"
#include "runtime/train/trainer.hpp"

static const madpipe::cli::CommandSyntax kSyntax{
    "train", "[--config FILE] [options]",
    "Trains a model (built in, or a TorchScript chain: --model script) with pipelined model\n"
    "parallelism: one MPI process per pipeline rank (run it under mpirun with --gpus\n"
    "processes). It profiles the model, plans it (or loads --plan), then runs the plan's\n"
    "schedule step after step. Rank 0 prints progress and writes plan.json, profile.json and\n"
    "metrics.jsonl to --output-dir."};

int madpipe::cli::train_command(const std::vector<std::string>& args) {
  runtime::TrainConfig config;
  TrainPlanningOptions planning;
  po::options_description all(100);
  const po::options_description model = model_group(config);
  const po::options_description training = training_group(config);
  const po::options_description platform = platform_group(planning, config);
  const po::options_description planner = planner_group(planning, config);
  const po::options_description output = output_group(config);
  all.add(model).add(training).add(platform).add(planner).add(output);
  const std::vector<ConfigSection> sections = train_config_sections();
  po::variables_map parsed;
  if (!parse_options(args, kSyntax, all, sections, &parsed)) return 0;
  planning.weight_copies_given = given(parsed, "weight-copies");
  finish_train_config(planning, config);
#ifdef MADPIPE_HAS_RUNTIME
  runtime::check_started_by_an_mpi_launcher();
  runtime::check_train_config(config);  // before MPI starts: every rank would fail alike
  return runtime::train(config, nullptr, nullptr);
#else
  throw Error(ErrorKind::Unsupported, "", "train",
              "this madpipe was built without the runtime (LibTorch and MPI were not found)");
#endif
}
