#pragma once

#include "cli/options.hpp"
#include "cli/planner_options.hpp"
#include "cli/platform_options.hpp"
#include "runtime/config/train_config.hpp"

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// The option groups of `madpipe train`, each an INI section of its --config file; `madpipe
// profile` shares the model group and reads the same files.
po::options_description model_group(runtime::ModelSettings& config);
po::options_description training_group(runtime::TrainingSettings& config);
po::options_description output_group(runtime::OutputSettings& config);

// The platform and planner options `train` shares with `plan`, before they become the
// TrainConfig's platform and planner options (finish_train_config).
struct TrainPlanningOptions {
  PlatformOptions platform;
  PlannerSettings planner;
  partition::Algorithm algorithm = partition::Algorithm::MadPipe;
  // --weight-copies given: the plan counts it (plus 2BW's extra copies); else what the run's
  // precision, optimizer and mode hold (runtime::held_weight_copies).
  bool weight_copies_given = false;
};
// [platform]: `plan`'s platform options (--gpus counting every rank), --replicas and --device.
po::options_description platform_group(TrainPlanningOptions& options,
                                       runtime::PlanningSettings& config);
// [planner]: `plan`'s planner options but --micro-batches (the training's, also GPipe's step),
// --algorithm, --plan, --profile and the re-planning options.
po::options_description planner_group(TrainPlanningOptions& options,
                                      runtime::PlanningSettings& config);
// Sets config's platform and planner options from `options`; throws Error{InvalidInput} naming
// the option of the first problem.
void finish_train_config(const TrainPlanningOptions& options, runtime::TrainConfig& config);

// The INI sections of a training config file: [model], [training], [platform], [planner] and
// [output], plus `extra` sections of the calling command.
std::vector<ConfigSection> train_config_sections(const std::vector<ConfigSection>& extra = {});

}  // namespace madpipe::cli
