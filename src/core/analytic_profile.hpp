#pragma once

#include "core/decoder_config.hpp"
#include "core/device_spec.hpp"
#include "core/profile.hpp"
#include "core/weight_memory.hpp"

#include <string>

namespace madpipe {

struct AnalyticOptions {
  int seq = 0;               // tokens per sample
  int micro_batch_size = 1;  // samples per micro-batch
  Precision precision = Precision::Bf16;
  DeviceSpec device;
  // The fraction of the device's peak FLOP/s and of its memory bandwidth that the layers reach.
  double efficiency = 0.5;
  std::string name;  // the profile's name
};

// The profile of a decoder before any hardware: the layers embed, block0..block{N-1} and head
// (the final norm, the output projection and the cross-entropy loss), with byte counts exact
// from the shapes under an implementation model and times from FLOPs and bytes moved at
// options.efficiency of the device's peak rates. The models (docs/cli.md, "Analytic profiles"):
// a Llama-family block as fused kernels (RMSNorm, rotary embedding, a grouped-query flash
// attention, SwiGLU); a GPT-2 block as madpipe's built-in gpt runs it (LayerNorm, attention with
// its probabilities materialized, GELU), so that the two can be compared. The loss is computed
// in fp32, as madpipe's runtime computes it. Throws Error{InvalidInput} naming the option
// ("seq", "micro_batch_size", "efficiency") when an option is out of range, or when a byte count
// reaches 2^62.
Profile analytic_profile(const DecoderConfig& config, const AnalyticOptions& options);

}  // namespace madpipe
