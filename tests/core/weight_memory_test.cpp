#include "core/weight_memory.hpp"

#include <gtest/gtest.h>

using madpipe::OptimizerKind;
using madpipe::Precision;
using madpipe::weight_memory;

TEST(WeightMemory, Fp32AdamWHoldsWeightsGradientsAndTwoMoments) {
  const madpipe::WeightMemory memory = weight_memory(Precision::Fp32, OptimizerKind::AdamW);
  EXPECT_EQ(memory.bytes_per_parameter, 16);
  EXPECT_EQ(memory.copies, 4);
  EXPECT_EQ(memory.breakdown, "fp32 weights 4 + gradients 4 + AdamW moments 8");
}

TEST(WeightMemory, SgdHoldsItsMomentumOnlyWhenItHasOne) {
  EXPECT_EQ(weight_memory(Precision::Fp32, OptimizerKind::Sgd).copies, 3);
  const madpipe::WeightMemory plain = weight_memory(Precision::Fp32, OptimizerKind::Sgd, false);
  EXPECT_EQ(plain.bytes_per_parameter, 8);
  EXPECT_EQ(plain.copies, 2);
  EXPECT_EQ(plain.breakdown, "fp32 weights 4 + gradients 4");
}

TEST(WeightMemory, HalfPrecisionsAddFp32MastersAndCountInTheirOwnWeights) {
  for (const Precision precision : {Precision::Bf16, Precision::Fp16}) {
    const madpipe::WeightMemory memory = weight_memory(precision, OptimizerKind::AdamW);
    EXPECT_EQ(memory.bytes_per_parameter, 2 + 2 + 4 + 4 + 8);
    EXPECT_EQ(memory.copies, 10);  // of the 2-byte weights the profile measured
    EXPECT_EQ(madpipe::compute_dtype_bytes(precision), 2);
  }
  EXPECT_EQ(weight_memory(Precision::Bf16, OptimizerKind::Sgd).copies, 8);
  EXPECT_EQ(weight_memory(Precision::Bf16, OptimizerKind::AdamW).breakdown,
            "bf16 weights 2 + gradients 2 + fp32 master weights 4 + their gradients 4 + AdamW "
            "moments 8");
}

TEST(WeightMemory, DtypeNamesAreTheProfilesNames) {
  EXPECT_STREQ(madpipe::compute_dtype_name(Precision::Fp32), "float32");
  EXPECT_STREQ(madpipe::compute_dtype_name(Precision::Bf16), "bfloat16");
  EXPECT_STREQ(madpipe::compute_dtype_name(Precision::Fp16), "float16");
}
