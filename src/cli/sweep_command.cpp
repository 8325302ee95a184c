#include "cli/sweep_command.hpp"

#include "cli/options.hpp"
#include "cli/sweep_plot.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <boost/program_options/errors.hpp>
#include <boost/program_options/parsers.hpp>
#include <boost/program_options/value_semantic.hpp>
#include <boost/program_options/variables_map.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "sweep", "--profile FILE --bandwidth RATE --set KEY=V1,V2,... [--set ...] [options]",
    "Plans the model with each algorithm at every point of the cartesian product of the --set\n"
    "lists (--set memory=4GiB,8GiB --set gpus=2,4: 4 points), each value standing for the option\n"
    "--KEY of compare. Prints a line per plan and a table; --csv writes a row per point and\n"
    "algorithm, --svg a plot of the period against the memory per GPU: a line per algorithm, a\n"
    "panel per value of the other keys. [sweep] in a --config file may hold profile and set."};

// Keys that --set may not sweep: output files, and switches without a value.
static const std::set<std::string> kNotSweepable{"solver-log", "write-mps"};

po::options_description madpipe::cli::sweep_options_description(SweepOptions& options) {
  po::options_description sweep = comparison_group("Sweep options", options);
  auto add_sweep = sweep.add_options();
  add_sweep("set", po::value(&options.sets)->value_name("KEY=LIST"),
            "sweep the option --KEY over comma-separated values, e.g. memory=4GiB,8GiB; repeat "
            "for more keys (the points are their cartesian product)");
  add_sweep("csv", po::value(&options.csv_path)->value_name("FILE"),
            "write one CSV row per point and algorithm to FILE");
  add_sweep("svg", po::value(&options.svg_path)->value_name("FILE"),
            "write the plot of the period against the memory per GPU (SVG) to FILE");
  add_sweep("quiet,q", po::bool_switch(&options.quiet), "no progress lines on stderr");
  return comparison_options_description(sweep, options);
}

static std::vector<madpipe::cli::ConfigSection> config_sections() {
  return {madpipe::cli::platform_config_section(),
          madpipe::cli::planner_config_section(),
          {"sweep", {"profile", "set"}}};
}

// --profile and the platform and planner options that take a value.
static std::vector<std::string> sweepable_keys() {
  using namespace madpipe::cli;
  PlatformOptions platform;
  PlannerSettings planner;
  std::vector<std::string> keys{"profile"};
  for (const po::options_description& group :
       {platform_options_description(platform), planner_options_description(planner)}) {
    for (const std::string& name : option_names(group))
      if (!kNotSweepable.count(name)) keys.push_back(name);
  }
  return keys;
}

static std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

namespace {
// One swept key and its values, from `--set KEY=V1,V2` or from "[sweep] set = KEY=V1,V2" of the
// --config file `file`.
struct Axis {
  std::string key;
  std::vector<std::string> values;
  std::string file;   // empty: the command line
  std::string field;  // "--set" or "[sweep] set", for errors
};

// One point of the sweep: a value of each axis, parsed with the command line into options.
struct Point {
  std::vector<std::size_t> choice;  // per axis, the index of its value
  madpipe::cli::SweepOptions options;
  madpipe::Platform platform;
  std::vector<madpipe::partition::PlannerOptions> planners;  // one per algorithm
};
}  // namespace

static Axis parse_axis(const std::string& text, const std::string& file, const std::string& field) {
  const std::size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, file, field,
                         "expected KEY=V1,V2,..., got '" + text + "'");
  }
  Axis axis{text.substr(0, equals), {}, file, field};
  const std::vector<std::string> keys = sweepable_keys();
  if (std::find(keys.begin(), keys.end(), axis.key) == keys.end()) {
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, file, field,
                         "unknown key '" + axis.key + "' (valid: " + join(keys, ", ") + ")");
  }
  const std::string list = text.substr(equals + 1);
  const std::string culprit = field + " " + axis.key;
  if (list.empty()) {
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, file, culprit,
                         "no values (expected e.g. " + axis.key + "=V1,V2)");
  }
  for (std::size_t begin = 0; begin <= list.size();) {
    const std::size_t comma = std::min(list.find(',', begin), list.size());
    const std::string value = list.substr(begin, comma - begin);
    if (value.empty()) {
      throw madpipe::Error(madpipe::ErrorKind::InvalidInput, file, culprit,
                           "empty value in '" + list + "'");
    }
    if (std::find(axis.values.begin(), axis.values.end(), value) != axis.values.end()) {
      throw madpipe::Error(madpipe::ErrorKind::InvalidInput, file, culprit,
                           "value '" + value + "' given twice");
    }
    axis.values.push_back(value);
    begin = comma + 1;
  }
  return axis;
}

// Adds `axis` to `axes`, or replaces the axis of the same key when `replace`; a key twice from
// the same source is an error.
static void add_axis(std::vector<Axis>& axes, Axis axis, bool replace) {
  for (Axis& existing : axes) {
    if (existing.key != axis.key) continue;
    if (!replace || existing.file == axis.file) {
      throw madpipe::Error(madpipe::ErrorKind::InvalidInput, axis.file, axis.field + " " + axis.key,
                           "given twice (one list per key)");
    }
    existing = std::move(axis);
    return;
  }
  axes.push_back(std::move(axis));
}

// The axes, read before the options themselves: a swept option may be one that must be given,
// such as --memory, so the full parse needs the values. The command line's --set lists come
// first and win over [sweep] set of the --config file, key by key; an option given directly on
// the command line also wins over the file's list of it, and must not be swept on the command
// line too.
static std::vector<Axis> read_axes(const std::vector<std::string>& args) {
  po::options_description known;
  known.add_options()("set", po::value<std::vector<std::string>>())("config",
                                                                    po::value<std::string>());
  const po::parsed_options parsed =
      po::command_line_parser(args)
          .options(known)
          .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
          .allow_unregistered()
          .run();
  po::variables_map vm;
  po::store(parsed, vm);
  std::set<std::string> direct;  // options given on the command line, other than these
  for (const po::option& option : parsed.options)
    if (option.unregistered) direct.insert(option.string_key);

  std::vector<Axis> axes;
  if (vm.count("config")) {
    const std::string path = vm["config"].as<std::string>();
    std::ifstream in(path);  // when it cannot be read, the full parse says so
    po::options_description section;
    section.add_options()("sweep.set", po::value<std::vector<std::string>>());
    po::variables_map file_vm;
    if (in) po::store(po::parse_config_file(in, section, true), file_vm);
    if (file_vm.count("sweep.set")) {
      for (const std::string& text : file_vm["sweep.set"].as<std::vector<std::string>>()) {
        Axis axis = parse_axis(text, path, "[sweep] set");
        if (!direct.count(axis.key)) add_axis(axes, std::move(axis), false);
      }
    }
  }
  if (vm.count("set")) {
    for (const std::string& text : vm["set"].as<std::vector<std::string>>()) {
      Axis axis = parse_axis(text, "", "--set");
      if (direct.count(axis.key)) {
        throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "--set " + axis.key,
                             "--" + axis.key + " is given too; give one or the other");
      }
      add_axis(axes, std::move(axis), true);
    }
  }
  return axes;
}

// Parses the command line with "--KEY=VALUE" of the point added; an error about a swept option
// names its --set value. Returns false when --help was given (the help is printed).
static bool parse_point(const std::vector<std::string>& args, const std::vector<Axis>& axes,
                        Point& point) {
  std::vector<std::string> all = args;
  for (std::size_t a = 0; a < axes.size(); ++a)
    all.push_back("--" + axes[a].key + "=" + axes[a].values[point.choice[a]]);
  const auto blame = [&](const std::string& option, madpipe::ErrorKind kind,
                         const std::string& problem) {
    for (std::size_t a = 0; a < axes.size(); ++a) {
      if (option != "--" + axes[a].key) continue;
      throw madpipe::Error(
          kind, axes[a].file,
          axes[a].field + " " + axes[a].key + "=" + axes[a].values[point.choice[a]], problem);
    }
  };
  const po::options_description description = sweep_options_description(point.options);
  try {
    return parse_options(all, kSyntax, description, config_sections());
  } catch (const madpipe::Error& e) {
    blame(e.field(), e.kind(), e.problem());
    throw;
  } catch (const po::error_with_option_name& e) {
    blame(e.get_option_name(), madpipe::ErrorKind::InvalidInput, e.what());
    throw;
  }
}

// "memory=8GiB gpus=2"
static std::string label(const std::vector<Axis>& axes, const Point& point) {
  std::vector<std::string> items;
  for (std::size_t a = 0; a < axes.size(); ++a)
    items.push_back(axes[a].key + "=" + axes[a].values[point.choice[a]]);
  return join(items, " ");
}

static void check_output_directory(const std::string& path, const std::string& option) {
  if (path.empty()) return;
  const std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (!directory.empty() && !std::filesystem::is_directory(directory))
    madpipe::throw_invalid("", option, "no directory '" + directory.string() + "' for " + path);
}

namespace {
struct Run {
  std::size_t point;
  madpipe::cli::PlanSummary summary;
};
}  // namespace

static madpipe::cli::Table result_table(const std::vector<Axis>& axes,
                                        const std::vector<Point>& points,
                                        const std::vector<Run>& runs, bool csv) {
  using madpipe::cli::fixed;
  madpipe::cli::Table table;
  for (const Axis& axis : axes) {  // sizes and counts to the right, file names to the left
    table.columns.push_back(
        {axis.key, axis.key == "profile" ? madpipe::cli::Align::Left : madpipe::cli::Align::Right});
  }
  const std::vector<std::string> titles =
      csv ? std::vector<std::string>{"algorithm",        "feasible",
                                     "period_ms",        "throughput_per_s",
                                     "max_memory_bytes", "planning_s",
                                     "stages",           "k"}
          : std::vector<std::string>{"algorithm",      "period (ms)", "throughput (/s)",
                                     "max GPU memory", "stages",      "k",
                                     "planning (s)"};
  for (const std::string& title : titles) table.columns.push_back({title});
  table.columns[axes.size()].align = madpipe::cli::Align::Left;
  for (const Run& run : runs) {
    std::vector<std::string> cells;
    for (std::size_t a = 0; a < axes.size(); ++a)
      cells.push_back(axes[a].values[points[run.point].choice[a]]);
    const madpipe::cli::PlanSummary& s = run.summary;
    cells.push_back(madpipe::partition::to_string(s.algorithm));
    const std::string stages = std::to_string(s.stages), k = std::to_string(s.k);
    if (csv) {
      const std::vector<std::string> numbers =
          s.feasible
              ? std::vector<std::string>{"true",
                                         fixed(s.period_ms, 4),
                                         fixed(s.throughput_per_s, 4),
                                         std::to_string(s.max_memory_bytes),
                                         fixed(s.planning_seconds, 3),
                                         stages,
                                         k}
              : std::vector<std::string>{"false", "", "", "", fixed(s.planning_seconds, 3), "", ""};
      cells.insert(cells.end(), numbers.begin(), numbers.end());
    } else {
      const std::vector<std::string> numbers =
          s.feasible ? std::vector<std::string>{fixed(s.period_ms, 2),
                                                fixed(s.throughput_per_s, 2),
                                                madpipe::format_bytes(
                                                    static_cast<double>(s.max_memory_bytes)),
                                                stages,
                                                k,
                                                fixed(s.planning_seconds, 2)}
                     : std::vector<std::string>{
                           "does not fit", "-", "-", "-", "-", fixed(s.planning_seconds, 2)};
      cells.insert(cells.end(), numbers.begin(), numbers.end());
    }
    table.rows.push_back(std::move(cells));
  }
  return table;
}

// A tick label of the memory axis: "16 GiB" for whole GiB or MiB, else as format_bytes writes it.
static std::string memory_tick(std::int64_t bytes) {
  for (const auto& [unit, name] :
       {std::pair<std::int64_t, const char*>{std::int64_t{1} << 30, " GiB"},
        {std::int64_t{1} << 20, " MiB"}}) {
    if (bytes % unit == 0) return std::to_string(bytes / unit) + name;
  }
  return madpipe::format_bytes(static_cast<double>(bytes));
}

// The plot: x the memory per GPU of the points, a panel per combination of the values of the
// other axes, a line per algorithm.
static madpipe::cli::LineChart result_chart(const std::vector<Axis>& axes,
                                            const std::vector<Point>& points,
                                            const std::vector<Run>& runs,
                                            const std::vector<std::string>& profile_names) {
  using namespace madpipe;
  cli::LineChart chart;
  const std::vector<partition::Algorithm>& algorithms = points.front().options.algorithms;
  std::vector<std::int64_t> memories;
  for (const Point& point : points) memories.push_back(point.platform.memory_bytes);
  std::sort(memories.begin(), memories.end());
  memories.erase(std::unique(memories.begin(), memories.end()), memories.end());
  for (std::int64_t bytes : memories) {
    chart.x.push_back(static_cast<double>(bytes));
    chart.x_tick_labels.push_back(memory_tick(bytes));
  }
  for (partition::Algorithm algorithm : algorithms)
    chart.series.push_back(partition::to_string(algorithm));

  // Panels: the other axes' values in the order of the points (the last axis varies fastest).
  std::map<std::vector<std::size_t>, std::size_t> panel_of;
  std::vector<std::size_t> point_panel;
  for (const Point& point : points) {
    std::vector<std::size_t> others;
    std::vector<std::string> title;
    for (std::size_t a = 0; a < axes.size(); ++a) {
      if (axes[a].key == "memory") continue;
      others.push_back(point.choice[a]);
      title.push_back(axes[a].key + " = " + axes[a].values[point.choice[a]]);
    }
    const auto [it, added] = panel_of.emplace(others, chart.panels.size());
    if (added) {
      chart.panels.push_back({join(title, ", "), {}});
      chart.panels.back().values.assign(algorithms.size(),
                                        std::vector<std::optional<double>>(memories.size()));
    }
    point_panel.push_back(it->second);
  }
  for (const Run& run : runs) {
    const Point& point = points[run.point];
    const auto x = static_cast<std::size_t>(
        std::lower_bound(memories.begin(), memories.end(), point.platform.memory_bytes) -
        memories.begin());
    const auto series = static_cast<std::size_t>(
        std::find(algorithms.begin(), algorithms.end(), run.summary.algorithm) -
        algorithms.begin());
    if (run.summary.feasible)
      chart.panels[point_panel[run.point]].values[series][x] = run.summary.period_ms;
  }

  const auto swept = [&](const std::string& key) {
    return std::any_of(axes.begin(), axes.end(), [&](const Axis& axis) { return axis.key == key; });
  };
  const Platform& platform = points.front().platform;
  std::vector<std::string> fixed;
  if (!swept("gpus")) fixed.push_back(std::to_string(platform.gpus) + " GPUs");
  if (!swept("bandwidth"))
    fixed.push_back("links at " + format_bandwidth(platform.bandwidth_bytes_per_ms));
  if (!swept("weight-copies")) fixed.push_back("C = " + std::to_string(platform.weight_copies));
  chart.title = join(profile_names, ", ") + ": period per micro-batch against memory per GPU";
  chart.subtitle = join(fixed, ", ");
  chart.x_label = "memory per GPU (log2 scale)";
  chart.y_label = "period per micro-batch (ms)";
  chart.missing_label = "does not fit";
  return chart;
}

int madpipe::cli::sweep_command(const std::vector<std::string>& args) {
  const std::vector<Axis> axes = read_axes(args);
  std::size_t count = 1;
  for (const Axis& axis : axes) count *= axis.values.size();

  // Every point is parsed and checked before anything is planned.
  std::vector<Point> points(count);
  std::map<std::string, Profile> profiles;  // by path
  std::vector<std::string> profile_names;
  for (std::size_t p = 0; p < count; ++p) {
    Point& point = points[p];
    point.choice.resize(axes.size());
    for (std::size_t a = axes.size(), rest = p; a-- > 0; rest /= axes[a].values.size())
      point.choice[a] = rest % axes[a].values.size();
    if (!parse_point(args, axes, point)) return 0;  // --help
    const std::string& path = point.options.profile_path;
    if (!profiles.count(path)) {
      profiles.emplace(path, read_profile(path));
      profile_names.push_back(profiles.at(path).name);
    }
    point.platform = to_platform(point.options.platform);
    for (partition::Algorithm algorithm : point.options.algorithms)
      point.planners.push_back(
          to_planner_options(point.options.planner, algorithm, point.platform));
  }
  const SweepOptions& options = points.front().options;
  check_output_directory(options.csv_path, "--csv");
  check_output_directory(options.svg_path, "--svg");
  if (!options.csv_path.empty() && options.csv_path == options.svg_path)
    throw_invalid("", "--svg", "the same file as --csv: " + options.svg_path);

  std::vector<Run> runs;
  const std::size_t total = count * options.algorithms.size();
  double seconds = 0;
  for (std::size_t p = 0; p < count; ++p) {
    const Point& point = points[p];
    for (const partition::PlannerOptions& planner : point.planners) {
      runs.push_back(
          {p, plan_summary(profiles.at(point.options.profile_path), point.platform, planner)});
      seconds += runs.back().summary.planning_seconds;
      if (options.quiet) continue;
      std::cerr << "sweep: [" << runs.size() << "/" << total << "] "
                << (axes.empty() ? "" : label(axes, point) + " ")
                << partition::to_string(planner.algorithm) << ": "
                << describe_outcome(runs.back().summary) << '\n';
    }
  }

  // The files first: the table may go to a pipe that closes early (| head).
  if (!options.csv_path.empty()) {
    std::ostringstream csv;
    print_csv(result_table(axes, points, runs, true), csv);
    write_file_atomically(options.csv_path, csv.str());
  }
  if (!options.svg_path.empty()) {
    write_file_atomically(options.svg_path,
                          line_chart_svg(result_chart(axes, points, runs, profile_names)));
  }
  std::vector<std::string> swept;
  for (const Axis& axis : axes)
    swept.push_back(axis.key + " (" + std::to_string(axis.values.size()) + ")");
  std::cout << "profile      " << join(profile_names, ", ") << '\n'
            << "sweep        " << (axes.empty() ? "one point" : join(swept, " x ")) << ", "
            << options.algorithms.size()
            << (options.algorithms.size() == 1 ? " algorithm: " : " algorithms: ") << runs.size()
            << (runs.size() == 1 ? " plan in " : " plans in ") << fixed(seconds, 2) << " s\n\n";
  print_table(result_table(axes, points, runs, false), std::cout);
  if (!options.csv_path.empty()) std::cout << "CSV written to " << options.csv_path << '\n';
  if (!options.svg_path.empty()) std::cout << "SVG written to " << options.svg_path << '\n';
  return 0;
}
