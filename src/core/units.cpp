#include "core/units.hpp"

#include "core/error.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <system_error>

// Grammar shared by both parsers: optional whitespace, an unsigned decimal number (digits, an
// optional fraction and exponent: "4096", "1.5", "1e3"), optional whitespace, a unit, optional
// whitespace. Unit prefixes k/K, M/m, G/g, T/t, P/p are powers of 1000; followed by "i"
// (Ki, Mi, ...) they are powers of 1024. Sizes are rounded to the nearest byte.

static constexpr double kTwoPow63 = 9223372036854775808.0;

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static char to_lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

static std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

static bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  }
  return true;
}

static bool consume_prefix(std::string_view& text, std::string_view prefix) {
  if (text.size() < prefix.size() || !iequals(text.substr(0, prefix.size()), prefix)) {
    return false;
  }
  text.remove_prefix(prefix.size());
  return true;
}

namespace {
struct NumberAndUnit {
  bool ok = false;
  bool negative = false;
  double value = 0;
  std::string_view unit;  // trimmed
};
}  // namespace

// Splits "  1.5 GiB " into 1.5 and "GiB". Rejects signs other than a leading '-', which is
// reported separately so that the message can say "must be >= 0".
static NumberAndUnit split_number(std::string_view text) {
  NumberAndUnit out;
  text = trim(text);
  if (!text.empty() && text.front() == '-') {
    out.negative = true;
    text.remove_prefix(1);
  }
  // from_chars also accepts "inf" and "nan": requiring a leading digit or '.' refuses them.
  if (text.empty() || !((text.front() >= '0' && text.front() <= '9') || text.front() == '.')) {
    return out;
  }
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value, std::chars_format::general);
  if (ec != std::errc()) {
    // Includes errc::result_out_of_range ("1e400"): refused as unparsable.
    return out;
  }
  out.ok = std::isfinite(value);
  out.value = value;
  out.unit = trim(std::string_view(ptr, static_cast<std::size_t>(end - ptr)));
  return out;
}

// Reads an optional decimal or binary prefix; returns its multiplier (1 when absent).
static double consume_multiplier(std::string_view& unit) {
  static constexpr struct {
    char letter;
    int power;
  } kPrefixes[] = {{'k', 1}, {'m', 2}, {'g', 3}, {'t', 4}, {'p', 5}};
  if (unit.empty()) return 1.0;
  for (const auto& prefix : kPrefixes) {
    if (to_lower(unit.front()) != prefix.letter) continue;
    unit.remove_prefix(1);
    const bool binary = !unit.empty() && to_lower(unit.front()) == 'i';
    if (binary) unit.remove_prefix(1);
    return std::pow(binary ? 1024.0 : 1000.0, prefix.power);
  }
  return 1.0;
}

static std::string size_syntax_problem(std::string_view text) {
  return "cannot parse '" + std::string(text) + "' as a size (examples: 16GiB, 500MB)";
}

static std::string bandwidth_syntax_problem(std::string_view text) {
  return "cannot parse '" + std::string(text) +
         "' as a bandwidth (examples: 12GB/s, 25Gbit/s, 900MiB/s)";
}

std::int64_t madpipe::parse_bytes(std::string_view text, const std::string& field) {
  const NumberAndUnit parsed = split_number(text);
  if (!parsed.ok) throw_invalid("", field, size_syntax_problem(text));
  std::string_view unit = parsed.unit;
  const double multiplier = consume_multiplier(unit);
  // Sizes are always bytes, so "b" and "B" both mean bytes ("500mb" is 500 MB).
  const bool has_byte_unit =
      unit.empty() || iequals(unit, "b") || iequals(unit, "byte") || iequals(unit, "bytes");
  if (!has_byte_unit) throw_invalid("", field, size_syntax_problem(text));
  const double bytes = std::round(parsed.value * multiplier);
  if (parsed.negative && bytes != 0) {
    throw_invalid("", field, "must be >= 0, got '" + std::string(trim(text)) + "'");
  }
  if (!(bytes < kTwoPow63)) {
    throw_invalid("", field, "size '" + std::string(trim(text)) + "' is too large (at most 8 EiB)");
  }
  return static_cast<std::int64_t>(bytes);
}

double madpipe::parse_bandwidth(std::string_view text, const std::string& field) {
  const NumberAndUnit parsed = split_number(text);
  if (!parsed.ok) throw_invalid("", field, bandwidth_syntax_problem(text));
  std::string_view unit = parsed.unit;
  double bytes_per_unit = 1.0;  // a bare number is bytes per second
  if (!unit.empty()) {
    const double multiplier = consume_multiplier(unit);
    // Here case matters for one letter: "b" is a bit, "B" a byte (as in "25Gb/s").
    bool bits = false;
    if (consume_prefix(unit, "bits") || consume_prefix(unit, "bit")) {
      bits = true;
    } else if (consume_prefix(unit, "bytes") || consume_prefix(unit, "byte")) {
      bits = false;
    } else if (!unit.empty() && (unit.front() == 'b' || unit.front() == 'B')) {
      bits = unit.front() == 'b';
      unit.remove_prefix(1);
    } else {
      throw_invalid("", field, bandwidth_syntax_problem(text));
    }
    if (!(iequals(unit, "/s") || iequals(unit, "ps") || iequals(unit, "/sec"))) {
      throw_invalid("", field, bandwidth_syntax_problem(text));
    }
    bytes_per_unit = multiplier / (bits ? 8.0 : 1.0);
  }
  const double bytes_per_ms = parsed.value * bytes_per_unit / 1000.0;
  if (parsed.negative || !(bytes_per_ms > 0)) {
    throw_invalid("", field, "must be > 0, got '" + std::string(trim(text)) + "'");
  }
  if (!std::isfinite(bytes_per_ms)) {
    throw_invalid("", field, "bandwidth '" + std::string(trim(text)) + "' is too large");
  }
  return bytes_per_ms;
}

double madpipe::parse_flops(std::string_view text, const std::string& field) {
  const NumberAndUnit parsed = split_number(text);
  const std::string problem = "cannot parse '" + std::string(text) +
                              "' as a compute rate (examples: 989T, 989e12, 67 TFLOP/s)";
  if (!parsed.ok) throw_invalid("", field, problem);
  std::string_view unit = parsed.unit;
  // "flops" starts with no prefix letter; a lone "P" or "T" is one.
  const double multiplier =
      !unit.empty() && to_lower(unit.front()) == 'f' ? 1.0 : consume_multiplier(unit);
  if (!(unit.empty() || iequals(unit, "flop/s") || iequals(unit, "flops")))
    throw_invalid("", field, problem);
  const double flops = parsed.value * multiplier;
  if (parsed.negative || !(flops > 0))
    throw_invalid("", field, "must be > 0, got '" + std::string(trim(text)) + "'");
  if (!std::isfinite(flops))
    throw_invalid("", field, "compute rate '" + std::string(trim(text)) + "' is too large");
  return flops;
}

static std::string printf_string(const char* format, double value, const char* unit) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value, unit);
  return buffer;
}

std::string madpipe::format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  static constexpr int kNumUnits = static_cast<int>(sizeof kUnits / sizeof kUnits[0]);
  if (!std::isfinite(bytes)) return printf_string("%g %s", bytes, "B");
  if (std::fabs(bytes) < 1023.5) return printf_string("%.0f %s", bytes, "B");
  // Move up while the one-decimal rendering would read 1024.0 or more.
  int index = 1;
  double scaled = bytes / 1024.0;
  while (index + 1 < kNumUnits && std::fabs(scaled) >= 1023.95) {
    scaled /= 1024.0;
    ++index;
  }
  return printf_string("%.1f %s", scaled, kUnits[index]);
}

std::string madpipe::format_bytes_up(double bytes) {
  if (!std::isfinite(bytes) || bytes < 1023.5) return format_bytes(std::ceil(bytes));
  double unit = 1024.0;
  while (bytes / unit >= 1023.95 && unit < 1e18) unit *= 1024.0;
  return format_bytes(std::ceil(bytes / unit * 10.0 - 1e-9) / 10.0 * unit);
}

std::string madpipe::format_bandwidth(double bytes_per_ms) {
  static constexpr const char* kUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s", "PB/s"};
  static constexpr int kNumUnits = static_cast<int>(sizeof kUnits / sizeof kUnits[0]);
  const double bytes_per_s = bytes_per_ms * 1000.0;
  if (!std::isfinite(bytes_per_s)) return printf_string("%g %s", bytes_per_s, "B/s");
  // GB/s is the planner's natural unit: use it from 0.1 GB/s up to 999.9 GB/s.
  if (std::fabs(bytes_per_s) >= 0.05e9 && std::fabs(bytes_per_s) < 999.95e9) {
    return printf_string("%.1f %s", bytes_per_s / 1e9, "GB/s");
  }
  int index = 0;
  double scaled = bytes_per_s;
  while (index + 1 < kNumUnits && std::fabs(scaled) >= 999.95) {
    scaled /= 1000.0;
    ++index;
  }
  return printf_string("%.1f %s", scaled, kUnits[index]);
}

std::string madpipe::format_ms(double ms) {
  if (std::fabs(ms) > 10000.0) return printf_string("%.2f %s", ms / 1000.0, "s");
  return printf_string("%.2f %s", ms, "ms");
}

std::string madpipe::format_rate(double per_second, const std::string& unit) {
  static constexpr const char* kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  static constexpr int kNumPrefixes = static_cast<int>(sizeof kPrefixes / sizeof kPrefixes[0]);
  if (!std::isfinite(per_second)) return printf_string("%g %s", per_second, unit.c_str());
  int index = 0;
  double scaled = per_second;
  while (index + 1 < kNumPrefixes && std::fabs(scaled) >= 999.5) {
    scaled /= 1000.0;
    ++index;
  }
  return printf_string("%.3g %s", scaled, (kPrefixes[index] + unit).c_str());
}

std::string madpipe::format_percent(double ratio) {
  return printf_string("%.2f%s", 100.0 * ratio, "%");
}

std::string madpipe::format_number(double x) {
  std::ostringstream out;
  out.precision(12);
  out << x;
  return out.str();
}
