#pragma once

#include <string>

#include "core/profile.hpp"
#include "runtime/data.hpp"
#include "runtime/model.hpp"

namespace madpipe::runtime {

// Measures every layer of the chain on the current device with one micro-batch: forward and
// backward time (median of repeats after a warm-up), weight bytes (parameters and buffers) and
// output bytes. The last layer's times include the loss. saved_bytes and workspaces are not
// measured yet and are written as 0.
Profile profile_model(ChainModel& model, const Batch& sample, const std::string& name,
                      int repeats = 5);

}  // namespace madpipe::runtime
