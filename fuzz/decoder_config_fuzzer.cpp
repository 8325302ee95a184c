// Fuzz target of the Hugging Face config reader behind `madpipe profile --analytic`:
// read_decoder_config on the input as a file. An accepted config goes through analytic_profile,
// which must either refuse it with a madpipe::Error (a byte count beyond the profile's limits)
// or make a profile that the profile reader accepts once written.

#include "fuzz_support.hpp"

#include "core/analytic_profile.hpp"
#include "core/decoder_config.hpp"
#include "core/device_spec.hpp"
#include "core/profile.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto config = madpipe::fuzz::read_input(data, size, ".json", [](const std::string& path) {
    return madpipe::read_decoder_config(path);
  });
  if (!config) return 0;
  madpipe::AnalyticOptions options;
  options.seq = config->positions > 0 ? std::min(config->positions, 128) : 128;
  options.micro_batch_size = 2;
  options.device = madpipe::device_preset("h100");
  options.name = "fuzz";
  try {
    const madpipe::Profile profile = madpipe::analytic_profile(*config, options);
    madpipe::profile_from_json(madpipe::profile_to_json(profile), "analytic.json");
  } catch (const madpipe::Error& e) {
    if (e.file() == "analytic.json")
      madpipe::fuzz::finding(std::string("an analytic profile is refused once written: ") +
                             e.what());
    madpipe::fuzz::expect_user_error(e);
  }
  return 0;
}
