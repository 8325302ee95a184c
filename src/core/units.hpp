#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace madpipe {

// Parses a size: "16GiB", "500MB", "1.5GB", "4096" (bytes), "64KiB". SI prefixes (k, M, G, T)
// are powers of 1000, binary ones (Ki, Mi, Gi, Ti) powers of 1024. Throws Error{InvalidInput}
// naming `field` when the text is not a non-negative size.
std::int64_t parse_bytes(std::string_view text, const std::string& field = "");

// Parses a bandwidth: "12GB/s", "25Gbit/s", "900MiB/s", "100Gb/s"; a bare number is bytes per
// second. Returns bytes per millisecond, the unit used everywhere in the planner.
double parse_bandwidth(std::string_view text, const std::string& field = "");

// Parses a compute rate: "989T", "989e12", "989 TFLOP/s", "2.25PFLOPS"; a bare number is FLOP/s.
// Prefixes k, M, G, T, P are powers of 1000. Returns FLOP/s (> 0); throws Error{InvalidInput}
// naming `field` otherwise.
double parse_flops(std::string_view text, const std::string& field = "");

// Human-readable forms for summaries: "15.6 GiB", "12.0 GB/s", "41.7 ms".
std::string format_bytes(double bytes);
// As format_bytes, with the last digit rounded up: the amount it names is at least `bytes`
// (for a memory size that the reader may pass back as a limit).
std::string format_bytes_up(double bytes);
std::string format_bandwidth(double bytes_per_ms);
std::string format_ms(double ms);
// A rate with three significant digits and an SI prefix: format_rate(989e12, "FLOP/s") is
// "989 TFLOP/s", format_rate(3.35e12, "B/s") "3.35 TB/s".
std::string format_rate(double per_second, const std::string& unit);
std::string format_percent(double ratio);  // 0.0147 -> "1.47%"
// A value quoted in an error message: 12 significant digits ("0.1", "1e+30", "nan").
std::string format_number(double x);

}  // namespace madpipe
