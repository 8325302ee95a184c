// Fuzz target of the unit parsers behind --memory, --bandwidth and the other size and rate
// options: parse_bytes, parse_bandwidth and parse_flops on the input as text, then the formatters
// on what they return.

#include "fuzz_support.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::int64_t bytes = madpipe::parse_bytes(text, "--memory");
    if (bytes < 0) madpipe::fuzz::finding("parse_bytes returned a negative size");
    (void)madpipe::format_bytes(static_cast<double>(bytes));
  } catch (const madpipe::Error& e) {
    madpipe::fuzz::expect_user_error(e);
  }
  try {
    const double bytes_per_ms = madpipe::parse_bandwidth(text, "--bandwidth");
    if (!(std::isfinite(bytes_per_ms) && bytes_per_ms > 0))
      madpipe::fuzz::finding("parse_bandwidth returned a bandwidth that is not finite and > 0");
    (void)madpipe::format_bandwidth(bytes_per_ms);
  } catch (const madpipe::Error& e) {
    madpipe::fuzz::expect_user_error(e);
  }
  try {
    const double flops = madpipe::parse_flops(text, "--peak-flops");
    if (!(std::isfinite(flops) && flops > 0))
      madpipe::fuzz::finding("parse_flops returned a rate that is not finite and > 0");
    (void)madpipe::format_rate(flops, "FLOP/s");
  } catch (const madpipe::Error& e) {
    madpipe::fuzz::expect_user_error(e);
  }
  return 0;
}
