#pragma once

#include <string>
#include <vector>

namespace madpipe::cli {

// `madpipe export`: a plan as a schedule another runtime runs (torch: the compute-only CSV of
// torch.distributed.pipelining and the stages it needs).
int export_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
