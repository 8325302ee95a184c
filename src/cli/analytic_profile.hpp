#pragma once

#include "cli/options.hpp"
#include "core/weight_memory.hpp"

#include <optional>
#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/variables_map.hpp>

namespace madpipe::cli {

// `madpipe profile --analytic CONFIG`: a profile modelled from a Hugging Face config.json and a
// device's peak rates (core/analytic_profile.hpp) instead of measured.
struct AnalyticProfileOptions {
  std::string config;                      // --analytic FILE
  int seq = 0;                             // --seq: tokens per sample
  std::string device_spec;                 // --device-spec NAME: a preset
  std::optional<double> peak_flops;        // --peak-flops, FLOP/s: a custom device
  std::optional<double> memory_bandwidth;  // --memory-bandwidth, bytes per second
  double efficiency = 0.5;                 // --efficiency
};

// The options above; section [profile] of a --config file.
po::options_description analytic_profile_group(AnalyticProfileOptions& options);

// What the analytic and the measured profile share.
struct ProfileOutput {
  int micro_batch_size = 0;
  Precision precision = Precision::Fp32;
  std::string name;  // empty: from the config file's name
  std::string output;
};

// Refuses the options of the path not taken, naming the first one given: with --analytic, each
// of `measured_only` (the built-in model's, the data's, the measurement's); without it, the
// analytic group's.
void check_profile_paths(const po::variables_map& vm, const AnalyticProfileOptions& options,
                         const std::vector<std::string>& measured_only);

// Models the profile, writes it to output.output and prints its layers; returns the exit status.
int run_analytic_profile(const AnalyticProfileOptions& options, const ProfileOutput& output);

}  // namespace madpipe::cli
