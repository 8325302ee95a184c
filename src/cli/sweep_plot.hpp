#pragma once

#include <optional>
#include <string>
#include <vector>

namespace madpipe::cli {

// A line chart in small multiples, for `madpipe sweep`: every panel has the same x positions and
// the same series (one colour and marker shape each); a series may have no value at some x.

struct ChartPanel {
  std::string title;  // "gpus = 4"; empty for a chart of one panel
  // values[series][x]: the y of each series at each x of the chart; none where the point does
  // not exist (a plan that does not fit): the line breaks there and a cross marks that x.
  std::vector<std::vector<std::optional<double>>> values;
};

struct LineChart {
  std::string title;
  std::string subtitle;                    // a second, smaller line; may be empty
  std::string x_label;                     // "memory per GPU"
  std::string y_label;                     // "period per micro-batch (ms)"
  std::vector<double> x;                   // increasing, > 0: drawn on a log2 scale
  std::vector<std::string> x_tick_labels;  // one per x: "8.0 GiB"
  std::vector<std::string> series;         // in legend order
  std::string missing_label;               // legend entry of the crosses: "does not fit"
  std::vector<ChartPanel> panels;
};

// A standalone SVG document: the title, a legend of the series (and of the crosses), then the
// panels in a grid of at most three a row. The panels share their axes: x on a log2 scale with a
// tick at every x (labels that would overlap are left out), y linear from 0 with 1-2-5 ticks and
// grid lines. In each panel, a series is one <path class="series"> (with a gap where it has no
// value) and a marker at every value, whose tooltip gives the numbers; a missing value is a
// cross in the series' colour just above the x axis, one row of crosses per series.
std::string line_chart_svg(const LineChart& chart);

}  // namespace madpipe::cli
