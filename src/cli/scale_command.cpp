#include "cli/scale_command.hpp"

#include "cli/options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/data_parallel.hpp"
#include "partition/plan_or_explain.hpp"
#include "plan/plan.hpp"

#include <filesystem>
#include <iostream>
#include <sstream>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "scale", "--profile FILE --gpus G --global-batch B --memory SIZE --bandwidth RATE [options]",
    "Splits G GPUs into D data-parallel replicas of a P-GPU pipeline (G = D x P; rank r runs\n"
    "position r % P of replica r / P) for every D dividing G, plans each pipeline and models a\n"
    "training step: m = B / (D x batch) micro-batches per replica with a flush, then each stage\n"
    "all-reduces its gradients over its replicas. Prints a row per D and chooses the highest\n"
    "throughput; --output writes the chosen pipeline's plan with its number of replicas."};

po::options_description madpipe::cli::scale_options_description(ScaleOptions& options) {
  po::options_description scale("Scale options ([scale] in a --config file)", 100);
  auto add_scale = scale.add_options();
  add_scale("profile", po::value(&options.profile_path)->value_name("FILE")->required(),
            "madpipe.profile/1 JSON file of the model's layers; its batch is the micro-batch");
  add_scale("global-batch",
            po::value(&options.global_batch)
                ->value_name("B")
                ->required()
                ->notifier(at_least(1, "--global-batch")),
            "samples per training step over all replicas: D x m x the profile's batch");
  add_scale("all-reduce-latency",
            po::value(&options.all_reduce_latency_ms)
                ->value_name("MS")
                ->default_value(options.all_reduce_latency_ms)
                ->notifier([](double ms) {
                  if (!(ms >= 0)) throw_invalid("", "--all-reduce-latency", "must be >= 0 ms");
                }),
            "latency of one message of a ring all-reduce in ms (2 (D - 1) messages each)");
  add_scale("csv", po::value(&options.csv_path)->value_name("FILE"),
            "write one CSV row per choice of D to FILE");
  add_scale("output,o", po::value(&options.output_path)->value_name("FILE"),
            "write the chosen pipeline's plan (madpipe.plan/1 with \"replicas\") to FILE");
  add_scale("quiet,q", po::bool_switch(&options.quiet), "no progress lines on stderr");
  po::options_description planner = planner_options_description(options.planner);
  add_algorithm_option(planner, options.algorithm,
                       "how each pipeline is planned: " +
                           partition::algorithm_list(partition::all_algorithms(), "or"));
  po::options_description all(100);
  all.add(scale).add(platform_options_description(options.platform)).add(planner);
  return all;
}

static void check_output_directory(const std::string& path, const std::string& option) {
  if (path.empty()) return;
  const std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (!directory.empty() && !std::filesystem::is_directory(directory))
    madpipe::throw_invalid("", option, "no directory '" + directory.string() + "' for " + path);
}

static std::string status_of(const madpipe::partition::DataParallelChoice& choice, bool chosen) {
  if (!choice.feasible) return "rejected: " + choice.reason;
  const std::string status = chosen ? "chosen" : "ok";
  return choice.warning.empty() ? status : status + " (" + choice.warning + ")";
}

static madpipe::cli::Table choices_table(const madpipe::partition::DataParallelResult& result,
                                         bool csv) {
  using madpipe::cli::Align;
  using madpipe::cli::fixed;
  using Choice = madpipe::partition::DataParallelChoice;
  madpipe::cli::Table table;
  if (csv) {
    for (const char* title :
         {"replicas", "pipeline_gpus", "micro_batches", "status", "period_ms", "pipeline_ms",
          "fill_drain_ms", "bubble", "all_reduce_ms", "all_reduce_exposed_ms", "step_ms",
          "samples_per_s", "peak_memory_bytes", "planning_s", "reason"})
      table.columns.push_back({title});
  } else {
    table.columns = {{"D"},
                     {"P"},
                     {"m"},
                     {"period (ms)"},
                     {"bubble"},
                     {"all-reduce (ms)"},
                     {"exposed (ms)"},
                     {"step (ms)"},
                     {"samples/s"},
                     {"peak memory"},
                     {"status", Align::Left}};
  }
  for (std::size_t i = 0; i < result.choices.size(); ++i) {
    const Choice& c = result.choices[i];
    const bool chosen = i == 0 && c.feasible;
    std::vector<std::string> row{std::to_string(c.replicas), std::to_string(c.pipeline_gpus),
                                 c.micro_batches > 0 ? std::to_string(c.micro_batches) : "-"};
    if (csv) {
      row.back() = std::to_string(c.micro_batches);
      row.push_back(!c.feasible ? "rejected" : chosen ? "chosen" : "ok");
      if (c.feasible) {
        for (double value : {c.period_ms, c.pipeline_ms, c.fill_drain_ms})
          row.push_back(fixed(value, 4));
        row.push_back(fixed(c.bubble(), 4));
        for (double value : {c.all_reduce_ms, c.all_reduce_exposed_ms, c.step_ms})
          row.push_back(fixed(value, 4));
        row.push_back(fixed(c.samples_per_s, 2));
        row.push_back(std::to_string(c.peak_memory_bytes));
      } else {
        row.insert(row.end(), 9, "");
      }
      row.push_back(fixed(c.planning_seconds, 3));
      row.push_back(c.feasible ? c.warning : c.reason);
    } else if (c.feasible) {
      row.insert(
          row.end(),
          {fixed(c.period_ms, 2), fixed(100 * c.bubble(), 1) + "%", fixed(c.all_reduce_ms, 2),
           fixed(c.all_reduce_exposed_ms, 2), fixed(c.step_ms, 2), fixed(c.samples_per_s, 1),
           madpipe::format_bytes(static_cast<double>(c.peak_memory_bytes)), status_of(c, chosen)});
    } else {
      row.insert(row.end(), 7, "-");
      row.push_back(status_of(c, chosen));
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

static void print_chosen(const madpipe::partition::DataParallelChoice& choice,
                         const madpipe::Profile& profile) {
  using madpipe::cli::fixed;
  std::cout << "chosen       D = " << choice.replicas
            << (choice.replicas == 1 ? " replica" : " replicas") << " of a " << choice.pipeline_gpus
            << "-GPU pipeline (" << choice.plan.stages.size()
            << (choice.plan.stages.size() == 1 ? " stage" : " stages") << ", "
            << choice.plan.algorithm << "), m = " << choice.micro_batches
            << (choice.micro_batches == 1 ? " micro-batch of " : " micro-batches of ")
            << profile.batch << " per replica: " << fixed(choice.samples_per_s, 1)
            << " samples/s, step " << madpipe::format_ms(choice.step_ms) << '\n';
  for (const std::string& note : choice.notes) std::cout << "note         " << note << '\n';
}

int madpipe::cli::run_scale(const ScaleOptions& options) {
  check_output_directory(options.csv_path, "--csv");
  check_output_directory(options.output_path, "--output");
  const Profile profile = read_profile(options.profile_path);
  if (options.global_batch % profile.batch != 0)
    throw_invalid("", "--global-batch",
                  "must be a multiple of the profile's batch (" + std::to_string(profile.batch) +
                      "), got " + std::to_string(options.global_batch));
  const Platform platform = to_platform(options.platform);
  partition::DataParallelOptions data_parallel;
  data_parallel.global_batch = options.global_batch;
  data_parallel.all_reduce_latency_ms = options.all_reduce_latency_ms;
  data_parallel.planner = to_planner_options(options.planner, options.algorithm, platform);
  if (!options.quiet)
    data_parallel.planner.progress = [](const std::string& line) {
      std::cerr << "scale: " << line << '\n';
    };
  const partition::DataParallelResult result =
      partition::plan_data_parallel(profile, platform, data_parallel);

  std::cout << "profile      " << profile.name << " (" << profile.layers.size()
            << " layers, micro-batch " << profile.batch << ")\n"
            << "platform     " << describe(platform) << '\n'
            << "global batch " << options.global_batch << " samples per step = D x m x "
            << profile.batch << "\n\n";
  print_table(choices_table(result, false), std::cout);
  std::cout << '\n';
  if (result.feasible()) print_chosen(result.choices.front(), profile);
  std::cout << "planned in   " << fixed(result.planning_seconds, 2) << " s\n";
  if (!options.csv_path.empty()) {
    std::ostringstream csv;
    print_csv(choices_table(result, true), csv);
    write_file_atomically(options.csv_path, csv.str());
    std::cout << "CSV written to " << options.csv_path << '\n';
  }
  if (!result.feasible())
    throw_invalid("", "",
                  "no split of the " + std::to_string(platform.gpus) +
                      " GPUs into D replicas of a pipeline works (reasons in the table)");
  const plan::Plan& chosen = result.choices.front().plan;
  partition::check_planned(chosen, profile);
  if (!options.output_path.empty()) {
    plan::write_plan(chosen, options.output_path);
    std::cout << "plan written to " << options.output_path << " (" << chosen.replicas << " x "
              << chosen.platform.gpus << " GPUs)\n";
  }
  return 0;
}

int madpipe::cli::scale_command(const std::vector<std::string>& args) {
  ScaleOptions options;
  const po::options_description description = scale_options_description(options);
  if (!parse_options(args, kSyntax, description,
                     {platform_config_section(),
                      planner_config_section(),
                      {"scale", {"profile", "global-batch", "all-reduce-latency"}}})) {
    return 0;
  }
  return run_scale(options);
}
