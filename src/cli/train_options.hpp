#pragma once

#include "cli/options.hpp"
#include "runtime/trainer.hpp"

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// The option groups of `madpipe train`, each an INI section of its --config file; `madpipe
// profile` shares the model group and reads the same files.
po::options_description model_group(runtime::TrainConfig& config);
po::options_description training_group(runtime::TrainConfig& config);
po::options_description platform_group(runtime::TrainConfig& config);
po::options_description output_group(runtime::TrainConfig& config);

// The INI sections of a training config file: [model], [training], [platform], [planner] and
// [output], plus `extra` sections of the calling command.
std::vector<ConfigSection> train_config_sections(const std::vector<ConfigSection>& extra = {});

}  // namespace madpipe::cli
