#pragma once

#include "plan/plan.hpp"
#include "runtime/model.hpp"
#include "runtime/optimizer.hpp"

#include <mpi.h>

namespace madpipe::runtime {

// Collective over `pipeline` (every rank of one replica calls it, between training steps; ranks
// are the plans' GPU ids): moves each layer whose rank differs
// between `from` and `to` from its old rank to its new one: parameters, buffers and, through
// `states`, the optimizer state of its parameters. The old rank then releases the layer's
// tensors; the new rank's parameters are the same tensor objects as before, now holding the
// values. Point-to-point messages on a private communicator, layer by layer in chain order.
void migrate_layers(ChainModel& model, const plan::Plan& from, const plan::Plan& to, int rank,
                    ParamStates& states, MPI_Comm pipeline = MPI_COMM_WORLD);

// The rank of the stage that holds `layer` in `plan`; throws Error{Internal} when none does.
int rank_of_layer(const plan::Plan& plan, int layer);

// Empties the parameters and buffers of layers [first, last] (a rank keeps only its own layers).
void release_layers(ChainModel& model, int first, int last);

// Every rank builds the whole model (same seed, same weights) and keeps only the layers of its
// stages in `plan` (`rank`: its GPU id there): the others' parameters and buffers are released,
// so that a rank's memory is its share.
void release_other_layers(ChainModel& model, const plan::Plan& plan, int rank);

}  // namespace madpipe::runtime
