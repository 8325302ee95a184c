#pragma once

namespace madpipe::runtime {

enum class Direction { Activation, Gradient };

// A transfer is identified by what it carries: the activation a_last(s) of stage s or its
// gradient, for one micro-batch. `sequence` is its position among the messages between the two
// ranks (Instr::sequence), in which order both sides issue them; a transport matching by tags
// (MPI) does not need it, an ordered one (NCCL) relies on it.
struct MessageKey {
  Direction direction = Direction::Activation;
  int stage = 0;
  int micro_batch = 0;
  int sequence = -1;
};

}  // namespace madpipe::runtime
