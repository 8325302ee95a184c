#pragma once

#include <string>
#include <vector>

namespace madpipe::cli {

// `madpipe export-weights`: a training run's checkpointed weights as one file of state_dict keys
// that PyTorch loads (torch.load, then load_state_dict of the original module).
int export_weights_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
