#include "cli/compare_command.hpp"

#include "cli/options.hpp"
#include "cli/table.hpp"
#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/compare.hpp"
#include "partition/plan_or_explain.hpp"

#include <algorithm>
#include <iostream>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "compare", "--profile FILE --gpus N --memory SIZE --bandwidth RATE [options]",
    "Plans the model with each algorithm on the same platform and prints one row per algorithm:\n"
    "normalized period, ratios to the best and to the lower bound, throughput, largest GPU\n"
    "memory and planning time. An algorithm with no plan in memory shows \"does not fit\"."};

// "madpipe,1f1b" in the given order, without repeats; "all": every algorithm.
static std::vector<madpipe::partition::Algorithm> parse_algorithm_list(const std::string& text) {
  if (text == "all") return madpipe::partition::all_algorithms();
  std::vector<madpipe::partition::Algorithm> algorithms;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string name = text.substr(begin, comma - begin);
    if (name.empty()) {
      madpipe::throw_invalid("", "--algorithms",
                             "empty name in '" + text + "' (expected e.g. madpipe,1f1b)");
    }
    const madpipe::partition::Algorithm algorithm =
        madpipe::cli::parse_algorithm(name, "--algorithms");
    if (std::find(algorithms.begin(), algorithms.end(), algorithm) == algorithms.end())
      algorithms.push_back(algorithm);
    begin = comma + 1;
  }
  return algorithms;
}

// "madpipe,contiguous,..."
static std::string comma_separated(const std::vector<madpipe::partition::Algorithm>& algorithms) {
  std::string list;
  for (madpipe::partition::Algorithm algorithm : algorithms)
    list += std::string(list.empty() ? "" : ",") + madpipe::partition::to_string(algorithm);
  return list;
}

po::options_description madpipe::cli::comparison_group(const std::string& title,
                                                       ComparisonOptions& options) {
  po::options_description group(title, 100);
  group.add_options()("profile", po::value(&options.profile_path)->value_name("FILE")->required(),
                      "madpipe.profile/1 JSON file of the model's layers");
  return group;
}

po::options_description madpipe::cli::comparison_options_description(
    const po::options_description& own, ComparisonOptions& options) {
  po::options_description planner = planner_options_description(options.planner);
  auto add_planner = planner.add_options();
  add_planner("algorithms",
              po::value<std::string>()
                  ->value_name("LIST")
                  ->default_value(comma_separated(partition::compared_algorithms()))
                  ->notifier([&options](const std::string& text) {
                    options.algorithms = parse_algorithm_list(text);
                  }),
              "comma-separated algorithms to compare, or all (all adds ilp, the full ILP)");
  po::options_description all(100);
  all.add(own).add(platform_options_description(options.platform)).add(planner);
  return all;
}

po::options_description madpipe::cli::compare_options_description(CompareOptions& options) {
  po::options_description compare = comparison_group("Compare options", options);
  auto add_compare = compare.add_options();
  add_compare("csv", po::bool_switch(&options.csv), "print CSV instead of a table");
  add_compare("quiet,q", po::bool_switch(&options.quiet), "no progress lines on stderr");
  return comparison_options_description(compare, options);
}

namespace {
// A row: the plan without rematerialization or offloading and, with --remat rotor or --offload
// host, the plan of the same algorithm allowed them.
struct Row : madpipe::cli::PlanSummary {
  explicit Row(const PlanSummary& plain) : PlanSummary(plain) {}
  PlanSummary remat;  // with them, when asked; planning_seconds above adds up both runs
  double ratio_to_best = 0, ratio_to_lower_bound = 0;  // of the plain plan, when it fits
};
}  // namespace

madpipe::cli::PlanSummary madpipe::cli::plan_summary(const Profile& profile,
                                                     const Platform& platform,
                                                     const partition::PlannerOptions& options) {
  const partition::PlanResult result = partition::make_plan(profile, platform, options);
  if (result.feasible) partition::check_planned(result.plan, profile);
  return summarize(options.algorithm, result);
}

madpipe::cli::PlanSummary madpipe::cli::summarize(partition::Algorithm algorithm,
                                                  const partition::PlanResult& result) {
  PlanSummary summary;
  summary.algorithm = algorithm;
  summary.planning_seconds = result.planning_seconds;
  summary.cut_by_time_limit = result.cut_by_time_limit;
  if (!result.feasible) return summary;
  const plan::Predicted& predicted = result.plan.predicted;
  summary.feasible = true;
  summary.period_ms = predicted.period_ms;
  summary.throughput_per_s = predicted.throughput_per_s;
  summary.max_memory_bytes =
      *std::max_element(predicted.memory_bytes.begin(), predicted.memory_bytes.end());
  summary.stages = static_cast<int>(result.plan.stages.size());
  summary.k = result.plan.pattern.k;
  for (const schedule::Stage& stage : result.plan.stages) {
    summary.remat_stages += stage.uses_sequence();
    summary.split_stages += stage.splits_backward() ? 1 : 0;
  }
  return summary;
}

std::string madpipe::cli::describe_outcome(const PlanSummary& summary) {
  return (summary.feasible ? format_ms(summary.period_ms) + " per micro-batch"
                           : std::string("does not fit")) +
         " (" + fixed(summary.planning_seconds, 2) + " s)";
}

static Row row_of(const madpipe::partition::ComparisonRow& compared) {
  Row row(madpipe::cli::summarize(compared.algorithm, compared.plan));
  if (compared.remat) row.remat = madpipe::cli::summarize(compared.algorithm, *compared.remat);
  row.planning_seconds = compared.planning_seconds;
  row.cut_by_time_limit = compared.cut_by_time_limit;
  row.ratio_to_best = compared.ratio_to_best.value_or(0);
  row.ratio_to_lower_bound = compared.ratio_to_lower_bound.value_or(0);
  return row;
}

static std::vector<madpipe::cli::Column> table_columns(bool remat, bool splits) {
  using madpipe::cli::Align;
  std::vector<madpipe::cli::Column> columns{
      {"algorithm", Align::Left}, {"period (ms)"},    {"vs best"},     {"vs bound"},
      {"throughput (/s)"},        {"max GPU memory"}, {"planning (s)"}};
  if (remat) {
    columns.push_back({"with remat (ms)"});
    columns.push_back({"remat / plain"});
    columns.push_back({"remat stages"});
  }
  if (splits) columns.push_back({"split stages"});
  return columns;
}

// The split column of a row: "2 of 6" stages run W apart from B.
static void append_splits(std::vector<std::string>& cells, const Row& row, const char* none) {
  cells.push_back(
      row.feasible ? std::to_string(row.split_stages) + " of " + std::to_string(row.stages) : none);
}

// The remat columns of a row: period with remat, its ratio to the plain period, stages that use it.
static void append_remat(std::vector<std::string>& cells, const Row& row, int decimals,
                         const char* none) {
  using madpipe::cli::fixed;
  if (!row.remat.feasible) {
    cells.insert(cells.end(), {none, "", ""});
    return;
  }
  cells.push_back(fixed(row.remat.period_ms, decimals));
  cells.push_back(row.feasible ? fixed(row.remat.period_ms / row.period_ms, decimals + 1) : "");
  cells.push_back(std::to_string(row.remat.remat_stages));
}

static std::vector<std::string> table_row(const Row& row, bool remat, bool splits) {
  using madpipe::cli::fixed;
  const std::string name = madpipe::partition::to_string(row.algorithm);
  const std::string seconds = fixed(row.planning_seconds, 2);
  std::vector<std::string> cells =
      row.feasible ? std::vector<std::string>{name,
                                              fixed(row.period_ms, 2),
                                              fixed(row.ratio_to_best, 3),
                                              fixed(row.ratio_to_lower_bound, 3),
                                              fixed(row.throughput_per_s, 2),
                                              madpipe::format_bytes(
                                                  static_cast<double>(row.max_memory_bytes)),
                                              seconds}
                   : std::vector<std::string>{name, "does not fit", "-", "-", "-", "-", seconds};
  if (remat) {
    append_remat(cells, row, 2, "does not fit");
    if (row.remat.feasible && !row.feasible) cells[cells.size() - 2] = "-";
  }
  if (splits) append_splits(cells, row, "-");
  return cells;
}

static std::vector<madpipe::cli::Column> csv_columns(bool remat, bool splits) {
  std::vector<madpipe::cli::Column> columns{{"algorithm"},
                                            {"status"},
                                            {"period_ms"},
                                            {"ratio_to_best"},
                                            {"ratio_to_lower_bound"},
                                            {"throughput_per_s"},
                                            {"max_memory_bytes"},
                                            {"planning_s"}};
  if (remat) {
    columns.push_back({"remat_period_ms"});
    columns.push_back({"remat_ratio_to_plain"});
    columns.push_back({"remat_stages"});
  }
  if (splits) columns.push_back({"split_stages"});
  return columns;
}

static std::vector<std::string> csv_row(const Row& row, bool remat, bool splits) {
  using madpipe::cli::fixed;
  const std::string name = madpipe::partition::to_string(row.algorithm);
  const std::string seconds = fixed(row.planning_seconds, 3);
  std::vector<std::string> cells =
      row.feasible ? std::vector<std::string>{name,
                                              "ok",
                                              fixed(row.period_ms, 4),
                                              fixed(row.ratio_to_best, 4),
                                              fixed(row.ratio_to_lower_bound, 4),
                                              fixed(row.throughput_per_s, 4),
                                              std::to_string(row.max_memory_bytes),
                                              seconds}
                   : std::vector<std::string>{name, "does not fit", "", "", "", "", "", seconds};
  if (remat) append_remat(cells, row, 4, "");
  if (splits) cells.push_back(row.feasible ? std::to_string(row.split_stages) : "");
  return cells;
}

int madpipe::cli::run_compare(const CompareOptions& options) {
  const Profile profile = read_profile(options.profile_path);
  const Platform platform = to_platform(options.platform);
  const PlannerSettings& planner = options.planner;
  partition::PlannerOptions request =
      to_planner_options(planner, partition::Algorithm::MadPipe, platform);
  partition::ComparisonSettings settings;
  if (!options.quiet) {
    settings.progress_of = [](partition::Algorithm algorithm) {
      const std::string name = partition::to_string(algorithm);
      return [name](const std::string& line) {
        std::cerr << "compare: " << name << ": " << line << '\n';
      };
    };
    settings.on_row = [](const partition::ComparisonRow& row) {
      std::cerr << "compare: " << partition::to_string(row.algorithm) << ": "
                << describe_outcome(row_of(row)) << '\n';
    };
  }
  const partition::Comparison comparison =
      partition::compare_algorithms(profile, platform, request, options.algorithms, settings);
  const double lower_bound = comparison.lower_bound_ms;
  std::vector<Row> rows;
  for (const partition::ComparisonRow& row : comparison.rows) rows.push_back(row_of(row));

  const bool remat = planner.options.remat.remat != partition::RematStrategy::None ||
                     planner.options.remat.offload != partition::OffloadStrategy::None;
  // Only where the profile splits backwards and the planner may use it.
  const bool splits = planner.options.split_backward != partition::BackwardSplit::Off &&
                      ChainCosts(profile).has_split_backward();
  Table table;
  table.columns = options.csv ? csv_columns(remat, splits) : table_columns(remat, splits);
  for (const Row& row : rows)
    table.rows.push_back(options.csv ? csv_row(row, remat, splits) : table_row(row, remat, splits));
  if (options.csv) {
    print_csv(table, std::cout);
    return 0;
  }
  std::cout << "profile      " << profile.name << " (" << profile.layers.size() << " layers)\n"
            << "platform     " << describe(platform) << '\n'
            << "lower bound  " << format_ms(lower_bound) << " per micro-batch";
  if (comparison.memory_bound_ms > lower_bound * (1 + 1e-9))
    std::cout << "; " << format_ms(comparison.memory_bound_ms)
              << " for plans that keep every activation (micro-batches in flight)";
  std::cout << "\n\n";
  print_table(table, std::cout);
  std::string cut;
  for (const Row& row : rows)
    if (row.cut_by_time_limit)
      cut += std::string(cut.empty() ? "" : ", ") + partition::to_string(row.algorithm);
  if (!cut.empty())
    std::cout << "\nnote: the time limit of " << fixed(planner.options.time_limit_s, 0)
              << " s cut planning short for " << cut
              << "; a longer --time-limit may find shorter periods\n";
  return 0;
}

int madpipe::cli::compare_command(const std::vector<std::string>& args) {
  CompareOptions options;
  const po::options_description description = compare_options_description(options);
  if (!parse_options(args, kSyntax, description,
                     {platform_config_section(), planner_config_section()})) {
    return 0;
  }
  return run_compare(options);
}
