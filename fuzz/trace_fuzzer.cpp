// Fuzz target of the trace reader (madpipe.trace/1): read_trace on the input as a file, then what
// `madpipe show --trace` does with an accepted trace (summary, timeline) and the writer's round
// trip.

#include "fuzz_support.hpp"

#include "core/error.hpp"
#include "plan/timeline.hpp"
#include "plan/trace.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace mplan = madpipe::plan;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto trace = madpipe::fuzz::read_input(
      data, size, ".json", [](const std::string& path) { return mplan::read_trace(path); });
  if (!trace) return 0;
  (void)mplan::format_summary(mplan::summarize(*trace));
  try {
    (void)mplan::timeline_of_trace(*trace);
    (void)mplan::timeline_of_trace(*trace, 0);
  } catch (const madpipe::Error& e) {
    madpipe::fuzz::expect_user_error(e);
  }
  madpipe::fuzz::expect_round_trip(*trace, mplan::trace_to_json, mplan::trace_from_json, "trace");
  return 0;
}
