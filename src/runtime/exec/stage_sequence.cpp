#include "runtime/exec/stage_sequence.hpp"

#include "runtime/model/saved_tensors.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

using madpipe::Error;
using madpipe::ErrorKind;
using madpipe::remat::RematOp;
using madpipe::remat::RematOpKind;
using madpipe::runtime::SequencePresence;
using madpipe::runtime::SequenceRun;

namespace {
// Names in the terms of the sequence text: a_j is the input of layer first + j.
std::string layer_name(int k, int first) { return std::to_string(first + k - 1); }

std::string activation_name(int j, int first) {
  return j == 0 ? std::string("the stage input") : "the output of layer " + layer_name(j, first);
}

// Why `op` cannot run with what `p` holds; empty when it can. The rules of
// remat::replay_sequence (thesis Table 2.1) plus offloading: an offloaded a_j cannot be used
// before the P that brings it back.
std::string blocked(const SequencePresence& p, const RematOp& op, int n, int first) {
  const int k = op.stage;
  if (k < 1 || k > n + 1) return "stage index out of range";
  const bool loss = k == n + 1;
  if (loss && op.kind != RematOpKind::ForwardAll && op.kind != RematOpKind::Backward)
    return "the loss can only run as Loss and dLoss";
  auto input_problem = [&](int j) -> std::string {
    if (p.host[j])
      return "its input (" + activation_name(j, first) + ") is offloaded: P" +
             layer_name(j + 1, first) + " must bring it back first";
    if (!p.available(j)) return "its input (" + activation_name(j, first) + ") is not stored";
    return "";
  };
  switch (op.kind) {
    case RematOpKind::ForwardNone:
      if (p.host[k - 1] || p.plain[k - 1]) return input_problem(k - 1);
      return "F none frees its input, which must be stored as a plain tensor (the stage input or "
             "the output of F ck or F none), but " +
             activation_name(k - 1, first) +
             (p.available(k - 1) ? " is only held by the recorded forward (F all) of layer " +
                                       layer_name(k - 1, first)
                                 : " is not stored");
    case RematOpKind::ForwardAll:
    case RematOpKind::ForwardCheckpoint:
      if (loss && p.recorded[k]) return "the loss forward already ran";
      return input_problem(k - 1);
    case RematOpKind::Backward:
      if (loss) {
        if (!p.recorded[k]) return "Loss has not run";
        return input_problem(k - 1);
      }
      if (!p.gradient[k])
        return "the gradient of its output is not there (" +
               (k == n ? std::string("dLoss") : "B" + layer_name(k + 1, first)) +
               " must run first)";
      if (!p.recorded[k])
        return "layer " + layer_name(k, first) + " was not recorded (no F" + layer_name(k, first) +
               "all since its last backward)";
      return input_problem(k - 1);
    case RematOpKind::Offload:
      if (p.host[k - 1]) return activation_name(k - 1, first) + " is already offloaded";
      if (!p.available(k - 1))
        return "nothing to offload: " + activation_name(k - 1, first) + " is not stored";
      return "";
    case RematOpKind::Prefetch:
      if (!p.host[k - 1])
        return "nothing to prefetch: " + activation_name(k - 1, first) +
               " was not offloaded (no O" + layer_name(k, first) + " before it)";
      return "";
  }
  return "unknown op";
}

// What `op` leaves stored, given that blocked() allowed it.
void apply(SequencePresence& p, const RematOp& op, int n) {
  const int k = op.stage;
  switch (op.kind) {
    case RematOpKind::ForwardAll:
      p.recorded[k] = 1;
      if (k <= n) p.plain[k] = p.host[k] = 0;
      break;
    case RematOpKind::ForwardCheckpoint:
    case RematOpKind::ForwardNone:
      p.plain[k] = 1;
      p.host[k] = 0;
      if (op.kind == RematOpKind::ForwardNone) p.plain[k - 1] = 0;
      break;
    case RematOpKind::Backward:
      if (k <= n) p.gradient[k] = 0;
      p.recorded[k] = 0;
      p.plain[k - 1] = 0;
      p.gradient[k - 1] = 1;
      break;
    case RematOpKind::Offload:
      p.host[k - 1] = 1;
      p.plain[k - 1] = 0;
      break;
    case RematOpKind::Prefetch:
      p.host[k - 1] = 0;
      p.plain[k - 1] = 1;
      break;
  }
}

// What a finished presence still holds beyond delta_0, for the error message.
std::string leftovers(const SequencePresence& p, int n, int first) {
  std::string out;
  auto add = [&](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
  if (!p.gradient[0])
    add("no gradient of the stage input (B" + layer_name(1, first) + " never completes the chain)");
  for (int j = 0; j <= n; ++j) {
    if (p.plain[j]) add(activation_name(j, first) + " still stored");
    if (p.host[j]) add(activation_name(j, first) + " still offloaded");
    if (j >= 1 && p.gradient[j]) add("the gradient of " + activation_name(j, first) + " unused");
  }
  for (int k = 1; k <= n; ++k)
    if (p.recorded[k]) add("layer " + layer_name(k, first) + " recorded but never backpropagated");
  if (p.recorded[n + 1]) add("the loss recorded but dLoss never ran");
  return out;
}

// Replays `ops` with the rules the run applies before each op: the index of the first op they
// block (why in `problem`), else ops.size(); `presence` is what the ops leave.
std::size_t dry_run(const madpipe::remat::RematSequence& ops, int n, int first,
                    SequencePresence& presence, std::string& problem) {
  presence = SequencePresence(n);
  presence.plain[0] = 1;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    problem = blocked(presence, ops[i], n, first);
    if (!problem.empty()) return i;
    apply(presence, ops[i], n);
  }
  return ops.size();
}

bool is_transfer(const RematOp& op) {
  return op.kind == RematOpKind::Offload || op.kind == RematOpKind::Prefetch;
}

// F^all, F^ck, F^none of a layer or the Loss.
bool is_forward(const RematOp& op) { return op.kind != RematOpKind::Backward && !is_transfer(op); }

std::string what_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

// Generator state swap for the duration of a recomputation (restored afterwards, so the
// recomputation consumes no random numbers of later forwards).
class GeneratorFork {
 public:
  GeneratorFork(at::Generator generator, const torch::Tensor& state)
      : generator_(std::move(generator)) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    saved_ = generator_.get_state();
    generator_.set_state(state);
  }
  ~GeneratorFork() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(saved_);
  }
  GeneratorFork(const GeneratorFork&) = delete;
  GeneratorFork& operator=(const GeneratorFork&) = delete;

 private:
  at::Generator generator_;
  torch::Tensor saved_;
};

torch::Tensor generator_state(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

at::Generator cpu_generator() {
  return at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
}

// Buffers (batch-norm running statistics) restored after a recomputation: a layer's state moves
// once per micro-batch, as in unsplit training.
class BufferKeeper {
 public:
  explicit BufferKeeper(torch::nn::Module& module) : buffers_(module.buffers()) {
    for (const torch::Tensor& b : buffers_) saved_.push_back(b.detach().clone());
  }
  // Written through variable_data(), which does not bump the version counter: a graph recorded
  // by the recomputation saves the buffers (batch norm does) and checks their version in B.
  ~BufferKeeper() {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < buffers_.size(); ++i) buffers_[i].variable_data().copy_(saved_[i]);
  }
  BufferKeeper(const BufferKeeper&) = delete;
  BufferKeeper& operator=(const BufferKeeper&) = delete;

 private:
  std::vector<torch::Tensor> buffers_, saved_;
};

// One side stream per CUDA device for offload and prefetch copies.
c10::Stream side_stream(const c10::impl::VirtualGuardImpl& impl, c10::Device device) {
  static std::map<c10::DeviceIndex, c10::Stream> streams;
  auto it = streams.find(device.index());
  if (it == streams.end())
    it = streams.emplace(device.index(), impl.getStreamFromGlobalPool(device)).first;
  return it->second;
}

// O: a host copy of `x`. CUDA: into pinned memory on the side stream, after the compute stream
// produced `x`; the caching allocator is told that the side stream reads x's memory, so dropping
// x cannot hand it out before the copy is done. CPU: a copy in memory of its own, outside the
// CPU allocator, so that what madpipe counts as a CPU rank's tensors is what a GPU would hold
// (host copies are not device memory).
torch::Tensor to_host(const torch::Tensor& x) {
  if (!x.is_cuda()) {
    const torch::Tensor values = x.detach().contiguous();
    void* memory = std::malloc(std::max<std::size_t>(values.nbytes(), 1));
    if (memory == nullptr) throw std::bad_alloc();
    torch::Tensor host = torch::from_blob(
        memory, values.sizes(), [](void* data) { std::free(data); }, values.options());
    host.copy_(values);
    return host;
  }
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Device device = x.device();
  const c10::Stream side = side_stream(impl, device);
  c10::Event produced(c10::DeviceType::CUDA);
  produced.record(impl.getStream(device));
  produced.block(side);
  torch::Tensor host = torch::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(true));
  {
    c10::StreamGuard guard(side);
    host.copy_(x.detach(), /*non_blocking=*/true);
  }
  impl.recordDataPtrOnStream(x.storage().data_ptr(), side);
  return host;
}

// P: `host` back on `device`. CUDA: allocated and copied on the side stream (ordered after the
// offload copy on the same stream); `ready` is the event the compute stream waits on before
// using it. CPU: a copy through the CPU allocator (counted, as a GPU's copy would be).
torch::Tensor to_device(torch::Tensor host, c10::Device device,
                        std::shared_ptr<c10::Event>& ready) {
  if (!device.is_cuda()) return host.clone();
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream side = side_stream(impl, device);
  torch::Tensor out;
  {
    c10::StreamGuard guard(side);
    out = torch::empty(host.sizes(), host.options().device(device).pinned_memory(false));
    out.copy_(host, /*non_blocking=*/true);
  }
  ready = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
  ready->record(side);
  impl.recordDataPtrOnStream(out.storage().data_ptr(), impl.getStream(device));
  return out;
}

// All the bytes of x's storage, as a tensor of its own (a copy into it is no modification of x
// that autograd would see).
torch::Tensor storage_bytes(const torch::Tensor& x) {
  const auto bytes = static_cast<std::int64_t>(x.storage().nbytes());
  return torch::empty({0}, x.options().dtype(torch::kByte).requires_grad(false))
      .set_(x.storage(), 0, {bytes}, {1});
}

// Frees the memory of x's storage (after to_host, which told the caching allocator of the copy
// still reading it); every tensor sharing the storage keeps its sizes and version.
void free_storage(const torch::Tensor& x) {
  c10::StorageImpl* storage = x.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, x.device()));
  storage->set_nbytes(0);
}

// P into the storage that free_storage emptied (`host`: its bytes, from storage_bytes), through the
// allocator that first filled it, so that the tensors autograd saved see the values again. As
// to_device otherwise.
void refill_storage(const torch::Tensor& x, const torch::Tensor& host,
                    std::shared_ptr<c10::Event>& ready) {
  c10::StorageImpl* storage = x.storage().unsafeGetStorageImpl();
  const std::size_t bytes = host.nbytes();
  if (!x.is_cuda()) {
    storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
    storage->set_nbytes(bytes);
    storage_bytes(x).copy_(host);
    return;
  }
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream side = side_stream(impl, x.device());
  {
    c10::StreamGuard guard(side);
    storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
    storage->set_nbytes(bytes);
    storage_bytes(x).copy_(host, /*non_blocking=*/true);
  }
  ready = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
  ready->record(side);
  impl.recordDataPtrOnStream(storage->data_ptr(), impl.getStream(x.device()));
}

// O of a_j when its P comes before a_j is computed again: copies to host memory, and frees in
// place, the storage of a_j and those of what the recorded graph of layer j saved (abar_j), but
// for storages the run needs before the P: the stage's weights and buffers, and what other
// tensors of the run hold. Returns whether a_j's own storage moved (else the caller copies a_j).
bool park(SequenceRun& run, int j, const torch::Tensor& x, int first_layer, int last_layer) {
  std::set<const c10::StorageImpl*> kept;
  auto keep = [&kept](const torch::Tensor& t) {
    if (t.defined() && t.has_storage()) kept.insert(t.storage().unsafeGetStorageImpl());
  };
  for (const torch::Tensor& t : run.model->parameters(first_layer, last_layer)) keep(t);
  for (const torch::Tensor& t : run.model->buffers(first_layer, last_layer)) keep(t);
  for (std::size_t i = 0; i < run.plain.size(); ++i) {
    const int at = static_cast<int>(i);
    // a_j itself: the plain tensor, the recorded output of layer j, the input leaf of layer j + 1
    if (at != j) {
      keep(run.plain[i]);
      keep(run.recorded[i]);
      for (const torch::Tensor& t : run.saved[i]) keep(t);
    }
    if (at != j + 1) keep(run.leaf[i]);
    keep(run.gradient[i]);
    keep(run.evicted[i]);
  }
  keep(run.output);
  if (run.input_storage) kept.insert(run.input_storage);
  auto move = [&](const torch::Tensor& t) {
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    if (storage->allocator() == nullptr || storage->nbytes() == 0 || !kept.insert(storage).second)
      return false;  // kept, already moved, or not refillable
    run.parked[static_cast<std::size_t>(j)].emplace_back(t, to_host(storage_bytes(t)));
    free_storage(t);
    return true;
  };
  const bool moved = move(x);
  for (const torch::Tensor& t : run.saved[static_cast<std::size_t>(j)]) move(t);
  run.saved[static_cast<std::size_t>(j)].clear();
  return moved;
}
}  // namespace

madpipe::runtime::SequencePresence::SequencePresence(int n)
    : plain(static_cast<std::size_t>(n) + 2, 0),
      host(static_cast<std::size_t>(n) + 2, 0),
      recorded(static_cast<std::size_t>(n) + 2, 0),
      gradient(static_cast<std::size_t>(n) + 2, 0) {}

bool madpipe::runtime::SequencePresence::available(int j) const {
  return !host[j] && (plain[j] || (j >= 1 && recorded[j]));
}

bool madpipe::runtime::SequencePresence::finished() const {
  for (std::size_t j = 0; j < plain.size(); ++j)
    if (plain[j] || host[j] || recorded[j] || (j > 0 && gradient[j])) return false;
  return gradient[0] != 0;
}

madpipe::runtime::StageSequence::StageSequence(const schedule::Stage& stage)
    : stage_(stage.id),
      first_layer_(stage.first_layer),
      n_(stage.last_layer - stage.first_layer + 1),
      chain_(remat::make_remat_chain(std::max(1, stage.last_layer - stage.first_layer + 1))) {
  const std::string field = "/stages/" + std::to_string(stage_) + "/sequence";
  const std::string who = "stage " + std::to_string(stage_) + " (layers " +
                          std::to_string(stage.first_layer) + ".." +
                          std::to_string(stage.last_layer) + ")";
  if (n_ < 1) throw Error(ErrorKind::InvalidInput, "", field, who + " has no layers");
  chain_.first_layer = first_layer_;
  try {
    ops_ = remat::parse_remat_sequence(stage.sequence, chain_);
  } catch (const Error& e) {
    throw Error(ErrorKind::InvalidInput, "", field, who + ": " + e.problem());
  }
  // The forward part ends at the one Loss; the backward part starts after it.
  std::size_t losses = 0, dlosses = 0, dloss_index = 0;
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    if (ops_[i].stage != n_ + 1) continue;
    if (ops_[i].kind == RematOpKind::ForwardAll && losses++ == 0) loss_index_ = i;
    if (ops_[i].kind == RematOpKind::Backward && dlosses++ == 0) dloss_index = i;
  }
  if (losses != 1 || dlosses != 1)
    throw Error(ErrorKind::InvalidInput, "", field,
                who + ": a sequence has exactly one Loss and one dLoss, '" + stage.sequence +
                    "' has " + std::to_string(losses) + " and " + std::to_string(dlosses));
  if (dloss_index < loss_index_)
    fail(dloss_index, "dLoss comes before Loss", ErrorKind::InvalidInput);
  SequencePresence presence(n_);
  std::string problem;
  const std::size_t blocked_at = dry_run(ops_, n_, first_layer_, presence, problem);
  if (blocked_at < ops_.size()) fail(blocked_at, problem, ErrorKind::InvalidInput);
  if (!presence.finished())
    throw Error(ErrorKind::InvalidInput, "", field,
                who +
                    ": the sequence must end with only the gradient of the stage input stored, "
                    "it leaves " +
                    leftovers(presence, n_, first_layer_));
  original_index_.resize(ops_.size());
  for (std::size_t i = 0; i < ops_.size(); ++i) original_index_[i] = i;
  delay_prefetches();
  std::vector<int> forwards(static_cast<std::size_t>(n_) + 2, 0);
  for (const RematOp& op : ops_)
    if (is_forward(op) && op.stage <= n_) ++forwards[op.stage];
  recomputed_.assign(forwards.size(), 0);
  for (std::size_t k = 0; k < forwards.size(); ++k) recomputed_[k] = forwards[k] > 1;
  frees_storage_.assign(ops_.size(), 0);
  collects_.assign(static_cast<std::size_t>(n_) + 2, 0);
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const int k = ops_[i].stage;
    if (ops_[i].kind != RematOpKind::Offload || k < 2) continue;
    for (std::size_t later = i + 1; later < ops_.size(); ++later) {
      const RematOp& op = ops_[later];
      if (op.kind == RematOpKind::Prefetch && op.stage == k) {
        frees_storage_[i] = 1;
        break;
      }
      if (op.stage == k - 1 && is_forward(op))
        break;  // a_{k-1} computed again: graphs may hold the old storage and the new one
    }
    if (frees_storage_[i]) collects_[static_cast<std::size_t>(k - 1)] = 1;
  }
}

// The planner's model starts each prefetch as late as the host link allows it to end when its
// reader starts; run where the sequence lists it (often every P right after the Loss), a P would
// bring its tensor back long before, all of them at once. Each P moves to just before the compute
// op that precedes its reader (B_k or a forward of layer k), so that its copy overlaps that op,
// prefetches keeping their order on the link; the sequence as written when the moved one would
// break a rule.
void madpipe::runtime::StageSequence::delay_prefetches() {
  const std::size_t size = ops_.size();
  std::vector<std::size_t> before(size, size);  // P at i: the compute op it moves before
  for (std::size_t i = 0; i < size; ++i) {
    if (ops_[i].kind != RematOpKind::Prefetch) continue;
    std::size_t previous_compute = size;
    for (std::size_t j = i + 1; j < size; ++j) {
      if (is_transfer(ops_[j])) continue;
      if (ops_[j].stage == ops_[i].stage) break;  // the reader
      previous_compute = j;
    }
    before[i] = previous_compute;
  }
  std::vector<std::size_t> order;
  for (std::size_t j = 0; j < size; ++j) {
    if (!is_transfer(ops_[j]))
      for (std::size_t i = 0; i < j; ++i)
        if (before[i] == j) order.push_back(i);
    if (before[j] == size) order.push_back(j);
  }
  remat::RematSequence delayed;
  for (std::size_t i : order) delayed.push_back(ops_[i]);
  SequencePresence presence(n_);
  std::string problem;
  if (dry_run(delayed, n_, first_layer_, presence, problem) < delayed.size() ||
      !presence.finished())
    return;
  ops_ = std::move(delayed);
  original_index_ = std::move(order);
  for (std::size_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].stage == n_ + 1 && ops_[i].kind == RematOpKind::ForwardAll) loss_index_ = i;
}

void madpipe::runtime::StageSequence::fail(std::size_t index, const std::string& problem,
                                           ErrorKind kind) const {
  const std::string op = remat::to_string({ops_[index]}, chain_);
  if (index < original_index_.size()) index = original_index_[index];
  throw Error(kind, "", "/stages/" + std::to_string(stage_) + "/sequence",
              "stage " + std::to_string(stage_) + ", op " + std::to_string(index + 1) + " '" + op +
                  "': " + problem);
}

std::unique_ptr<SequenceRun> madpipe::runtime::StageSequence::forward(
    ChainModel& model, const torch::Tensor& input, bool needs_input_gradient, const LossFn& loss,
    std::function<void(int)> seed_layer) const {
  const std::size_t size = static_cast<std::size_t>(n_) + 2;
  auto run = std::make_unique<SequenceRun>();
  run->model = &model;
  run->seed_layer = std::move(seed_layer);
  run->needs_input_gradient = needs_input_gradient;
  run->computes_loss = static_cast<bool>(loss);
  run->presence = SequencePresence(n_);
  run->plain.resize(size);
  run->host.resize(size);
  run->home.assign(size, input.device());
  run->ready.resize(size);
  run->evicted.resize(size);
  run->saved.resize(size);
  run->parked.resize(size);
  run->leaf.resize(size);
  run->recorded.resize(size);
  run->gradient.resize(size);
  run->forwards.assign(size, 0);
  run->rng_cpu.resize(size);
  run->rng_device.resize(size);
  run->plain[0] = input.detach();
  run->presence.plain[0] = 1;
  if (input.has_storage()) run->input_storage = input.storage().unsafeGetStorageImpl();
  for (std::size_t i = 0; i <= loss_index_; ++i) run_op(*run, i, loss, GradientFn());
  return run;
}

torch::Tensor madpipe::runtime::StageSequence::backward(SequenceRun& run,
                                                        const GradientFn& gradient) const {
  for (std::size_t i = loss_index_ + 1; i < ops_.size(); ++i) run_op(run, i, LossFn(), gradient);
  if (!run.presence.finished())
    throw Error(ErrorKind::Internal, "", "/stages/" + std::to_string(stage_) + "/sequence",
                "stage " + std::to_string(stage_) + ": the sequence left " +
                    leftovers(run.presence, n_, first_layer_));
  torch::Tensor delta = std::move(run.gradient[0]);
  run.gradient[0] = torch::Tensor();
  return run.needs_input_gradient ? delta : torch::Tensor();
}

void madpipe::runtime::StageSequence::run_op(SequenceRun& run, std::size_t index,
                                             const LossFn& loss, const GradientFn& gradient) const {
  const std::string problem = blocked(run.presence, ops_[index], n_, first_layer_);
  if (!problem.empty()) fail(index, problem, ErrorKind::Runtime);
  try {
    execute_op(run, index, loss, gradient);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(index, what_of(e), ErrorKind::Runtime);
  }
  apply(run.presence, ops_[index], n_);
}

torch::Tensor madpipe::runtime::StageSequence::input_of(SequenceRun& run, std::size_t index,
                                                        int j) const {
  torch::Tensor x = run.plain[j];
  if (!x.defined() && j >= 1) x = run.recorded[j];
  if (!x.defined())
    fail(index, "internal: " + activation_name(j, first_layer_) + " should be stored",
         ErrorKind::Internal);
  if (run.ready[j]) {  // a prefetch: the compute stream waits for its copy
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    run.ready[j]->block(impl.getStream(x.device()));
    run.ready[j].reset();
  }
  return x.detach();
}

torch::Tensor madpipe::runtime::StageSequence::forward_layer(SequenceRun& run, int k,
                                                             const torch::Tensor& x) const {
  torch::nn::AnyModule& module = run.model->layers[static_cast<std::size_t>(first_layer_ + k - 1)];
  const bool again = run.forwards[k]++ > 0;
  if (!again && run.seed_layer) run.seed_layer(first_layer_ + k - 1);
  if (!recomputed_[k]) return module.forward(x);
  const bool cuda = x.is_cuda();
  if (!again) {
    // A generator's state is kept only when the forward drew random numbers from it (dropout):
    // kept for every micro-batch in flight, it is memory the stage's model does not count.
    const torch::Tensor cpu_before = generator_state(cpu_generator());
    torch::Tensor device_before;
    if (cuda) device_before = generator_state(at::globalContext().defaultGenerator(x.device()));
    torch::Tensor out = module.forward(x);
    if (!torch::equal(cpu_before, generator_state(cpu_generator()))) run.rng_cpu[k] = cpu_before;
    if (cuda && !torch::equal(device_before,
                              generator_state(at::globalContext().defaultGenerator(x.device()))))
      run.rng_device[k] = device_before;
    return out;
  }
  // A recomputation: the random numbers of the first forward, the buffers left untouched.
  std::optional<GeneratorFork> cpu, device;
  if (run.rng_cpu[k].defined()) cpu.emplace(cpu_generator(), run.rng_cpu[k]);
  if (cuda && run.rng_device[k].defined())
    device.emplace(at::globalContext().defaultGenerator(x.device()), run.rng_device[k]);
  BufferKeeper buffers(*module.ptr());
  return module.forward(x);
}

void madpipe::runtime::StageSequence::execute_op(SequenceRun& run, std::size_t index,
                                                 const LossFn& loss,
                                                 const GradientFn& gradient) const {
  switch (ops_[index].kind) {
    case RematOpKind::ForwardAll:
      forward_all(run, index, loss);
      break;
    case RematOpKind::ForwardCheckpoint:
    case RematOpKind::ForwardNone:
      forward_without_graph(run, index);
      break;
    case RematOpKind::Backward:
      backward_op(run, index, gradient);
      break;
    case RematOpKind::Offload:
      offload(run, index);
      break;
    case RematOpKind::Prefetch:
      prefetch(run, index);
      break;
  }
}

void madpipe::runtime::StageSequence::release_output(SequenceRun& run) const {
  torch::Tensor& output = run.output;
  if (run.computes_loss || !output.defined() || !output.has_storage()) return;
  const std::size_t n = static_cast<std::size_t>(n_);
  const c10::StorageImpl* storage = output.storage().unsafeGetStorageImpl();
  auto shares = [&](const torch::Tensor& t) {
    return t.defined() && t.has_storage() && t.storage().unsafeGetStorageImpl() == storage;
  };
  // a_n (plain or recorded, of which the output is a detached alias) may go; nothing else of
  // the run may share its storage (a layer that returns its input).
  auto others_share = [&](const std::vector<torch::Tensor>& tensors, bool skip_n) {
    for (std::size_t j = 0; j < tensors.size(); ++j)
      if (!(skip_n && j == n) && shares(tensors[j])) return true;
    return false;
  };
  if (others_share(run.plain, true) || others_share(run.recorded, true) ||
      others_share(run.leaf, false) || others_share(run.gradient, false) ||
      others_share(run.evicted, false))
    return;
  for (const std::vector<torch::Tensor>& saved : run.saved)
    if (others_share(saved, false)) return;
  run.plain[n] = torch::Tensor();
  // A recorded a_n keeps its graph for B_n, which needs no values of it.
  if (run.recorded[n].defined()) release_values(run.recorded[n]);
  output.set_data(torch::empty({0}, output.options().requires_grad(false)));
}

// F_all k: layer k with its graph recorded (and, for an offloading stage, what it saves
// collected); F_all n+1 is the loss, or hands the output on when the stage has none.
void madpipe::runtime::StageSequence::forward_all(SequenceRun& run, std::size_t index,
                                                  const LossFn& loss) const {
  const int k = ops_[index].stage;
  const int n = n_;
  const torch::Tensor x = input_of(run, index, k - 1);
  if (k == n + 1) {            // Loss
    if (!run.computes_loss) {  // the output goes to the next stage
      run.output = x;
      return;
    }
    torch::Tensor leaf = x.detach();
    if (leaf.is_floating_point()) leaf.requires_grad_(true);
    torch::AutoGradMode grad_mode(true);
    run.recorded[k] = loss(leaf);
    run.leaf[k] = leaf;
    run.output = run.recorded[k].detach();
    return;
  }
  torch::Tensor leaf = x.detach();
  if (leaf.is_floating_point() && (k > 1 || run.needs_input_gradient)) leaf.requires_grad_(true);
  torch::AutoGradMode grad_mode(true);
  run.saved[k].clear();
  if (collects_[k]) {
    SavedTensorCollector collect(run.saved[k]);
    run.recorded[k] = forward_layer(run, k, leaf);
  } else {
    run.recorded[k] = forward_layer(run, k, leaf);
  }
  run.leaf[k] = leaf;
  run.plain[k] = torch::Tensor();
  run.host[k] = torch::Tensor();
  run.ready[k].reset();
}

// F_ck and F_no: layer k without a graph; F_no also drops its input.
void madpipe::runtime::StageSequence::forward_without_graph(SequenceRun& run,
                                                            std::size_t index) const {
  const RematOp& op = ops_[index];
  const int k = op.stage;
  const torch::Tensor x = input_of(run, index, k - 1);
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    out = forward_layer(run, k, x);
  }
  run.plain[k] = out;
  run.host[k] = torch::Tensor();
  run.ready[k].reset();
  if (op.kind == RematOpKind::ForwardNone) {
    run.plain[k - 1] = torch::Tensor();
    run.ready[k - 1].reset();
  }
}

// B k: the gradient of layer k's input from its output's; B n+1 starts from the loss, or from
// the gradient of the stage output that the next stage sends.
void madpipe::runtime::StageSequence::backward_op(SequenceRun& run, std::size_t index,
                                                  const GradientFn& gradient) const {
  const int k = ops_[index].stage;
  const int n = n_;
  if (k == n + 1) {  // dLoss
    if (run.computes_loss) {
      if (run.ready[n]) {  // the loss saved a_n, prefetched into its storage
        c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
        run.ready[n]->block(impl.getStream(run.leaf[k].device()));
        run.ready[n].reset();
      }
      run.recorded[k].backward();
      torch::Tensor delta = run.leaf[k].grad();
      run.gradient[n] = delta.defined() ? delta : torch::zeros_like(run.leaf[k]);
    } else {
      if (!gradient)
        fail(index, "internal: no gradient of the stage output to wait for", ErrorKind::Internal);
      run.gradient[n] = gradient();
    }
  } else {
    input_of(run, index, k - 1);  // B_k needs a_{k-1}: waits for its prefetch
    const torch::Tensor& out = run.recorded[k];
    const torch::Tensor& leaf = run.leaf[k];
    if (out.requires_grad()) backward_from(out, run.gradient[k]);  // a_n may be released
    torch::Tensor delta;
    if (leaf.requires_grad()) {
      delta = leaf.grad();
      if (!delta.defined()) delta = torch::zeros_like(leaf);
    }
    run.gradient[k] = torch::Tensor();
    run.gradient[k - 1] = delta;
  }
  run.recorded[k] = torch::Tensor();
  run.leaf[k] = torch::Tensor();
  if (k <= n) {
    run.saved[k].clear();
    run.parked[k].clear();
  }
  run.plain[k - 1] = torch::Tensor();
  run.ready[k - 1].reset();
}

// O k: layer k's input to host memory (its storages freed in place where they can be).
void madpipe::runtime::StageSequence::offload(SequenceRun& run, std::size_t index) const {
  const int k = ops_[index].stage;
  torch::Tensor x = input_of(run, index, k - 1);
  run.home[k - 1] = x.device();
  if (frees_storage_[index] && park(run, k - 1, x, first_layer_, first_layer_ + n_ - 1))
    run.evicted[k - 1] = x;
  else
    run.host[k - 1] = to_host(x);
  run.plain[k - 1] = torch::Tensor();
}

// P k: brings layer k's input back (into the storages it was parked from, or a new tensor).
void madpipe::runtime::StageSequence::prefetch(SequenceRun& run, std::size_t index) const {
  const int k = ops_[index].stage;
  for (auto& [tensor, host] : run.parked[k - 1]) refill_storage(tensor, host, run.ready[k - 1]);
  run.parked[k - 1].clear();
  if (run.evicted[k - 1].defined()) {  // refilled with the parked storages
    run.plain[k - 1] = std::move(run.evicted[k - 1]);
    run.evicted[k - 1] = torch::Tensor();
  } else {
    run.plain[k - 1] = to_device(std::move(run.host[k - 1]), run.home[k - 1], run.ready[k - 1]);
  }
  run.host[k - 1] = torch::Tensor();
}
