#include "cli/export_command.hpp"

#include "cli/options.hpp"
#include "cli/platform_options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/names.hpp"
#include "plan/plan.hpp"
#include "plan/torch_schedule.hpp"
#include "plan/validate.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <system_error>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "export", "--plan FILE --format torch --micro-batches N --output DIR",
    "Writes a plan as a schedule that another runtime runs. torch: DIR/schedule.csv, the\n"
    "compute-only CSV that torch.distributed.pipelining's _PipelineScheduleRuntime loads (one\n"
    "line per rank: its forwards and backwards of N micro-batches, in the plan's order), and\n"
    "DIR/stages.json, which stage runs on which rank with which layers, and notes on where torch\n"
    "runs the plan differently."};

namespace {

enum class ExportFormat { Torch };

constexpr madpipe::Named<ExportFormat> kFormatNames[] = {{ExportFormat::Torch, "torch"}};

struct ExportOptions {
  std::string plan_path;
  ExportFormat format = ExportFormat::Torch;
  int micro_batches = 0;
  std::string output_dir;
};

}  // namespace

static po::options_description export_options_description(ExportOptions& options) {
  po::options_description group("Export options", 100);
  auto add = group.add_options();
  add("plan", po::value(&options.plan_path)->value_name("FILE")->required(),
      "madpipe.plan/1 JSON file, as written by 'madpipe plan --output'");
  add("format",
      po::value<std::string>()->value_name("NAME")->required()->notifier(
          [&options](const std::string& name) {
            options.format = madpipe::value_named(kFormatNames, name, "format", "--format");
          }),
      "what to write: torch (torch.distributed.pipelining)");
  add("micro-batches",
      po::value(&options.micro_batches)
          ->value_name("N")
          ->required()
          ->notifier(madpipe::cli::at_least(1, "--micro-batches")),
      "micro-batches per training step");
  add("output,o", po::value(&options.output_dir)->value_name("DIR")->required(),
      "the folder to write into (created if missing)");
  po::options_description all(100);  // a nested group gets a blank line above its title
  all.add(group);
  return all;
}

static void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::filesystem::is_directory(dir))
    throw madpipe::Error(madpipe::ErrorKind::Io, dir, "",
                         "cannot create the output folder" + (ec ? ": " + ec.message() : ""));
}

static std::string rank_stages(const madpipe::plan::TorchSchedule& schedule, int rank) {
  std::string stages;
  for (std::size_t s = 0; s < schedule.stage_to_rank.size(); ++s)
    if (schedule.stage_to_rank[s] == rank)
      stages += (stages.empty() ? "" : ",") + std::to_string(s);
  return stages.empty() ? "-" : stages;
}

static std::string first_actions(const std::vector<std::string>& actions) {
  constexpr std::size_t kShown = 8;
  if (actions.empty()) return "-";
  std::string out;
  for (std::size_t i = 0; i < std::min(actions.size(), kShown); ++i)
    out += (i > 0 ? " " : "") + actions[i];
  if (actions.size() > kShown) out += " ...";
  return out;
}

static void print_summary(const madpipe::plan::Plan& plan, const ExportOptions& options,
                          const madpipe::plan::TorchSchedule& schedule,
                          const std::vector<std::string>& notes) {
  using madpipe::cli::Align;
  std::cout << "plan      " << options.plan_path << ": " << plan.profile << ", " << plan.algorithm
            << ", " << plan.stages.size() << " stages, " << plan.pattern.k << "-periodic\n"
            << "schedule  torch.distributed.pipelining: " << schedule.actions.size() << " ranks, "
            << plan.stages.size() << " stages, " << schedule.micro_batches << " micro-batches\n\n";
  madpipe::cli::Table ranks{
      {{"rank"}, {"stages", Align::Left}, {"actions"}, {"first actions", Align::Left}}, {}};
  for (std::size_t r = 0; r < schedule.actions.size(); ++r)
    ranks.rows.push_back({std::to_string(r), rank_stages(schedule, static_cast<int>(r)),
                          std::to_string(schedule.actions[r].size()),
                          first_actions(schedule.actions[r])});
  madpipe::cli::print_table(ranks, std::cout);
  std::cout << '\n';
  for (const std::string& note : notes) std::cout << "note: " << note << '\n';
}

int madpipe::cli::export_command(const std::vector<std::string>& args) {
  ExportOptions options;
  const po::options_description description = export_options_description(options);
  if (!parse_options(args, kSyntax, description)) return 0;

  const plan::Plan plan = plan::read_plan(options.plan_path);
  plan::throw_if_invalid(plan::validate(plan), options.plan_path);
  const plan::TorchSchedule schedule = plan::torch_schedule(plan, options.micro_batches);
  const std::vector<std::string> notes = plan::torch_schedule_notes(plan);

  make_directory(options.output_dir);
  const std::string csv_path =
      (std::filesystem::path(options.output_dir) / "schedule.csv").string();
  const std::string stages_path =
      (std::filesystem::path(options.output_dir) / "stages.json").string();
  write_file_atomically(csv_path, plan::torch_schedule_csv(schedule));
  write_file_atomically(stages_path, plan::torch_stages_text(plan, schedule));

  print_summary(plan, options, schedule, notes);
  std::cout << "schedule written to " << csv_path << '\n'
            << "stages written to " << stages_path << '\n';
  return 0;
}
