#include "cli/export_command.hpp"

#include "cli/options.hpp"
#include "cli/platform_options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/names.hpp"
#include "core/profile.hpp"
#include "plan/plan.hpp"
#include "plan/torch_schedule.hpp"
#include "plan/torchtitan_export.hpp"
#include "plan/validate.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <system_error>

#include <boost/program_options/value_semantic.hpp>
#include <nlohmann/json.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "export",
    "--plan FILE --format torch|torchtitan --micro-batches N --output DIR\n"
    "       [--profile FILE | --module-names FILE]",
    "Writes a plan as a schedule that another runtime runs. torch: DIR/schedule.csv, the\n"
    "compute-only CSV that torch.distributed.pipelining's _PipelineScheduleRuntime loads (one\n"
    "line per rank: its forwards and backwards of N micro-batches, in the plan's order), and\n"
    "DIR/stages.json, which stage runs on which rank with which layers, and notes on where torch\n"
    "runs the plan differently. torchtitan: DIR/schedule.csv in torchtitan's rank order and\n"
    "DIR/torchtitan.toml, the [parallelism] settings that run it (module_fqns_per_model_part from\n"
    "--module-names, a JSON list of each layer's module names, or from a decoder --profile)."};

namespace {

enum class ExportFormat { Torch, Torchtitan };

constexpr madpipe::Named<ExportFormat> kFormatNames[] = {{ExportFormat::Torch, "torch"},
                                                         {ExportFormat::Torchtitan, "torchtitan"}};

struct ExportOptions {
  std::string plan_path;
  ExportFormat format = ExportFormat::Torch;
  int micro_batches = 0;
  std::string output_dir;
  std::string profile_path;       // torchtitan: module names of a decoder's layers
  std::string module_names_path;  // torchtitan: each layer's module names
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
      "what to write: torch (torch.distributed.pipelining) or torchtitan");
  add("micro-batches",
      po::value(&options.micro_batches)
          ->value_name("N")
          ->required()
          ->notifier(madpipe::cli::at_least(1, "--micro-batches")),
      "micro-batches per training step");
  add("output,o", po::value(&options.output_dir)->value_name("DIR")->required(),
      "the folder to write into (created if missing)");
  add("profile", po::value(&options.profile_path)->value_name("FILE"),
      "torchtitan: the plan's profile, a decoder's (embed, block<i>, head: madpipe profile "
      "--analytic): its layers' module names, and its micro-batch size");
  add("module-names", po::value(&options.module_names_path)->value_name("FILE"),
      "torchtitan: a JSON list with each layer's module names (a name or a list of names)");
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

// Each layer's torchtitan module names: --module-names, else the decoder --profile's.
static std::vector<std::vector<std::string>> module_names(const ExportOptions& options) {
  if (!options.module_names_path.empty()) {
    const nlohmann::json names = madpipe::read_json_file(options.module_names_path);
    if (!names.is_array())
      madpipe::throw_invalid(options.module_names_path, "",
                             "expected a JSON list with each layer's module names");
    std::vector<std::vector<std::string>> out;
    for (std::size_t l = 0; l < names.size(); ++l) {
      const nlohmann::json& entry = names[l];
      const nlohmann::json list = entry.is_string() ? nlohmann::json::array({entry}) : entry;
      std::vector<std::string> layer;
      for (const nlohmann::json& name : list.is_array() ? list : nlohmann::json::array())
        if (name.is_string() && !name.get<std::string>().empty())
          layer.push_back(name.get<std::string>());
      if (!list.is_array() || layer.empty() || layer.size() != list.size())
        madpipe::throw_invalid(options.module_names_path, "/" + std::to_string(l),
                               "expected a module name or a list of module names");
      out.push_back(layer);
    }
    return out;
  }
  if (options.profile_path.empty())
    madpipe::throw_invalid("", "--format torchtitan",
                           "needs the module names of the layers: --module-names FILE, or the "
                           "decoder --profile the plan was made from");
  return madpipe::plan::decoder_module_names(madpipe::read_profile(options.profile_path),
                                             options.profile_path);
}

static int export_torchtitan(const madpipe::plan::Plan& plan, const ExportOptions& options) {
  namespace fs = std::filesystem;
  const madpipe::plan::TorchtitanExport exported =
      madpipe::plan::torchtitan_export(plan, options.micro_batches, module_names(options));
  const int micro_batch_size =
      options.profile_path.empty() ? 0 : madpipe::read_profile(options.profile_path).batch;
  make_directory(options.output_dir);
  const std::string csv_path = (fs::path(options.output_dir) / "schedule.csv").string();
  const std::string toml_path = (fs::path(options.output_dir) / "torchtitan.toml").string();
  madpipe::write_file_atomically(csv_path, madpipe::plan::torch_schedule_csv(exported.schedule));
  madpipe::write_file_atomically(
      toml_path,
      madpipe::plan::torchtitan_toml(exported, fs::absolute(csv_path).string(), micro_batch_size));
  std::string ranks;
  for (std::size_t g = 0; g < exported.rank_of_gpu.size(); ++g)
    ranks += (g == 0 ? "" : ", ") + std::string("GPU ") + std::to_string(g) + " -> rank " +
             std::to_string(exported.rank_of_gpu[g]);
  std::cout << "plan      " << options.plan_path << ": " << plan.profile << ", " << plan.algorithm
            << ", " << plan.stages.size() << " stages on " << exported.rank_of_gpu.size()
            << " ranks (" << ranks << ")\n";
  for (std::size_t s = 0; s < exported.parts.size(); ++s) {
    std::string names;
    for (const std::string& name : exported.parts[s]) names += (names.empty() ? "" : " ") + name;
    std::cout << "stage " << s << "  rank " << exported.schedule.stage_to_rank[s] << "  " << names
              << '\n';
  }
  std::cout << "schedule written to " << csv_path << '\n'
            << "torchtitan settings written to " << toml_path << '\n';
  return 0;
}

int madpipe::cli::export_command(const std::vector<std::string>& args) {
  ExportOptions options;
  const po::options_description description = export_options_description(options);
  if (!parse_options(args, kSyntax, description)) return 0;

  const plan::Plan plan = plan::read_plan(options.plan_path);
  plan::throw_if_invalid(plan::validate(plan), options.plan_path);
  if (options.format == ExportFormat::Torchtitan) return export_torchtitan(plan, options);
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
