#include "core/analytic_profile.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// The implementation models and their formulas are documented in docs/cli.md ("Analytic
// profiles"); the names below follow it: b samples of s tokens, T = b s tokens, width h, MLP
// width i, H query heads and K key/value heads of d dimensions, vocabulary V, P learned
// positions, e bytes per element of the compute dtype. A = T h e is one activation.

namespace {
using madpipe::DecoderArchitecture;
using madpipe::DecoderConfig;
using madpipe::Layer;

constexpr std::int64_t kLimit = std::int64_t{1} << 62;  // the profile format's largest size

// A count of bytes or elements whose sums and products are refused once they reach 2^62, so
// that the formulas below cannot overflow.
class Count {
 public:
  Count(std::int64_t value) : value_(value) {}  // implicit, so that formulas read as arithmetic
  std::int64_t value() const { return value_; }
  double real() const { return static_cast<double>(value_); }

  friend Count operator+(Count a, Count b) { return checked(a.value_ + b.value_); }
  friend Count operator-(Count a, Count b) { return Count(a.value_ - b.value_); }
  friend Count operator*(Count a, Count b) {
    if (a.value_ != 0 && b.value_ > (kLimit - 1) / a.value_) too_large();
    return Count(a.value_ * b.value_);
  }
  friend bool operator<(Count a, Count b) { return a.value_ < b.value_; }

 private:
  static Count checked(std::int64_t value) {
    if (value >= kLimit) too_large();
    return Count(value);
  }
  [[noreturn]] static void too_large() {
    madpipe::throw_invalid("", "", "the model is too large: a byte count reaches 2^62");
  }

  std::int64_t value_;
};

Count at_least_zero(Count count) { return std::max(Count(0), count); }

// The sizes of the formulas (names as in the comment at the top).
struct Shapes {
  Count b, s, T, h, i, H, K, d, V, P, e;
};

// What a layer computes and moves: its times follow from them and the device's rates.
struct Work {
  double forward_flops = 0;  // matrix products, attention's included
  double backward_flops = 0;
  double forward_bytes = 0;  // memory traffic of everything else (norms, elementwise, copies)
  double backward_bytes = 0;
};

struct ModelledLayer {
  Layer layer;
  Work work;
};

// The backward of an elementwise or norm op reads its output's gradient and what it saved and
// writes its input's gradient: twice the forward's traffic.
constexpr double kBackwardTraffic = 2.0;

ModelledLayer llama_embed(const Shapes& x) {
  ModelledLayer out;
  Layer& layer = out.layer;
  layer.name = "embed";
  layer.weight_bytes = (x.V * x.h * x.e).value();
  layer.output_bytes = (x.T * x.h * x.e).value();
  // The ids are the layer's input: its backward keeps nothing else. The table's gradient is made
  // apart, then added into the accumulated one.
  layer.backward_workspace_bytes = layer.weight_bytes;
  const Count gather = x.T * 8 + x.T * x.h * x.e * 2;  // ids read, rows read and written
  out.work.forward_bytes = gather.real();
  out.work.backward_bytes = kBackwardTraffic * gather.real() + (x.V * x.h * x.e).real();
  return out;
}

// As the built-in gpt: token rows plus rows of a learned position table.
ModelledLayer gpt2_embed(const Shapes& x) {
  ModelledLayer out;
  Layer& layer = out.layer;
  const Count A = x.T * x.h * x.e;
  const Count position_rows = x.s * x.h * x.e;
  layer.name = "embed";
  layer.weight_bytes = ((x.V + x.P) * x.h * x.e).value();
  layer.output_bytes = A.value();
  layer.saved_bytes = (x.s * 8).value();  // the position ids, made in the forward (int64)
  layer.forward_workspace_bytes = (A + position_rows).value();  // both lookups before their sum
  // The positions' gradient (summed over the samples), with the larger table's gradient.
  layer.backward_workspace_bytes = (position_rows + std::max(x.V, x.P) * x.h * x.e).value();
  // Ids read; token rows read and written; position rows read and written; their sum.
  const Count traffic = x.T * 8 + x.s * 8 + A * 2 + position_rows * 2 + (A * 2 + position_rows);
  out.work.forward_bytes = traffic.real();
  out.work.backward_bytes = kBackwardTraffic * traffic.real() + ((x.V + x.P) * x.h * x.e).real();
  return out;
}

// Fused kernels: RMSNorm (saves its fp32 rstd), rotary embedding recomputed in the backward,
// a flash attention that takes K key/value heads as they are (saves q, k, v, its output and the
// fp32 logsumexp), SwiGLU as one op (saves gate and up, recomputes silu(gate)).
ModelledLayer llama_block(const DecoderConfig& c, const Shapes& x, int index) {
  ModelledLayer out;
  Layer& layer = out.layer;
  const Count A = x.T * x.h * x.e;
  const Count q_width = x.H * x.d, kv_width = x.K * x.d;
  const Count matrices = x.h * q_width + x.h * kv_width * 2 + q_width * x.h + x.h * x.i * 3;
  Count biases = 0;
  if (c.qkv_bias) biases = biases + q_width + kv_width * 2;
  if (c.output_bias) biases = biases + x.h;
  if (c.mlp_bias) biases = biases + x.i * 2 + x.h;
  layer.name = "block" + std::to_string(index);
  layer.weight_bytes = ((matrices + x.h * 2 + biases) * x.e).value();  // two norm weights
  layer.output_bytes = A.value();
  layer.saved_bytes = (x.T * 4 * 2                 // the norms' rstd
                       + A * 3                     // both norms' outputs, the residual
                       + x.T * q_width * x.e * 2   // q and the attention's output
                       + x.T * kv_width * x.e * 2  // k and v
                       + x.b * x.H * x.s * 4       // logsumexp
                       + x.T * x.i * x.e * 3)      // gate, up and their product
                          .value();
  // Estimates (conservative: what the backward frees as it goes is not subtracted): one
  // intermediate-sized temporary in the forward; in the backward the gradients of gate, up and
  // their product, and the gradient of one MLP matrix, made apart before it is added in.
  layer.forward_workspace_bytes = (x.T * x.i * x.e).value();
  layer.backward_workspace_bytes = (x.T * x.i * x.e * 3 + x.h * x.i * x.e).value();

  const double matmul_flops = 2.0 * x.T.real() * matrices.real();
  // Causal: QK^T and PV, 2 b H s^2 d each in full, half of it under the mask.
  const double attention_flops = 2.0 * x.b.real() * x.s.real() * x.s.real() * q_width.real();
  out.work.forward_flops = matmul_flops + attention_flops;
  // Input and weight gradients of every product; flash attention's backward recomputes QK^T:
  // five products of the forward's two.
  out.work.backward_flops = 2.0 * matmul_flops + 2.5 * attention_flops;
  const Count traffic = A * 2 * 2                               // two RMSNorms
                        + x.T * (q_width + kv_width) * x.e * 2  // rotary on q and k
                        + x.T * (q_width + kv_width) * x.e * 2  // attention reads q, k, v, writes
                        + A * 3 * 2                             // two residual adds
                        + x.T * x.i * x.e * 3;                  // SwiGLU
  out.work.forward_bytes = traffic.real();
  out.work.backward_bytes = kBackwardTraffic * traffic.real();
  return out;
}

// The built-in gpt's block (runtime/model/model.cpp) as autograd runs it: LayerNorms (fp32
// mean and rstd), one qkv product, attention through matmul with its scores materialized,
// masked and softmaxed (the probabilities saved), GELU. The byte counts are what its graph
// holds, workspaces included (docs/cli.md derives them).
ModelledLayer gpt2_block(const Shapes& x, int index) {
  ModelledLayer out;
  Layer& layer = out.layer;
  const Count A = x.T * x.h * x.e;
  const Count scores = x.b * x.H * x.s * x.s * x.e;  // one [b, H, s, s] tensor
  const Count mlp = x.T * x.i * x.e;                 // one [T, i] tensor
  const Count layer_norm_stats = x.T * 4 * 2;        // mean and rstd
  const Count matrices = x.h * x.h * 4 + x.h * x.i * 2;
  const Count biases = x.h * 3 + x.h + x.i + x.h;
  layer.name = "block" + std::to_string(index);
  layer.weight_bytes = ((matrices + biases + x.h * 4) * x.e).value();  // with 2 LayerNorms
  layer.output_bytes = A.value();
  layer.saved_bytes = (layer_norm_stats * 2
                       // ln1's output; copies of q, k and v (matmul makes them contiguous); the
                       // heads' outputs, made contiguous; the residual; ln2's output
                       + A * 7 + mlp * 2  // fc1's output, GELU's output
                       + scores           // the probabilities
                       + x.s * x.s)       // the causal mask (bool)
                          .value();
  // At the block's end the qkv product (3 A, viewed by q, k, v) and the masked scores are still
  // held, with fc2's output before its residual add.
  layer.forward_workspace_bytes = (A * 4 + scores).value();
  // The highest point of the backward above its start, less the input's gradient: fc2's input
  // gradient with its weight gradient, or at the softmax the gradients of the probabilities and
  // of the scores once the MLP's and ln2's saved tensors are gone.
  const Count at_fc2 = mlp + x.i * x.h * x.e;
  const Count at_softmax = scores * 2 - mlp * 2 - A * 2 - layer_norm_stats;
  layer.backward_workspace_bytes = at_least_zero(std::max(at_fc2, at_softmax) - A).value();

  const double matmul_flops = 2.0 * x.T.real() * matrices.real();
  // QK^T and PV in full (2 b H s^2 d each): the mask is applied after the product.
  const double attention_flops = 4.0 * x.b.real() * x.s.real() * x.s.real() * x.h.real();
  out.work.forward_flops = matmul_flops + attention_flops;
  out.work.backward_flops = 2.0 * (matmul_flops + attention_flops);
  const Count traffic = A * 2 * 2         // two LayerNorms
                        + A * 3 * 2       // q, k, v copied
                        + scores * 2 * 3  // scale, mask, softmax
                        + x.s * x.s       // the mask read
                        + A * 2           // the heads' outputs copied
                        + A * 3 * 2       // two residual adds
                        + mlp * 2;        // GELU
  out.work.forward_bytes = traffic.real();
  out.work.backward_bytes = kBackwardTraffic * traffic.real();
  return out;
}

// Final norm, output projection and the cross-entropy loss in fp32 (log-softmax, then the
// negative log-likelihood), as the runtime computes it; the loss is the layer's output.
ModelledLayer head(const DecoderConfig& c, const Shapes& x) {
  ModelledLayer out;
  Layer& layer = out.layer;
  const bool gpt2 = c.architecture == DecoderArchitecture::Gpt2;
  const Count A = x.T * x.h * x.e;
  const Count logits = x.T * x.V * x.e;
  const Count fp32_logits = x.T * x.V * 4;
  const bool cast = x.e.value() != 4;               // bf16 or fp16 logits are copied to fp32 first
  const Count norm_weights = gpt2 ? x.h * 2 : x.h;  // LayerNorm's weight and bias, RMSNorm's weight
  const Count norm_stats = gpt2 ? x.T * 4 * 2 : x.T * 4;
  // A tied head's matrix is the embedding's: counted in both layers, and named once in the
  // profile's tied_weights.
  const Count projection = x.V * x.h * x.e + (gpt2 ? x.V * x.e : Count(0));  // gpt: with a bias
  layer.name = "head";
  layer.weight_bytes = (norm_weights * x.e + projection).value();
  layer.output_bytes = 4;  // the loss, a float
  // The norm's statistics and output, the fp32 log-probabilities and the loss's total weight.
  layer.saved_bytes = (norm_stats + A + fp32_logits + 4).value();
  layer.forward_workspace_bytes = (logits + (cast ? fp32_logits : Count(0))).value();
  // The fp32 gradients of the log-probabilities and of the logits, or the norm's output
  // gradient with the projection's weight gradient; less the input's gradient.
  layer.backward_workspace_bytes =
      at_least_zero(std::max(fp32_logits * 2, A + x.V * x.h * x.e) - 4 - A).value();

  out.work.forward_flops = 2.0 * x.T.real() * x.h.real() * x.V.real();
  out.work.backward_flops = 2.0 * out.work.forward_flops;
  const Count traffic =
      A * 2 + (cast ? logits + fp32_logits : Count(0)) + fp32_logits * 2;  // norm, cast, softmax
  out.work.forward_bytes = traffic.real();
  out.work.backward_bytes = kBackwardTraffic * traffic.real();
  return out;
}

void check_options(const DecoderConfig& c, const madpipe::AnalyticOptions& o) {
  using madpipe::throw_invalid;
  if (o.seq < 1) throw_invalid("", "seq", "must be >= 1, got " + std::to_string(o.seq));
  if (c.positions > 0 && o.seq > c.positions)
    throw_invalid("", "seq",
                  "must be at most the config's n_positions (" + std::to_string(c.positions) +
                      "), the rows of its position table, got " + std::to_string(o.seq));
  if (o.micro_batch_size < 1)
    throw_invalid("", "micro_batch_size",
                  "must be >= 1, got " + std::to_string(o.micro_batch_size));
  if (!(o.efficiency > 0 && o.efficiency <= 1))
    throw_invalid("", "efficiency",
                  "must be in (0, 1], got " + madpipe::format_number(o.efficiency));
  if (!(o.device.peak_flops(o.precision) > 0) || !(o.device.memory_bandwidth > 0))
    throw_invalid("", "device", "needs peak FLOP/s and a memory bandwidth > 0");
}

std::string describe_device(const madpipe::AnalyticOptions& o) {
  const std::string rates = madpipe::format_rate(o.device.peak_flops(o.precision), "FLOP/s") +
                            ", " + madpipe::format_rate(o.device.memory_bandwidth, "B/s");
  const std::string what =
      o.device.name == "custom" ? "custom device: " + rates : o.device.description;
  return what + " (analytic model, not measured)";
}

std::string describe_source(const DecoderConfig& c, const madpipe::AnalyticOptions& o) {
  const bool gpt2 = c.architecture == DecoderArchitecture::Gpt2;
  const char* precision = madpipe::name_of(madpipe::kPrecisionNames, o.precision);
  return std::string("madpipe profile --analytic: ") +
         (gpt2 ? "the built-in gpt's GPT-2 block" : "a Llama-family block of fused kernels") +
         " (docs/cli.md, analytic profiles); times at efficiency " +
         madpipe::format_number(o.efficiency) + " of " +
         madpipe::format_rate(o.device.peak_flops(o.precision), "FLOP/s") + " (dense " + precision +
         ") and " + madpipe::format_rate(o.device.memory_bandwidth, "B/s");
}
}  // namespace

madpipe::Profile madpipe::analytic_profile(const DecoderConfig& config,
                                           const AnalyticOptions& options) {
  check_options(config, options);
  const Count b = options.micro_batch_size, s = options.seq;
  const Shapes shapes{b,
                      s,
                      b * s,
                      config.hidden_size,
                      config.intermediate_size,
                      config.heads,
                      config.kv_heads,
                      config.head_dim,
                      config.vocab_size,
                      config.positions,
                      compute_dtype_bytes(options.precision)};
  const bool gpt2 = config.architecture == DecoderArchitecture::Gpt2;
  std::vector<ModelledLayer> layers;
  layers.push_back(gpt2 ? gpt2_embed(shapes) : llama_embed(shapes));
  for (int l = 0; l < config.layers; ++l)
    layers.push_back(gpt2 ? gpt2_block(shapes, l) : llama_block(config, shapes, l));
  layers.push_back(head(config, shapes));

  const double flops_per_ms =
      options.device.peak_flops(options.precision) * options.efficiency / 1e3;
  const double bytes_per_ms = options.device.memory_bandwidth * options.efficiency / 1e3;
  Profile profile;
  profile.name = options.name;
  profile.device = describe_device(options);
  profile.dtype = compute_dtype_name(options.precision);
  profile.source = describe_source(config, options);
  profile.batch = options.micro_batch_size;
  profile.seq = options.seq;
  profile.input_bytes = (shapes.T * 8).value();  // int64 token ids
  for (ModelledLayer& modelled : layers) {
    const Work& work = modelled.work;
    modelled.layer.forward_ms =
        work.forward_flops / flops_per_ms + work.forward_bytes / bytes_per_ms;
    modelled.layer.backward_ms =
        work.backward_flops / flops_per_ms + work.backward_bytes / bytes_per_ms;
    profile.layers.push_back(std::move(modelled.layer));
  }
  if (config.tied_embeddings) {
    const int head_layer = static_cast<int>(profile.layers.size()) - 1;
    profile.tied_weights.push_back(
        TiedWeight{{0, head_layer}, (shapes.V * shapes.h * shapes.e).value()});
  }
  return profile;
}
