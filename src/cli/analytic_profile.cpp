#include "cli/analytic_profile.hpp"

#include "cli/table.hpp"
#include "core/analytic_profile.hpp"
#include "core/decoder_config.hpp"
#include "core/device_spec.hpp"
#include "core/error.hpp"
#include "core/units.hpp"

#include <filesystem>
#include <iostream>
#include <string>

#include <boost/program_options/value_semantic.hpp>

namespace {
namespace po = boost::program_options;

const char* const kAnalyticOnly[] = {"seq", "device-spec", "peak-flops", "memory-bandwidth",
                                     "efficiency"};

// "models/llama3-8b.json" -> "llama3-8b"; a Hugging Face snapshot's ".../Llama-3-8B/config.json"
// -> "Llama-3-8B".
std::string default_name(const std::string& config) {
  const std::filesystem::path path(config);
  if (path.stem() == "config" && path.has_parent_path()) {
    const std::string directory = std::filesystem::absolute(path).parent_path().filename().string();
    if (!directory.empty()) return directory;
  }
  return path.stem().string();
}

madpipe::DeviceSpec device_of(const madpipe::cli::AnalyticProfileOptions& o) {
  const bool custom = o.peak_flops || o.memory_bandwidth;
  if (!o.device_spec.empty() && custom)
    madpipe::throw_invalid("", o.peak_flops ? "--peak-flops" : "--memory-bandwidth",
                           "give either --device-spec or --peak-flops and --memory-bandwidth, "
                           "not both");
  if (!o.device_spec.empty()) return madpipe::device_preset(o.device_spec, "--device-spec");
  if (!custom)
    madpipe::throw_invalid("", "--device-spec",
                           "--analytic needs a device: --device-spec NAME (" +
                               madpipe::device_preset_names() +
                               ") or --peak-flops and --memory-bandwidth");
  if (!o.peak_flops)
    madpipe::throw_invalid("", "--peak-flops",
                           "a custom device needs its dense FLOP/s with --memory-bandwidth");
  if (!o.memory_bandwidth)
    madpipe::throw_invalid("", "--memory-bandwidth",
                           "a custom device needs its memory bandwidth with --peak-flops");
  return madpipe::custom_device_spec(*o.peak_flops, *o.memory_bandwidth);
}

void print_profile(const madpipe::Profile& profile, const std::string& output) {
  using madpipe::cli::Align;
  madpipe::cli::Table table;
  table.columns = {{"layer", Align::Left},
                   {"fwd ms"},
                   {"bwd ms"},
                   {"weights"},
                   {"output"},
                   {"saved"},
                   {"fwd ws"},
                   {"bwd ws"}};
  auto bytes = [](std::int64_t b) { return madpipe::format_bytes(static_cast<double>(b)); };
  double forward = 0, backward = 0, weights = 0;
  for (const madpipe::Layer& layer : profile.layers) {
    forward += layer.forward_ms;
    backward += layer.backward_ms;
    weights += static_cast<double>(layer.weight_bytes);
    table.rows.push_back({layer.name, madpipe::cli::fixed(layer.forward_ms, 3),
                          madpipe::cli::fixed(layer.backward_ms, 3), bytes(layer.weight_bytes),
                          bytes(layer.output_bytes), bytes(layer.saved_bytes),
                          bytes(layer.forward_workspace_bytes),
                          bytes(layer.backward_workspace_bytes)});
  }
  madpipe::cli::print_table(table, std::cout);
  std::cout << "total: forward " << madpipe::cli::fixed(forward, 3) << " ms, backward "
            << madpipe::cli::fixed(backward, 3) << " ms per micro-batch of " << profile.batch
            << " x " << profile.seq << " tokens, weights " << madpipe::format_bytes(weights)
            << " in " << profile.dtype;
  for (const madpipe::TiedWeight& tied : profile.tied_weights)
    std::cout << " (" << bytes(tied.bytes) << " of them tied: "
              << profile.layers[static_cast<std::size_t>(tied.layers.front())].name << " and "
              << profile.layers[static_cast<std::size_t>(tied.layers.back())].name
              << " share one matrix, counted by both)";
  std::cout << "\n"
            << "source: " << profile.source << "\n"
            << "wrote " << output << " (" << profile.layers.size() << " layers)\n";
}
}  // namespace

po::options_description madpipe::cli::analytic_profile_group(AnalyticProfileOptions& o) {
  const std::string config_help = "model a decoder's profile from its Hugging Face config.json (" +
                                  supported_model_types() + ") instead of measuring a model";
  const std::string preset_help =
      "--analytic: the device's peak rates, a preset: " + device_preset_names();
  auto check_seq = [](int seq) {
    if (seq < 1) throw_invalid("", "--seq", "must be >= 1, got " + std::to_string(seq));
  };
  auto read_flops = [&o](const std::string& text) {
    o.peak_flops = parse_flops(text, "--peak-flops");
  };
  auto read_bandwidth = [&o](const std::string& text) {
    o.memory_bandwidth = 1000.0 * parse_bandwidth(text, "--memory-bandwidth");  // B/ms -> B/s
  };
  auto check_efficiency = [](double x) {
    if (!(x > 0 && x <= 1))
      throw_invalid("", "--efficiency", "must be in (0, 1], got " + format_number(x));
  };
  po::options_description g("Analytic profile [profile]", 100);
  auto add = g.add_options();
  add("analytic", po::value(&o.config)->value_name("CONFIG"), config_help.c_str());
  add("seq", po::value(&o.seq)->value_name("N")->notifier(check_seq),
      "--analytic: tokens per sample");
  add("device-spec", po::value(&o.device_spec)->value_name("NAME"), preset_help.c_str());
  add("peak-flops", po::value<std::string>()->value_name("F")->notifier(read_flops),
      "--analytic on another device: its dense FLOP/s in --precision, e.g. 989T or 1.2e12");
  add("memory-bandwidth", po::value<std::string>()->value_name("RATE")->notifier(read_bandwidth),
      "--analytic on another device: its memory bandwidth, e.g. 3.35TB/s");
  add("efficiency",
      po::value(&o.efficiency)
          ->default_value(o.efficiency)
          ->value_name("X")
          ->notifier(check_efficiency),
      "--analytic: the fraction of the peak FLOP/s and bandwidth the layers reach");
  return g;
}

void madpipe::cli::check_profile_paths(const po::variables_map& vm,
                                       const AnalyticProfileOptions& options,
                                       const std::vector<std::string>& measured_only) {
  if (options.config.empty()) {
    for (const char* name : kAnalyticOnly)
      if (given(vm, name))
        throw_invalid("", std::string("--") + name,
                      "only applies to --analytic (a measured profile times the device itself)");
    return;
  }
  for (const std::string& name : measured_only)
    if (given(vm, name))
      throw_invalid("", "--" + name,
                    "does not apply to --analytic (the model is the config file's, and nothing "
                    "is measured)");
  if (options.seq == 0) throw_invalid("", "--seq", "--analytic needs the tokens per sample");
}

int madpipe::cli::run_analytic_profile(const AnalyticProfileOptions& options,
                                       const ProfileOutput& output) {
  const DecoderConfig config = read_decoder_config(options.config);
  AnalyticOptions analytic;
  analytic.seq = options.seq;
  analytic.micro_batch_size = output.micro_batch_size;
  analytic.precision = output.precision;
  analytic.device = device_of(options);
  analytic.efficiency = options.efficiency;
  analytic.name = output.name.empty() ? default_name(options.config) : output.name;
  // The core checks this too; here the message names the option.
  if (config.positions > 0 && options.seq > config.positions)
    throw_invalid("", "--seq",
                  "must be at most the config's n_positions (" + std::to_string(config.positions) +
                      "), the rows of its position table, got " + std::to_string(options.seq));
  const Profile profile = analytic_profile(config, analytic);
  write_profile(profile, output.output);
  print_profile(profile, output.output);
  return 0;
}
