#pragma once

#include "plan/plan.hpp"
#include "runtime/model/model.hpp"
#include "runtime/train/master_weights.hpp"

#include <vector>

#include <ATen/core/Tensor.h>
#include <mpi.h>

namespace madpipe::runtime {

// Tied parameters (ChainModel::tied_parameters) whose layers lie on several ranks of a pipeline:
// each such rank holds a copy, and after a step's backwards their gradients are summed over those
// ranks (one reduction to the group's first rank and a broadcast per group, so every copy gets
// the same bits), as Megatron does for a tied embedding and output head. With equal gradients
// and equal optimizer states, the copies stay equal. Layers of a group on one rank share one
// tensor already and need nothing.
class TiedGradients {
 public:
  // Collective over `pipeline` (ranked by position): `model` holds this rank's layers of `plan`.
  // With `masters` (bf16 training), the groups' masters are what is summed.
  TiedGradients(const ChainModel& model, const plan::Plan& plan, int position, MPI_Comm pipeline,
                const MasterWeights* masters = nullptr);
  ~TiedGradients();
  TiedGradients(const TiedGradients&) = delete;
  TiedGradients& operator=(const TiedGradients&) = delete;

  // Groups that span ranks (this rank's or not).
  int groups_across_ranks() const noexcept { return across_ranks_; }
  // Sums the gradients of this rank's groups over their ranks (an undefined gradient counts as
  // zero); after the replicas' averaging, before the optimizer steps. Throws Error{Unsupported}
  // for a dtype other than float and double.
  void sum();
  // Whether `parameter` is this rank's copy of a group whose first rank holds it too: the global
  // gradient norm counts each group once (at its first rank).
  bool is_later_copy(const at::Tensor& parameter) const;

 private:
  struct Group {
    MPI_Comm ranks = MPI_COMM_NULL;
    at::Tensor parameter;
    bool first = false;  // this rank is the group's first
  };
  std::vector<Group> groups_;  // this rank's
  int across_ranks_ = 0;
};

}  // namespace madpipe::runtime
