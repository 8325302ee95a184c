#include "core/svg.hpp"

#include <cmath>
#include <cstdio>

std::string madpipe::svg::escape(const std::string& text) {
  static const std::string kSpecial = "&<>\"'";
  static const char* const kEntities[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  std::string out;
  for (char c : text) {
    const std::size_t i = kSpecial.find(c);
    if (i == std::string::npos)
      out += c;
    else
      out += kEntities[i];
  }
  return out;
}

std::string madpipe::svg::number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", value);
  return buffer;
}

double madpipe::svg::tick_step(double span, int ticks) {
  const double raw = span / ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0})
    if (factor * magnitude >= raw) return factor * magnitude;
  return 10 * magnitude;
}
