#pragma once

#include <string>

// Small helpers shared by the SVG writers (Gantt charts, sweep plots).
namespace madpipe::svg {

// Text with &, <, >, " and ' replaced by their XML entities.
std::string escape(const std::string& text);

// A coordinate or length with two decimals.
std::string number(double value);

// A tick spacing of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `span` (> 0).
double tick_step(double span, int ticks);

}  // namespace madpipe::svg
