// Fuzz target of the INI reader of --config: `madpipe plan --profile p.json --config FILE` with
// the input as FILE, parsed by parse_options with the plan command's option groups and config
// sections ([platform], [planner]), then turned into the planner's platform and options as
// run_plan does. parse_options documents boost::program_options::error and madpipe::Error;
// anything else is a finding.

#include "fuzz_support.hpp"

#include "cli/options.hpp"
#include "cli/plan_command.hpp"
#include "cli/planner_options.hpp"
#include "cli/platform_options.hpp"
#include "core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>

namespace cli = madpipe::cli;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cli::CommandSyntax kSyntax{"plan", "--config FILE", "fuzzing the config reader"};
  static const std::vector<cli::ConfigSection> kSections = {cli::platform_config_section(),
                                                            cli::planner_config_section()};
  const std::string path = madpipe::fuzz::input_file(data, size, ".ini");
  cli::PlanOptions options;
  try {
    const auto description = cli::plan_options_description(options);
    if (!cli::parse_options({"--profile", "p.json", "--config", path}, kSyntax, description,
                            kSections))
      madpipe::fuzz::finding("a config file asked for --help");
    const madpipe::Platform platform = cli::to_platform(options.platform);
    (void)cli::to_planner_options(options.planner, options.algorithm, platform);
    (void)cli::describe(platform);
  } catch (const madpipe::Error& e) {
    madpipe::fuzz::expect_user_error(e);
  } catch (const boost::program_options::error&) {
  }
  return 0;
}
