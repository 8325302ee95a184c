#include "runtime/train/tied_gradients.hpp"

#include "core/error.hpp"

#include <set>

#include <ATen/ATen.h>

madpipe::runtime::TiedGradients::TiedGradients(const ChainModel& model, const plan::Plan& plan,
                                               int position, MPI_Comm pipeline,
                                               const MasterWeights* masters) {
  std::vector<int> gpu_of_layer(static_cast<std::size_t>(model.size()), -1);
  for (const schedule::Stage& stage : plan.stages)
    for (int l = stage.first_layer; l <= stage.last_layer; ++l)
      gpu_of_layer.at(static_cast<std::size_t>(l)) = stage.gpu;
  for (std::size_t g = 0; g < model.tied_parameters.size(); ++g) {
    std::set<int> gpus;
    const TiedUse* local = nullptr;
    for (const TiedUse& use : model.tied_parameters[g]) {
      const int gpu = gpu_of_layer.at(static_cast<std::size_t>(use.layer));
      gpus.insert(gpu);
      if (gpu == position && !local) local = &use;
    }
    if (gpus.size() < 2) continue;
    ++across_ranks_;
    MPI_Comm ranks = MPI_COMM_NULL;
    MPI_Comm_split(pipeline, local ? static_cast<int>(g) : MPI_UNDEFINED, position, &ranks);
    if (!local) continue;
    const auto parameters = model.layers.at(local->layer).ptr()->parameters();
    int rank = 0;
    MPI_Comm_rank(ranks, &rank);
    const at::Tensor& parameter = parameters.at(static_cast<std::size_t>(local->index));
    groups_.push_back({ranks, masters ? masters->master_of(parameter) : parameter, rank == 0});
  }
}

madpipe::runtime::TiedGradients::~TiedGradients() {
  for (Group& group : groups_)
    if (group.ranks != MPI_COMM_NULL) MPI_Comm_free(&group.ranks);
}

bool madpipe::runtime::TiedGradients::is_later_copy(const at::Tensor& parameter) const {
  for (const Group& group : groups_)
    if (group.parameter.unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl())
      return !group.first;
  return false;
}

void madpipe::runtime::TiedGradients::sum() {
  for (Group& group : groups_) {
    at::Tensor& grad = group.parameter.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(group.parameter);
    const at::ScalarType type = grad.scalar_type();
    if (type != at::kFloat && type != at::kDouble)
      throw Error(ErrorKind::Unsupported, "", "tied parameters",
                  std::string("summing gradients of ") + c10::toString(type) +
                      " tied parameters across ranks is not supported (float32, float64)");
    at::Tensor host = grad.to(at::kCPU).contiguous();
    const MPI_Datatype datatype = type == at::kFloat ? MPI_FLOAT : MPI_DOUBLE;
    const int count = static_cast<int>(host.numel());
    int rank = 0;
    MPI_Comm_rank(group.ranks, &rank);
    // Reduce then broadcast: one result computed once, the same bits on every rank.
    at::Tensor sum = rank == 0 ? at::empty_like(host) : at::Tensor();
    MPI_Reduce(host.data_ptr(), rank == 0 ? sum.data_ptr() : nullptr, count, datatype, MPI_SUM, 0,
               group.ranks);
    if (rank != 0) sum = host;
    MPI_Bcast(sum.data_ptr(), count, datatype, 0, group.ranks);
    grad.copy_(sum);
  }
}
