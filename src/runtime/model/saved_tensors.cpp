#include "runtime/model/saved_tensors.hpp"

#include <memory>
#include <mutex>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

namespace {
thread_local std::vector<torch::Tensor>* collecting = nullptr;

// Keeps the saved tensor as an alias without autograd history (no cycle through an output's own
// node); unpacking returns it, and autograd does not check versions of hooked tensors.
class CollectingHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit CollectingHooks(std::vector<torch::Tensor>* into) : into_(into) {}
  void call_pack_hook(const at::Tensor& tensor) override {
    saved_ = tensor.detach();
    if (!(tensor.is_leaf() && tensor.requires_grad()) && tensor.has_storage())
      into_->push_back(saved_);
  }
  at::Tensor call_unpack_hook() override { return saved_; }

 private:
  std::vector<torch::Tensor>* into_;
  at::Tensor saved_;
};

class CollectingEngine final : public torch::autograd::Engine {
 public:
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (collecting == nullptr) return nullptr;
    return std::make_unique<CollectingHooks>(collecting);
  }
};

torch::autograd::Engine& collecting_engine() {
  // Never destroyed: its worker threads may outlive static destruction.
  static auto* engine = new CollectingEngine();
  return *engine;
}

bool install() {
  static std::once_flag once;
  static bool installed = false;
  std::call_once(once, [] {
    using torch::autograd::Engine;
    if (&Engine::get_default_engine() != &Engine::get_base_engine()) return;
    torch::autograd::set_default_engine_stub(collecting_engine);
    installed = true;
  });
  return installed;
}
}  // namespace

madpipe::runtime::SavedTensorCollector::SavedTensorCollector(std::vector<torch::Tensor>& into)
    : previous_(collecting) {
  if (install()) collecting = &into;
}

madpipe::runtime::SavedTensorCollector::~SavedTensorCollector() { collecting = previous_; }

bool madpipe::runtime::SavedTensorCollector::supported() { return install(); }

void madpipe::runtime::release_values(torch::Tensor& output) {
  if (output.grad_fn() == nullptr) return;
  output.set_data(torch::empty({0}, output.options().requires_grad(false)));
}

void madpipe::runtime::backward_from(const torch::Tensor& output, const torch::Tensor& grad) {
  if (output.grad_fn() == nullptr) {
    output.backward(grad);  // fails as a plain backward would
    return;
  }
  torch::autograd::Engine::get_default_engine().execute(
      {torch::autograd::impl::gradient_edge(output)}, {grad}, /*keep_graph=*/false,
      /*create_graph=*/false, /*accumulate_grad=*/true);
}
