#include "cli/profile_command.hpp"

#include "cli/analytic_profile.hpp"
#include "cli/platform_options.hpp"
#include "cli/table.hpp"
#include "cli/train_options.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "runtime/profile/profile_run.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>

#include <boost/program_options/value_semantic.hpp>

namespace {
namespace po = boost::program_options;
using madpipe::cli::at_least;

const madpipe::cli::CommandSyntax kSyntax{
    "profile",
    "[--config FILE] [--model NAME [--script FILE] | --torchscript FILE --input-shape S |\n"
    "       --analytic CONFIG --seq N (--device-spec NAME | --peak-flops F --memory-bandwidth R)]\n"
    "       [options]",
    "Measures every layer of a model on the device it will train on and writes a\n"
    "madpipe.profile/1 file for `madpipe plan`: forward and backward time (median of --repeats\n"
    "runs after --warmup), weight and output bytes, the bytes autograd saves for the backward\n"
    "and the forward/backward workspace peaks. The model is a built-in one (the [model] options\n"
    "of `madpipe train`, read from the same --config files), --model script --script FILE on\n"
    "its --data (as madpipe train takes it), or a TorchScript module whose top-level children\n"
    "form the chain on a random input of --input-shape (--torchscript FILE).\n"
    "--analytic CONFIG models the profile of a decoder (Llama family or GPT-2) from its\n"
    "Hugging Face config.json instead, before any hardware: bytes from the shapes, times from\n"
    "FLOPs and bytes moved at --efficiency of a device's peak rates (docs/cli.md). It needs no\n"
    "LibTorch; of the options below it takes --micro-batch-size, --precision, --name and -o."};

po::options_description workload_group(madpipe::runtime::TrainConfig& c) {
  po::options_description g("Data [training]", 100);
  g.add_options()("data", po::value(&c.data)->default_value(c.data),
                  "text file or directory of text files, or a token file (gpt: sets the "
                  "vocabulary)")(
      "data-format",
      madpipe::cli::enum_value(c.data_format, madpipe::runtime::kDataFormatNames, "data-format",
                               "--data-format"),
      "text, tokens-u16, tokens-u32 or tensors (as madpipe train)")(
      "validation-data", po::value(&c.validation_data),
      "token file of the validation samples (checked like --data)")(
      "micro-batch-size",
      po::value(&c.micro_batch_size)
          ->default_value(c.micro_batch_size)
          ->notifier(at_least(1, "--micro-batch-size")),
      "samples per micro-batch: the batch the costs are for")(
      "precision",
      madpipe::cli::enum_value(c.precision, madpipe::runtime::kPrecisionNames, "precision",
                               "--precision"),
      "the dtype the layers are measured (--analytic: modelled) in, as madpipe train "
      "--precision: fp32, bf16 or fp16")("seed", po::value(&c.seed)->default_value(c.seed),
                                         "initial weights and data");
  return g;
}

po::options_description profile_group(madpipe::runtime::ProfileConfig& c, std::string& output) {
  po::options_description g("Profiling [profile]", 100);
  g.add_options()("torchscript", po::value(&c.torchscript)->value_name("FILE"),
                  "profile this TorchScript module instead of a built-in model")(
      "input-shape", po::value(&c.input_shape)->value_name("SHAPE"),
      "TorchScript: one micro-batch of input, batch first, e.g. 8,3,224,224")(
      "input-dtype", po::value(&c.input_dtype)->default_value(c.input_dtype),
      "TorchScript: float32 (random normal) or int64 (token ids 0)")(

      "device", po::value(&c.device)->default_value(c.device), "cpu, cuda or cuda:N")(
      "tf32", madpipe::cli::enum_value(c.tf32, madpipe::runtime::kOnOffNames, "value", "--tf32"),
      "on: fp32 products and convolutions on GPUs in TF32, as madpipe train runs them; off")(
      "warmup", po::value(&c.warmup)->default_value(c.warmup)->notifier(at_least(0, "--warmup")),
      "untimed runs per layer")(
      "repeats",
      po::value(&c.repeats)->default_value(c.repeats)->notifier(at_least(1, "--repeats")),
      "timed runs per layer (the median is kept)")(
      "threads",
      po::value(&c.threads)->default_value(c.threads)->notifier(at_least(1, "--threads")),
      "CPU threads (a training rank uses 1)")(
      "name", po::value(&c.name),
      "profile name (default: the model's; --analytic: the config file's name)")(
      "output,o", po::value(&output)->default_value("profile.json")->value_name("FILE"),
      "where to write the profile");
  return g;
}

#ifdef MADPIPE_HAS_RUNTIME
std::string percent(double fraction) { return madpipe::cli::fixed(100.0 * fraction, 1) + "%"; }

void print_measurement(const madpipe::runtime::ProfileMeasurement& m, double seconds,
                       const std::string& output) {
  using madpipe::cli::Align;
  madpipe::cli::Table table;
  table.columns = {{"layer", Align::Left},
                   {"fwd ms"},
                   {"bwd ms"},
                   {"spread"},
                   {"weights"},
                   {"output"},
                   {"saved"},
                   {"fwd ws"},
                   {"bwd ws"}};
  double forward = 0, backward = 0, worst = 0;
  const auto& layers = m.profile.layers;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto& layer = layers[l];
    const double spread = std::max(m.spread[l].forward, m.spread[l].backward);
    worst = std::max(worst, spread);
    forward += layer.forward_ms;
    backward += layer.backward_ms;
    auto bytes = [](std::int64_t b) { return madpipe::format_bytes(static_cast<double>(b)); };
    auto measured = [&](std::int64_t b) { return m.memory_measured ? bytes(b) : "-"; };
    table.rows.push_back({layer.name, madpipe::cli::fixed(layer.forward_ms, 3),
                          madpipe::cli::fixed(layer.backward_ms, 3), percent(spread),
                          bytes(layer.weight_bytes), bytes(layer.output_bytes),
                          measured(layer.saved_bytes), measured(layer.forward_workspace_bytes),
                          measured(layer.backward_workspace_bytes)});
  }
  madpipe::cli::print_table(table, std::cout);
  std::cout << "total: forward " << madpipe::cli::fixed(forward, 3) << " ms, backward "
            << madpipe::cli::fixed(backward, 3) << " ms per micro-batch of " << m.profile.batch
            << " on " << m.profile.device << "; largest spread of a layer's runs " << percent(worst)
            << " ((max - min) / median)\n";
  if (!m.memory_measured)
    std::cout << "saved bytes and workspaces were not measured on this device (written as 0)\n";
  std::cout << "wrote " << output << " (" << layers.size() << " layers) in "
            << madpipe::cli::fixed(seconds, 1) << " s\n";
}
#endif
}  // namespace

int madpipe::cli::profile_command(const std::vector<std::string>& args) {
  runtime::ProfileConfig config;
  std::string output;
  const po::options_description model = model_group(config.workload);
  const po::options_description workload = workload_group(config.workload);
  const po::options_description profiling = profile_group(config, output);
  AnalyticProfileOptions analytic;
  const po::options_description analytic_group = analytic_profile_group(analytic);
  po::options_description all(100);
  all.add(model).add(workload).add(profiling).add(analytic_group);
  std::vector<std::string> profile_keys = option_names(profiling);
  for (const std::string& key : option_names(analytic_group)) profile_keys.push_back(key);
  po::variables_map vm;
  if (!parse_options(args, kSyntax, all, train_config_sections({{"profile", profile_keys}}), &vm))
    return 0;
  std::vector<std::string> measured_only = option_names(model);
  for (const char* name : {"data", "data-format", "validation-data", "seed"})
    measured_only.push_back(name);
  for (const std::string& name : option_names(profiling))
    if (name != "name" && name != "output") measured_only.push_back(name);
  check_profile_paths(vm, analytic, measured_only);
  if (!analytic.config.empty())
    return run_analytic_profile(analytic, {config.workload.micro_batch_size,
                                           config.workload.precision, config.name, output});
  if (!config.torchscript.empty() && config.input_shape.empty())
    throw_invalid("", "--input-shape", "a TorchScript model needs the shape of its input");
  if (config.torchscript.empty() && !config.input_shape.empty())
    throw_invalid("", "--input-shape", "only applies to --torchscript models");
#ifdef MADPIPE_HAS_RUNTIME
  if (config.workload.model == runtime::ModelKind::Script)
    runtime::check_train_config(config.workload);
  const auto started = std::chrono::steady_clock::now();
  const runtime::ProfileMeasurement measurement = runtime::run_profile(config);
  write_profile(measurement.profile, output);
  print_measurement(
      measurement,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), output);
  return 0;
#else
  throw Error(ErrorKind::Unsupported, "", "profile",
              "this madpipe was built without the runtime (LibTorch and MPI were not found)");
#endif
}
