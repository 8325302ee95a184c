#include "core/weight_memory.hpp"

int madpipe::compute_dtype_bytes(Precision precision) {
  return precision == Precision::Fp32 ? 4 : 2;
}

const char* madpipe::compute_dtype_name(Precision precision) {
  switch (precision) {
    case Precision::Bf16:
      return "bfloat16";
    case Precision::Fp16:
      return "float16";
    case Precision::Fp32:
      break;
  }
  return "float32";
}

madpipe::WeightMemory madpipe::weight_memory(Precision precision, OptimizerKind optimizer,
                                             bool sgd_momentum) {
  const int width = compute_dtype_bytes(precision);
  const int states = optimizer == OptimizerKind::AdamW ? 2 : (sgd_momentum ? 1 : 0);
  WeightMemory memory;
  memory.bytes_per_parameter = 2 * width;  // the layers' weights and gradients
  memory.breakdown = std::string(name_of(kPrecisionNames, precision)) + " weights " +
                     std::to_string(width) + " + gradients " + std::to_string(width);
  if (precision != Precision::Fp32) {
    memory.bytes_per_parameter += 4 + 4;
    memory.breakdown += " + fp32 master weights 4 + their gradients 4";
  }
  if (states > 0) {
    memory.bytes_per_parameter += 4 * states;
    memory.breakdown +=
        optimizer == OptimizerKind::AdamW ? " + AdamW moments 8" : " + SGD momentum 4";
  }
  memory.copies = memory.bytes_per_parameter / width;
  return memory;
}
