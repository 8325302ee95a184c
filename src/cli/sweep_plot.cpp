#include "cli/sweep_plot.hpp"

#include "core/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// Tableau 10, the palette of the Gantt charts of `madpipe show`.
constexpr const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr std::size_t kNumColours = sizeof kColours / sizeof kColours[0];

constexpr double kMargin = 16;
constexpr double kTitleBaseline = 28;
constexpr double kSubtitleHeight = 18;
constexpr double kLegendLineHeight = 20;
constexpr double kCharWidth = 6.5;  // of 11-12px sans-serif text, roughly
// Inside a panel's cell: room for the panel title above the plot, for the y tick labels and
// the y label on the left, for the x tick labels and the x label below.
constexpr double kPanelTitleHeight = 26;
constexpr double kPlotLeft = 66;
constexpr double kPlotRight = 16;
constexpr double kPlotBottom = 48;
constexpr double kXPadding = 14;  // between the y axis (or the right end) and the outer points
constexpr int kMaxColumns = 3;
// A panel's cell: larger when it is alone.
constexpr double kCellWidth = 400, kCellHeight = 300;
constexpr double kSingleCellWidth = 680, kSingleCellHeight = 430;

std::string num(double value) { return madpipe::svg::number(value); }

std::string general(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

std::string xml_text(const std::string& text) { return madpipe::svg::escape(text); }

const char* colour(std::size_t series) { return kColours[series % kNumColours]; }

double text_width(const std::string& text) { return kCharWidth * static_cast<double>(text.size()); }

// The end of an element: "/>", or its tooltip and its closing tag.
std::string close(const char* element, const std::string& tooltip) {
  if (tooltip.empty()) return "/>\n";
  return "><title>" + xml_text(tooltip) + "</title></" + element + ">\n";
}

// The marker of a series: a circle, a square, a triangle or a diamond, so that the lines stay
// apart in grey print too.
std::string marker(std::size_t series, double x, double y, const std::string& tooltip) {
  static const std::vector<std::vector<std::pair<double, double>>> kShapes{
      {},                                                    // circle
      {{-3.2, -3.2}, {3.2, -3.2}, {3.2, 3.2}, {-3.2, 3.2}},  // square
      {{0, -4.2}, {3.8, 3}, {-3.8, 3}},                      // triangle
      {{0, -4.4}, {4.4, 0}, {0, 4.4}, {-4.4, 0}},            // diamond
  };
  const std::string paint = std::string(" fill=\"") + colour(series) + "\" stroke=\"#ffffff\"";
  const auto& shape = kShapes[series % kShapes.size()];
  if (shape.empty()) {
    return "<circle class=\"point\" cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"3.8\"" + paint +
           close("circle", tooltip);
  }
  std::string points;
  for (const auto& [dx, dy] : shape)
    points += (points.empty() ? "" : " ") + num(x + dx) + "," + num(y + dy);
  return "<polygon class=\"point\" points=\"" + points + "\"" + paint + close("polygon", tooltip);
}

std::string cross(const char* stroke, double x, double y, const std::string& tooltip) {
  const std::string d = "M" + num(x - 3) + " " + num(y - 3) + " L" + num(x + 3) + " " + num(y + 3) +
                        " M" + num(x - 3) + " " + num(y + 3) + " L" + num(x + 3) + " " + num(y - 3);
  return "<path class=\"missing\" d=\"" + d + "\" stroke=\"" + stroke +
         "\" stroke-width=\"1.6\" fill=\"none\"" + close("path", tooltip);
}

double tick_step(double top) { return madpipe::svg::tick_step(top, 5); }

struct Frame {  // a panel's plot area
  double left = 0, top = 0, width = 0, height = 0;
  double bottom() const { return top + height; }
};

class ChartWriter {
 public:
  explicit ChartWriter(const madpipe::cli::LineChart& chart) : chart_(chart) {
    const bool one = chart.panels.size() <= 1;
    columns_ = one ? 1 : std::min<std::size_t>(chart.panels.size(), kMaxColumns);
    rows_ = one ? 1 : (chart.panels.size() + columns_ - 1) / columns_;
    cell_width_ = one ? kSingleCellWidth : kCellWidth;
    cell_height_ = one ? kSingleCellHeight : kCellHeight;
    width_ = 2 * kMargin + static_cast<double>(columns_) * cell_width_;
    double largest = 0;
    for (const auto& panel : chart.panels)
      for (const auto& values : panel.values)
        for (const auto& value : values)
          if (value) largest = std::max(largest, *value);
    y_step_ = largest > 0 ? tick_step(largest * 1.05) : 0.2;
    y_top_ = largest > 0 ? std::ceil(largest * 1.05 / y_step_) * y_step_ : 1;
    for (double x : chart.x) {
      log_min_ = std::min(log_min_, std::log2(x));
      log_max_ = std::max(log_max_, std::log2(x));
    }
  }

  std::string write() {
    double y = kTitleBaseline;
    std::string body = "<text class=\"title\" x=\"" + num(kMargin) + "\" y=\"" + num(y) +
                       "\" font-size=\"16\" font-weight=\"bold\">" + xml_text(chart_.title) +
                       "</text>\n";
    if (!chart_.subtitle.empty()) {
      y += kSubtitleHeight;
      body += "<text x=\"" + num(kMargin) + "\" y=\"" + num(y) +
              "\" font-size=\"12\" fill=\"#505050\">" + xml_text(chart_.subtitle) + "</text>\n";
    }
    y += 14;
    body += legend(y);
    for (std::size_t p = 0; p < chart_.panels.size(); ++p) {
      const double cell_left = kMargin + static_cast<double>(p % columns_) * cell_width_;
      const double cell_top = y + static_cast<double>(p / columns_) * cell_height_;
      const Frame frame{cell_left + kPlotLeft, cell_top + kPanelTitleHeight,
                        cell_width_ - kPlotLeft - kPlotRight,
                        cell_height_ - kPanelTitleHeight - kPlotBottom};
      body += panel(chart_.panels[p], frame, p % columns_ == 0);
    }
    const double height = y + static_cast<double>(rows_) * cell_height_ + kMargin;
    return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width_) + "\" height=\"" +
           num(height) + "\" viewBox=\"0 0 " + num(width_) + " " + num(height) +
           "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
           "fill=\"#ffffff\"/>\n" +
           body + "</svg>\n";
  }

 private:
  double px(const Frame& frame, std::size_t x) const {
    if (!(log_max_ > log_min_)) return frame.left + frame.width / 2;
    const double share = (std::log2(chart_.x[x]) - log_min_) / (log_max_ - log_min_);
    return frame.left + kXPadding + share * (frame.width - 2 * kXPadding);
  }

  double py(const Frame& frame, double y) const {
    return frame.bottom() - y / y_top_ * frame.height;
  }

  // The legend from `y` down, wrapped to the chart's width; moves `y` below it.
  std::string legend(double& y) {
    std::string out = "<g class=\"legend\" font-size=\"12\">\n";
    double x = kMargin;
    auto place = [&](double width) {
      if (x > kMargin && x + width > width_ - kMargin) {
        x = kMargin;
        y += kLegendLineHeight;
      }
      const double left = x;
      x += width + 18;
      return left;
    };
    for (std::size_t s = 0; s < chart_.series.size(); ++s) {
      const double left = place(30 + text_width(chart_.series[s]));
      out += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + 24) +
             "\" y2=\"" + num(y) + "\" stroke=\"" + colour(s) + "\" stroke-width=\"2\"/>\n";
      out += marker(s, left + 12, y, "");
      out += "<text x=\"" + num(left + 30) + "\" y=\"" + num(y + 4) + "\">" +
             xml_text(chart_.series[s]) + "</text>\n";
    }
    if (!chart_.missing_label.empty()) {
      const double left = place(18 + text_width(chart_.missing_label));
      out += cross("#606060", left + 6, y, "");
      out += "<text x=\"" + num(left + 16) + "\" y=\"" + num(y + 4) + "\">" +
             xml_text(chart_.missing_label) + "</text>\n";
    }
    y += kLegendLineHeight;
    return out + "</g>\n";
  }

  std::string panel(const madpipe::cli::ChartPanel& panel, const Frame& frame, bool first_column) {
    std::string out = "<g class=\"panel\">\n";
    if (!panel.title.empty()) {
      out += "<text x=\"" + num(frame.left + frame.width / 2) + "\" y=\"" + num(frame.top - 10) +
             "\" font-size=\"13\" font-weight=\"bold\" text-anchor=\"middle\">" +
             xml_text(panel.title) + "</text>\n";
    }
    out += axes(frame, first_column);
    // The first series last, on top of the others.
    for (std::size_t s = panel.values.size(); s-- > 0;) out += series(panel.values[s], s, frame);
    return out + "</g>\n";
  }

  std::string axes(const Frame& frame, bool first_column) const {
    std::string out;
    for (int i = 0; i * y_step_ <= y_top_ * (1 + 1e-9); ++i) {
      const double value = i * y_step_, y = py(frame, value);
      out += "<line x1=\"" + num(frame.left) + "\" y1=\"" + num(y) + "\" x2=\"" +
             num(frame.left + frame.width) + "\" y2=\"" + num(y) + "\" stroke=\"" +
             (i == 0 ? "#404040" : "#e4e4e4") + "\"/>\n";
      out += "<text x=\"" + num(frame.left - 6) + "\" y=\"" + num(y + 4) +
             "\" font-size=\"11\" text-anchor=\"end\">" + general(value) + "</text>\n";
    }
    out += "<line x1=\"" + num(frame.left) + "\" y1=\"" + num(frame.top) + "\" x2=\"" +
           num(frame.left) + "\" y2=\"" + num(frame.bottom()) + "\" stroke=\"#404040\"/>\n";
    double last_label_end = -1e9;
    for (std::size_t i = 0; i < chart_.x.size(); ++i) {
      const double x = px(frame, i);
      out += "<line x1=\"" + num(x) + "\" y1=\"" + num(frame.bottom()) + "\" x2=\"" + num(x) +
             "\" y2=\"" + num(frame.bottom() + 5) + "\" stroke=\"#404040\"/>\n";
      const std::string& label = i < chart_.x_tick_labels.size() ? chart_.x_tick_labels[i] : "";
      const double half = text_width(label) / 2;
      if (x - half < last_label_end + 4) continue;  // it would overlap the previous label
      last_label_end = x + half;
      out += "<text x=\"" + num(x) + "\" y=\"" + num(frame.bottom() + 17) +
             "\" font-size=\"11\" text-anchor=\"middle\">" + xml_text(label) + "</text>\n";
    }
    out += "<text x=\"" + num(frame.left + frame.width / 2) + "\" y=\"" + num(frame.bottom() + 36) +
           "\" font-size=\"12\" text-anchor=\"middle\">" + xml_text(chart_.x_label) + "</text>\n";
    if (first_column) {
      const double x = frame.left - 50, y = frame.top + frame.height / 2;
      out += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" transform=\"rotate(-90 " + num(x) +
             " " + num(y) + ")\" font-size=\"12\" text-anchor=\"middle\">" +
             xml_text(chart_.y_label) + "</text>\n";
    }
    return out;
  }

  // One series of a panel: its line (one path, a gap where a value is missing), its markers and
  // the crosses of its missing values.
  std::string series(const std::vector<std::optional<double>>& values, std::size_t s,
                     const Frame& frame) const {
    const std::string& name = s < chart_.series.size() ? chart_.series[s] : "";
    std::string d, points;
    bool drawing = false;
    for (std::size_t i = 0; i < values.size() && i < chart_.x.size(); ++i) {
      const std::string& at = i < chart_.x_tick_labels.size() ? chart_.x_tick_labels[i] : "";
      const double x = px(frame, i);
      if (!values[i]) {
        drawing = false;
        points += cross(colour(s), x, frame.bottom() - 7 - 8 * static_cast<double>(s),
                        name + " at " + at + ": " + chart_.missing_label);
        continue;
      }
      const double y = py(frame, *values[i]);
      d += std::string(d.empty() ? "" : " ") + (drawing ? "L" : "M") + num(x) + " " + num(y);
      drawing = true;
      points += marker(s, x, y, name + " at " + at + ": " + num(*values[i]));
    }
    return "<path class=\"series\" data-series=\"" + xml_text(name) + "\" d=\"" + d +
           "\" fill=\"none\" stroke=\"" + colour(s) +
           "\" stroke-width=\"2\" stroke-linejoin=\"round\"/>\n" + points;
  }

  const madpipe::cli::LineChart& chart_;
  std::size_t columns_ = 1, rows_ = 1;
  double cell_width_ = 0, cell_height_ = 0, width_ = 0;
  double y_top_ = 1, y_step_ = 0.2;
  double log_min_ = 1e300, log_max_ = -1e300;
};

}  // namespace

std::string madpipe::cli::line_chart_svg(const LineChart& chart) {
  return ChartWriter(chart).write();
}
