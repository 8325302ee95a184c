// SVG rendering of timelines (declared in timeline.hpp).

#include "core/svg.hpp"
#include "plan/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;

namespace {
struct Rgb {
  double r = 0, g = 0, b = 0;  // in [0, 255]
};
}  // namespace

static constexpr double kWidth = 1200;
static constexpr double kLeft = 110;  // row names
static constexpr double kRight = 30;
static constexpr double kPlotWidth = kWidth - kLeft - kRight;
static constexpr double kTop = 10;
static constexpr double kTitleHeight = 24;
static constexpr double kMarkerLabelHeight = 14;
static constexpr double kRowHeight = 20;
static constexpr double kRowGap = 4;
static constexpr double kTimelineGap = 16;
static constexpr double kAxisHeight = 36;
static constexpr double kLegendHeight = 40;
static constexpr double kCharWidth = 6.5;  // of the 11px bar labels, roughly
static constexpr double kMinMarkerLabelGap = 60;

// Tableau 10: distinct hues that stay readable when lightened or darkened.
static constexpr Rgb kPalette[] = {{78, 121, 167}, {242, 142, 43}, {225, 87, 89},   {118, 183, 178},
                                   {89, 161, 79},  {237, 201, 72}, {176, 122, 161}, {255, 157, 167},
                                   {156, 117, 95}, {186, 176, 172}};
static constexpr int kPaletteSize = static_cast<int>(sizeof kPalette / sizeof kPalette[0]);

static std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

static std::string num(double value) { return madpipe::svg::number(value); }

static Rgb mix(const Rgb& colour, const Rgb& with, double amount) {
  return {colour.r + (with.r - colour.r) * amount, colour.g + (with.g - colour.g) * amount,
          colour.b + (with.b - colour.b) * amount};
}

static bool is_light_shade(ms::OpKind kind) {
  return kind == ms::OpKind::F || kind == ms::OpKind::SendAct;
}

static Rgb shade(int stage, bool light) {
  const Rgb base = kPalette[((stage % kPaletteSize) + kPaletteSize) % kPaletteSize];
  return light ? mix(base, {255, 255, 255}, 0.4) : mix(base, {0, 0, 0}, 0.25);
}

static std::string hex(const Rgb& colour) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "#%02x%02x%02x", static_cast<int>(std::lround(colour.r)),
                static_cast<int>(std::lround(colour.g)), static_cast<int>(std::lround(colour.b)));
  return buffer;
}

static const char* text_colour(const Rgb& background) {
  const double luminance = 0.299 * background.r + 0.587 * background.g + 0.114 * background.b;
  return luminance > 140 ? "#202020" : "#ffffff";
}

static double rows_height(const mplan::Timeline& timeline) {
  return static_cast<double>(timeline.rows.size()) * (kRowHeight + kRowGap);
}

static double timeline_height(const mplan::Timeline& timeline) {
  return kTitleHeight + kMarkerLabelHeight + rows_height(timeline) + kTimelineGap;
}

static double tick_step(double total_ms) { return madpipe::svg::tick_step(total_ms, 10); }

namespace {
// Appends the elements of one chart; x() maps milliseconds to pixels.
class SvgWriter {
 public:
  explicit SvgWriter(double total_ms) : scale_(kPlotWidth / total_ms) {}

  double x(double ms) const { return kLeft + ms * scale_; }
  std::string& out() { return out_; }

  // The title, the row names and the rows' background.
  void draw_frame(const mplan::Timeline& timeline, double top) {
    out_ += "<text x=\"" + num(kLeft) + "\" y=\"" + num(top + 16) +
            "\" font-size=\"14\" font-weight=\"bold\">" + madpipe::svg::escape(timeline.title) +
            "</text>\n";
    const double rows_top = top + kTitleHeight + kMarkerLabelHeight;
    for (std::size_t row = 0; row < timeline.rows.size(); ++row) {
      const double y = rows_top + static_cast<double>(row) * (kRowHeight + kRowGap);
      out_ += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(y) + "\" width=\"" + num(kPlotWidth) +
              "\" height=\"" + num(kRowHeight) + "\" fill=\"#f3f3f3\"/>\n";
      out_ += "<text x=\"" + num(kLeft - 8) + "\" y=\"" + num(y + 14) +
              "\" font-size=\"12\" text-anchor=\"end\">" +
              madpipe::svg::escape(timeline.rows[row]) + "</text>\n";
    }
  }

  void draw_bars_and_markers(const mplan::Timeline& timeline, double top) {
    const double rows_top = top + kTitleHeight + kMarkerLabelHeight;
    for (const mplan::TimelineBar& bar : timeline.bars) draw_bar(bar, rows_top);
    draw_markers(timeline, rows_top);
  }

  void draw_axis(double y, double total_ms) {
    out_ += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(y) + "\" x2=\"" +
            num(kLeft + kPlotWidth) + "\" y2=\"" + num(y) + "\" stroke=\"#404040\"/>\n";
    const double step = tick_step(total_ms);
    for (int i = 0; i * step <= total_ms * (1 + 1e-9); ++i) {
      const double px = x(i * step);
      out_ += "<line x1=\"" + num(px) + "\" y1=\"" + num(y) + "\" x2=\"" + num(px) + "\" y2=\"" +
              num(y + 5) + "\" stroke=\"#404040\"/>\n";
      out_ += "<text x=\"" + num(px) + "\" y=\"" + num(y + 17) +
              "\" font-size=\"11\" text-anchor=\"middle\">" + format("%g", i * step) + "</text>\n";
    }
    out_ += "<text x=\"" + num(kLeft - 8) + "\" y=\"" + num(y + 17) +
            "\" font-size=\"11\" text-anchor=\"end\">time (ms)</text>\n";
  }

  void draw_grid(double top, double bottom, double total_ms) {
    const double step = tick_step(total_ms);
    for (int i = 0; i * step <= total_ms * (1 + 1e-9); ++i) {
      const double px = x(i * step);
      out_ += "<line x1=\"" + num(px) + "\" y1=\"" + num(top) + "\" x2=\"" + num(px) + "\" y2=\"" +
              num(bottom) + "\" stroke=\"#e4e4e4\"/>\n";
    }
  }

  void draw_legend(double y, int num_stages) {
    double px = kLeft;
    for (int stage = 0; stage < num_stages; ++stage) {
      if (px + 90 > kWidth - kRight) break;
      for (bool light : {true, false}) {
        out_ += "<rect x=\"" + num(px) + "\" y=\"" + num(y) +
                "\" width=\"12\" height=\"12\" fill=\"" + hex(shade(stage, light)) + "\"/>\n";
        px += 13;
      }
      out_ += "<text x=\"" + num(px + 3) + "\" y=\"" + num(y + 10) + "\" font-size=\"12\">stage " +
              std::to_string(stage) + "</text>\n";
      px += 70;
    }
    out_ += "<text x=\"" + num(kLeft) + "\" y=\"" + num(y + 28) +
            "\" font-size=\"11\" fill=\"#505050\">light: forward and activation sent; dark: "
            "backward and gradient sent; numbers: micro-batches</text>\n";
  }

 private:
  void draw_bar(const mplan::TimelineBar& bar, double rows_top) {
    const double y = rows_top + static_cast<double>(bar.row) * (kRowHeight + kRowGap);
    const double left = x(bar.start_ms);
    const double width = std::max(0.5, (bar.end_ms - bar.start_ms) * scale_);
    const Rgb colour = shade(bar.stage, is_light_shade(bar.kind));
    out_ += "<rect x=\"" + num(left) + "\" y=\"" + num(y + 1) + "\" width=\"" + num(width) +
            "\" height=\"" + num(kRowHeight - 2) + "\" fill=\"" + hex(colour) +
            "\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>" + madpipe::svg::escape(bar.label) +
            ": " + format("%.3f", bar.start_ms) + " to " + format("%.3f", bar.end_ms) +
            " ms</title></rect>\n";
    const std::string number = std::to_string(bar.micro_batch);
    if (width < kCharWidth * static_cast<double>(number.size()) + 4) return;
    out_ += "<text x=\"" + num(left + width / 2) + "\" y=\"" + num(y + 14) +
            "\" font-size=\"11\" text-anchor=\"middle\" fill=\"" + text_colour(colour) + "\">" +
            number + "</text>\n";
  }

  void draw_markers(const mplan::Timeline& timeline, double rows_top) {
    const double bottom = rows_top + rows_height(timeline) - kRowGap;
    double last_label = -kMinMarkerLabelGap;
    for (const mplan::TimelineMarker& marker : timeline.markers) {
      const double px = x(marker.time_ms);
      out_ += "<line x1=\"" + num(px) + "\" y1=\"" + num(rows_top - 3) + "\" x2=\"" + num(px) +
              "\" y2=\"" + num(bottom) +
              "\" stroke=\"#303030\" stroke-width=\"1\" stroke-dasharray=\"4,3\"/>\n";
      const double label_width = kCharWidth * static_cast<double>(marker.label.size());
      if (px - last_label < kMinMarkerLabelGap || px + 2 + label_width > kWidth) continue;
      last_label = px;
      out_ += "<text x=\"" + num(px + 2) + "\" y=\"" + num(rows_top - 5) +
              "\" font-size=\"10\" fill=\"#303030\">" + madpipe::svg::escape(marker.label) +
              "</text>\n";
    }
  }

  double scale_;
  std::string out_;
};
}  // namespace

std::string mplan::to_svg(const std::vector<Timeline>& timelines) {
  double total_ms = 0;
  double height = kTop;
  int num_stages = 0;
  for (const Timeline& timeline : timelines) {
    total_ms = std::max(total_ms, timeline.total_ms);
    height += timeline_height(timeline);
    for (const TimelineBar& bar : timeline.bars) num_stages = std::max(num_stages, bar.stage + 1);
  }
  if (!(total_ms > 0)) total_ms = 1;  // an empty chart still gets an axis
  const double axis_y = height;
  height += kAxisHeight + kLegendHeight;

  SvgWriter svg(total_ms);
  std::string& out = svg.out();
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) +
         "\" font-family=\"sans-serif\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  // Grid lines go over the rows' background and under the bars.
  double top = kTop;
  for (const Timeline& timeline : timelines) {
    svg.draw_frame(timeline, top);
    top += timeline_height(timeline);
  }
  svg.draw_grid(kTop + kTitleHeight, axis_y, total_ms);
  top = kTop;
  for (const Timeline& timeline : timelines) {
    svg.draw_bars_and_markers(timeline, top);
    top += timeline_height(timeline);
  }
  svg.draw_axis(axis_y, total_ms);
  svg.draw_legend(axis_y + kAxisHeight - 8, num_stages);
  out += "</svg>\n";
  return out;
}
