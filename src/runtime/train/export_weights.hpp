#pragma once

#include <cstdint>
#include <string>

namespace madpipe::runtime {

enum class WeightsFormat {
  Torch,        // torch.save's: a dict from keys to tensors, for torch.load
  Safetensors,  // Hugging Face's safetensors
};

struct ExportedWeights {
  int step = 0;              // of the checkpoint exported
  std::int64_t tensors = 0;  // parameters and buffers written
  std::int64_t bytes = 0;    // their data
};

// Gathers the weights and buffers of a training run's checkpoint (`step`, or the newest complete
// one when 0), stage by stage, into one file that Python reads with torch.load: a dict from the
// original state_dict keys to CPU tensors, for the original module's load_state_dict. Written
// atomically. Throws Error{Io} naming the file or folder when there is no such checkpoint or a
// stage file is missing or damaged, Error{InvalidInput} when a checkpoint does not name its
// tensors or two stages name one key. Safetensors files hold the same keys and tensors, and the
// step in their metadata.
ExportedWeights export_weights(const std::string& run_dir, const std::string& output, int step = 0,
                               WeightsFormat format = WeightsFormat::Torch);

}  // namespace madpipe::runtime
