#include "cli/show_command.hpp"

#include "cli/platform_options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/units.hpp"
#include "plan/plan.hpp"
#include "plan/timeline.hpp"
#include "plan/trace.hpp"
#include "plan/validate.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include <boost/program_options/value_semantic.hpp>
#include <nlohmann/json.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "show", "[--plan FILE] [--trace FILE] [--svg FILE] [--chrome FILE] [options]",
    "Draws the timeline of a plan (the schedule the planner predicts for one training step) and\n"
    "of a training trace (what a training run measured) as a Gantt chart: an SVG file, or a\n"
    "Chrome trace for chrome://tracing and Perfetto. With both, the plan is drawn above the trace\n"
    "on one time scale. A trace's measured period and memory are printed next to the plan's\n"
    "predictions."};

static constexpr std::size_t kOpsListed = 8;

po::options_description madpipe::cli::show_options_description(ShowOptions& options) {
  po::options_description group("Show options", 100);
  auto add_group = group.add_options();
  add_group("plan", po::value(&options.plan_path)->value_name("FILE"),
            "madpipe.plan/1 JSON file, as written by 'madpipe plan --output'");
  add_group("trace", po::value(&options.trace_path)->value_name("FILE"),
            "madpipe.trace/1 JSON file of a training run");
  add_group("svg", po::value(&options.svg_path)->value_name("FILE"),
            "write the Gantt chart as an SVG image to FILE");
  add_group("chrome", po::value(&options.chrome_path)->value_name("FILE"),
            "write the timelines as Chrome trace JSON (chrome://tracing, Perfetto)");
  add_group("micro-batches",
            po::value(&options.micro_batches)
                ->value_name("N")
                ->default_value(0)
                ->notifier(at_least(0, "--micro-batches")),
            "micro-batches in the plan's step (0: enough for the steady state)");
  add_group("steps",
            po::value(&options.steps)
                ->value_name("S")
                ->default_value(2)
                ->notifier(at_least(0, "--steps")),
            "traced steps shown, from the first (0: all)");
  po::options_description all(100);
  all.add(group);
  return all;
}

// Characters of UTF-8 text as a terminal shows them ("link 0↔1" has 8): continuation bytes
// do not count.
static std::size_t display_width(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

// One line per row: its share of busy time and its first operations in start order.
static void print_rows(const madpipe::plan::Timeline& timeline) {
  std::size_t width = 0;
  for (const std::string& row : timeline.rows) width = std::max(width, display_width(row));
  for (std::size_t row = 0; row < timeline.rows.size(); ++row) {
    double busy_ms = 0;
    std::string listed;
    std::size_t count = 0;
    for (const madpipe::plan::TimelineBar& bar : timeline.bars) {
      if (bar.row != static_cast<int>(row)) continue;
      busy_ms += bar.end_ms - bar.start_ms;
      if (++count <= kOpsListed) listed += " " + bar.label;
    }
    if (count == 0) listed = " no ops";
    if (count > kOpsListed) listed += " ... (" + std::to_string(count) + " ops)";
    const double busy = timeline.total_ms > 0 ? 100.0 * busy_ms / timeline.total_ms : 0.0;
    const std::string& name = timeline.rows[row];
    const std::string percent = madpipe::cli::fixed(busy, 0) + "%";
    std::cout << "  " << name << std::string(width - display_width(name) + 2, ' ') << "busy "
              << std::string(4 - std::min<std::size_t>(percent.size(), 4), ' ') << percent << ":"
              << listed << '\n';
  }
}

static madpipe::plan::Timeline show_plan(const madpipe::cli::ShowOptions& options, bool list_rows) {
  using namespace madpipe;
  const plan::Plan plan = plan::read_plan(options.plan_path);
  plan::throw_if_invalid(plan::validate(plan), options.plan_path);
  plan::Timeline timeline = plan::timeline_of_plan(plan, options.micro_batches);
  const int micro_batches = static_cast<int>(
      std::count_if(timeline.bars.begin(), timeline.bars.end(), [](const plan::TimelineBar& bar) {
        return bar.kind == schedule::OpKind::F && bar.stage == 0;
      }));
  std::cout << "plan       " << options.plan_path << ": " << plan.profile << ", " << plan.algorithm
            << ", " << plan.stages.size() << " stages, " << plan.pattern.k << "-periodic\n"
            << "platform   " << cli::describe(plan.platform) << '\n'
            << "predicted  " << micro_batches << " micro-batches in "
            << format_ms(timeline.total_ms) << " (warm-up and drain included), period "
            << format_ms(plan.predicted.period_ms) << " per micro-batch\n";
  if (list_rows) print_rows(timeline);
  return timeline;
}

static madpipe::plan::Timeline show_trace(const madpipe::cli::ShowOptions& options,
                                          bool list_rows) {
  using namespace madpipe;
  const plan::Trace trace = plan::read_trace(options.trace_path);
  plan::Timeline timeline = plan::timeline_of_trace(trace, options.steps);
  std::cout << "trace      " << options.trace_path << ": " << trace.profile << ", "
            << trace.algorithm << " on " << trace.device << " (" << trace.mode << "), "
            << trace.ranks << " ranks, " << trace.micro_batches << " micro-batches per step, "
            << trace.steps << (trace.steps == 1 ? " step\n" : " steps\n");
  if (list_rows) print_rows(timeline);
  std::cout << plan::format_summary(plan::summarize(trace));
  return timeline;
}

int madpipe::cli::run_show(const ShowOptions& options) {
  if (options.plan_path.empty() && options.trace_path.empty()) {
    throw_invalid("", "", "nothing to show: give --plan FILE, --trace FILE or both");
  }
  const bool list_rows = options.svg_path.empty() && options.chrome_path.empty();
  std::vector<plan::Timeline> timelines;
  if (!options.plan_path.empty()) timelines.push_back(show_plan(options, list_rows));
  if (!options.trace_path.empty()) timelines.push_back(show_trace(options, list_rows));

  if (list_rows) {
    std::cout << "draw it with --svg FILE (a Gantt chart) or --chrome FILE (for chrome://tracing "
                 "or Perfetto)\n";
    return 0;
  }
  if (!options.svg_path.empty()) {
    madpipe::write_file_atomically(options.svg_path, plan::to_svg(timelines));
    std::cout << "SVG written to " << options.svg_path << '\n';
  }
  if (!options.chrome_path.empty()) {
    madpipe::write_file_atomically(options.chrome_path,
                                   plan::to_chrome_trace(timelines).dump(
                                       -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                                       "\n");
    std::cout << "Chrome trace written to " << options.chrome_path << '\n';
  }
  return 0;
}

int madpipe::cli::show_command(const std::vector<std::string>& args) {
  ShowOptions options;
  const po::options_description description = show_options_description(options);
  if (!parse_options(args, kSyntax, description)) return 0;
  return run_show(options);
}
