#pragma once

#include <string>
#include <vector>

namespace madpipe::cli {

// madpipe train --config FILE [--key value ...]: pipelined training under mpirun, one process per
// pipeline rank. Any INI key can be overridden on the command line.
int train_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
