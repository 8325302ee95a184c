#pragma once

#include "core/names.hpp"

#include <string>

namespace madpipe {

// The dtype layers compute in (--precision): fp32, or bf16 / fp16 weights and activations with
// fp32 master weights, gradients accumulated and reduced in fp32, and fp32 optimizer state
// (fp16 also scales the loss, dynamically, so that small gradients do not vanish).
enum class Precision { Fp32, Bf16, Fp16 };
inline constexpr Named<Precision> kPrecisionNames[] = {
    {Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}, {Precision::Fp16, "fp16"}};

// The optimizer of every stage (--optimizer).
enum class OptimizerKind { AdamW, Sgd };
inline constexpr Named<OptimizerKind> kOptimizerNames[] = {{OptimizerKind::AdamW, "adamw"},
                                                           {OptimizerKind::Sgd, "sgd"}};

// Bytes of one value of the dtype layers compute in: fp32 4, bf16 and fp16 2.
int compute_dtype_bytes(Precision precision);
// The profile's name of that dtype ("float32", "bfloat16", "float16"), as madpipe profile
// records it.
const char* compute_dtype_name(Precision precision);

// What training holds for each parameter besides activations: its weight and gradient in the
// compute dtype and, in bf16 and fp16, fp32 master weights and their gradients; the optimizer's
// fp32 state (AdamW: two moments; SGD: its momentum, if any).
struct WeightMemory {
  int bytes_per_parameter = 0;
  // The same in weight-sized copies of the layers' weights in the compute dtype (the profile's
  // weight bytes when it was measured in that precision): the planner's C.
  int copies = 0;
  std::string breakdown;  // "fp32 weights 4 + gradients 4 + AdamW moments 8"
};

// The one place where precision and optimizer become bytes per parameter.
WeightMemory weight_memory(Precision precision, OptimizerKind optimizer, bool sgd_momentum = true);

}  // namespace madpipe
