#pragma once

#include "plan/plan.hpp"
#include "runtime/model/model.hpp"
#include "runtime/train/optimizer.hpp"

#include <mpi.h>

namespace madpipe::runtime {

// Collective over `pipeline` (every rank of one replica calls it, between training steps, with
// no executor or optimizer referring to the layers; ranks are the plans' GPU ids): moves each
// layer whose rank differs between `from` and `to` from its old rank to its new one: parameters,
// buffers and, through `states`, the optimizer state of its parameters. The new rank builds the
// layer on `device` and loads the values into it; the old rank then drops the layer. Point-to-point
// messages on a private communicator, layer by layer in chain order.
void migrate_layers(ChainModel& model, const plan::Plan& from, const plan::Plan& to, int rank,
                    ParamStates& states, const torch::Device& device,
                    MPI_Comm pipeline = MPI_COMM_WORLD);

// The rank of the stage that holds `layer` in `plan`; throws Error{Internal} when none does.
int rank_of_layer(const plan::Plan& plan, int layer);

// Whether `rank` (a GPU id of `plan`) holds `layer`: the filter that builds a rank's share.
LayerFilter layers_of_rank(const plan::Plan& plan, int rank);

// Drops the layers of other ranks than `rank` in `plan`, for a model built whole (TorchScript).
void drop_other_layers(ChainModel& model, const plan::Plan& plan, int rank);

}  // namespace madpipe::runtime
