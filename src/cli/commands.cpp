#include "cli/commands.hpp"

#include "cli/compare_command.hpp"
#include "cli/export_command.hpp"
#include "cli/export_weights_command.hpp"
#include "cli/memplan_command.hpp"
#include "cli/plan_command.hpp"
#include "cli/profile_command.hpp"
#include "cli/remat_command.hpp"
#include "cli/runtime_forwarding.hpp"
#include "cli/scale_command.hpp"
#include "cli/show_command.hpp"
#include "cli/simulate_command.hpp"
#include "cli/sweep_command.hpp"
#include "cli/train_command.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <iostream>

// The commands that train or measure a model: in this process where it holds the runtime
// (madpipe-runtime, or a madpipe built as one program), else in madpipe-runtime.
#ifdef MADPIPE_RUNTIME_IN_PROCESS
#define MADPIPE_RUNTIME_COMMAND(in_process, forwarded) in_process
#else
#define MADPIPE_RUNTIME_COMMAND(in_process, forwarded) forwarded
#endif

const std::vector<madpipe::cli::Command>& madpipe::cli::commands() {
  static const std::vector<Command> table{
      {"plan", "partition and schedule a model: profile + platform -> plan.json", plan_command},
      {"simulate", "replay a plan for one training step: period and peak memory", simulate_command},
      {"compare", "plan with every algorithm and tabulate period, memory and time",
       compare_command},
      {"sweep", "plan over a grid of options: CSV and a plot of period against memory",
       sweep_command},
      {"scale", "data parallelism: D replicas of a P-GPU pipeline, best throughput", scale_command},
      {"remat", "optimal rematerialization of a stage for a memory budget (ROTOR)", remat_command},
      {"memplan", "static memory plan of a stage: tensor offsets in one arena (OLLA ILP)",
       memplan_command},
      {"profile",
       "measure every layer on a device, or model a decoder (--analytic) -> profile.json",
       MADPIPE_RUNTIME_COMMAND(profile_command, profile_in_runtime_binary)},
      {"train", "train a model with a plan, one MPI process per pipeline rank",
       MADPIPE_RUNTIME_COMMAND(train_command, train_in_runtime_binary)},
      {"export", "a plan as a schedule that torch.distributed.pipelining runs", export_command},
      {"export-weights", "a training run's checkpointed weights as a file PyTorch loads",
       MADPIPE_RUNTIME_COMMAND(export_weights_command, export_weights_in_runtime_binary)},
      {"show", "draw a plan or a training trace as a Gantt chart: SVG or Chrome trace",
       show_command},
  };
  return table;
}

static std::string command_names() {
  std::string names;
  for (const madpipe::cli::Command& command : madpipe::cli::commands())
    names += std::string(names.empty() ? "" : ", ") + command.name;
  return names;
}

static const madpipe::cli::Command& find_command(const std::string& name) {
  for (const madpipe::cli::Command& command : madpipe::cli::commands())
    if (name == command.name) return command;
  madpipe::throw_invalid(
      "", "",
      "unknown command '" + name + "' (valid: " + command_names() + "); see 'madpipe --help'");
}

static void print_help() {
  std::cout << "usage: madpipe COMMAND [options]\n"
               "       madpipe help COMMAND | --help | --version\n\n"
               "madpipe plans pipelined model-parallel training of a chain of layers on P GPUs:\n"
               "which layers form a stage, which GPU runs it, and the periodic schedule.\n\n"
               "commands:\n";
  std::size_t width = 0;
  for (const madpipe::cli::Command& command : madpipe::cli::commands())
    width = std::max(width, std::string(command.name).size());
  for (const madpipe::cli::Command& command : madpipe::cli::commands()) {
    const std::string name = command.name;
    std::cout << "  " << name << std::string(width - name.size() + 2, ' ') << command.summary
              << '\n';
  }
  std::cout << "\nRun 'madpipe COMMAND --help' for the options of a command.\n";
}

int madpipe::cli::run_madpipe(const std::vector<std::string>& args) {
  if (args.empty()) {
    throw_invalid("", "",
                  "no command given (commands: " + command_names() + "); see 'madpipe --help'");
  }
  const std::string& first = args.front();
  if (first == "--help" || first == "-h") {
    print_help();
    return 0;
  }
  if (first == "--version") {
    std::cout << "madpipe " << kVersion << '\n';
    return 0;
  }
  if (first == "help") {
    if (args.size() == 1) {
      print_help();
      return 0;
    }
    if (args.size() > 2) throw_invalid("", "", "'madpipe help' takes one command name");
    return find_command(args[1]).run({"--help"});
  }
  if (!first.empty() && first.front() == '-') {
    throw_invalid("", "",
                  "unknown option '" + first + "' before the command (commands: " +
                      command_names() + "; options: --help, --version)");
  }
  return find_command(first).run(std::vector<std::string>(args.begin() + 1, args.end()));
}
