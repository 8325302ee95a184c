#include "runtime/train/layer_migration.hpp"

#include "core/error.hpp"

#include <cstdint>
#include <sstream>

#include <mpi.h>

namespace {
// MPI counts are ints: large layers go in pieces.
constexpr std::int64_t kPiece = std::int64_t{1} << 30;

void send_bytes(const std::string& bytes, int to, MPI_Comm comm) {
  std::uint64_t size = bytes.size();
  MPI_Send(&size, 1, MPI_UINT64_T, to, 0, comm);
  for (std::int64_t at = 0; at < static_cast<std::int64_t>(bytes.size()); at += kPiece) {
    const int count = static_cast<int>(std::min<std::int64_t>(kPiece, bytes.size() - at));
    MPI_Send(bytes.data() + at, count, MPI_BYTE, to, 1, comm);
  }
}

std::string receive_bytes(int from, MPI_Comm comm) {
  std::uint64_t size = 0;
  MPI_Recv(&size, 1, MPI_UINT64_T, from, 0, comm, MPI_STATUS_IGNORE);
  std::string bytes(size, '\0');
  for (std::int64_t at = 0; at < static_cast<std::int64_t>(size); at += kPiece) {
    const int count = static_cast<int>(std::min<std::int64_t>(kPiece, size - at));
    MPI_Recv(bytes.data() + at, count, MPI_BYTE, from, 1, comm, MPI_STATUS_IGNORE);
  }
  return bytes;
}

// One layer as a list of CPU tensors: the number of state tensors of each parameter, then the
// parameters, the buffers and the parameters' states in order.
std::string pack_layer(torch::nn::Module& layer, madpipe::runtime::ParamStates& states) {
  const std::vector<torch::Tensor> parameters = layer.parameters();
  std::vector<torch::Tensor> list;
  std::vector<std::int64_t> counts;
  std::vector<torch::Tensor> state_tensors;
  for (const torch::Tensor& p : parameters) {
    auto it = states.find(madpipe::runtime::param_key(p));
    const std::vector<torch::Tensor> state =
        it == states.end() ? std::vector<torch::Tensor>{} : it->second;
    counts.push_back(static_cast<std::int64_t>(state.size()));
    for (const torch::Tensor& t : state) state_tensors.push_back(t.cpu());
    if (it != states.end()) states.erase(it);
  }
  list.push_back(torch::tensor(counts, torch::kInt64));
  for (const torch::Tensor& p : parameters) list.push_back(p.detach().cpu());
  for (const torch::Tensor& b : layer.buffers()) list.push_back(b.detach().cpu());
  list.insert(list.end(), state_tensors.begin(), state_tensors.end());
  std::ostringstream out;
  torch::save(list, out);
  return out.str();
}

void unpack_layer(const std::string& bytes, torch::nn::Module& layer, int index,
                  madpipe::runtime::ParamStates& states) {
  std::vector<torch::Tensor> list;
  std::istringstream in(bytes);
  torch::load(list, in);
  std::vector<torch::Tensor> parameters = layer.parameters();
  std::vector<torch::Tensor> buffers = layer.buffers();
  const auto fail = [&](const std::string& what) {
    throw madpipe::Error(madpipe::ErrorKind::Internal, "", "layer " + std::to_string(index),
                         "moved layer does not match the model: " + what);
  };
  if (list.empty() || list[0].numel() != static_cast<std::int64_t>(parameters.size()))
    fail("parameter count");
  const std::vector<std::int64_t> counts(list[0].data_ptr<std::int64_t>(),
                                         list[0].data_ptr<std::int64_t>() + list[0].numel());
  std::size_t next = 1;
  std::size_t expected = 1 + parameters.size() + buffers.size();
  for (std::int64_t c : counts) expected += static_cast<std::size_t>(c);
  if (list.size() != expected) fail("tensor count");
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters.size() + buffers.size(); ++i)
    if (list[1 + i].sizes() !=
        (i < parameters.size() ? parameters[i] : buffers[i - parameters.size()]).sizes())
      fail("the shape of tensor " + std::to_string(i));
  for (torch::Tensor& p : parameters) p.set_data(list[next++].to(p.device()));
  for (torch::Tensor& b : buffers) b.set_data(list[next++].to(b.device()));
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    std::vector<torch::Tensor> state(list.begin() + next, list.begin() + next + counts[i]);
    next += counts[i];
    if (!state.empty()) states[madpipe::runtime::param_key(parameters[i])] = std::move(state);
  }
}
}  // namespace

int madpipe::runtime::rank_of_layer(const plan::Plan& plan, int layer) {
  for (const auto& stage : plan.stages)
    if (stage.first_layer <= layer && layer <= stage.last_layer) return stage.gpu;
  throw Error(ErrorKind::Internal, "", "/stages", "no stage holds layer " + std::to_string(layer));
}

madpipe::runtime::LayerFilter madpipe::runtime::layers_of_rank(const plan::Plan& plan, int rank) {
  return [plan, rank](int layer) { return rank_of_layer(plan, layer) == rank; };
}

void madpipe::runtime::migrate_layers(ChainModel& model, const plan::Plan& from,
                                      const plan::Plan& to, int rank, ParamStates& states,
                                      const torch::Device& device, MPI_Comm pipeline) {
  MPI_Comm comm;
  MPI_Comm_dup(pipeline, &comm);
  for (int l = 0; l < model.size(); ++l) {
    const int old_rank = rank_of_layer(from, l), new_rank = rank_of_layer(to, l);
    if (old_rank == new_rank) continue;
    if (rank == old_rank) {
      send_bytes(pack_layer(*model.layers[l].ptr(), states), new_rank, comm);
      model.drop(l);
    } else if (rank == new_rank) {
      model.materialize(l, device);
      unpack_layer(receive_bytes(old_rank, comm), *model.layers[l].ptr(), l, states);
    }
  }
  MPI_Comm_free(&comm);
}

void madpipe::runtime::drop_other_layers(ChainModel& model, const madpipe::plan::Plan& plan,
                                         int rank) {
  for (int l = 0; l < model.size(); ++l)
    if (rank_of_layer(plan, l) != rank) model.drop(l);
}
