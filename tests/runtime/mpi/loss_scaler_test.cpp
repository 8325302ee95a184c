#include "runtime/train/loss_scaler.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

using madpipe::runtime::LossScaler;

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterTheGrowthInterval) {
  LossScaler scaler(1024, 3);
  const std::shared_ptr<const double> seen = scaler.shared_scale();
  EXPECT_TRUE(scaler.update(true));  // skipped
  EXPECT_EQ(*seen, 512);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_FALSE(scaler.update(false));  // the third good step in a row
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_TRUE(scaler.update(true));  // the count of good steps starts again
  EXPECT_FALSE(scaler.update(false));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(LossScaler, StateRestoresExactly) {
  LossScaler scaler(65536, 4);
  scaler.update(true);
  scaler.update(false);
  LossScaler resumed(65536, 4);
  resumed.restore(scaler.state(), "run.json");
  EXPECT_EQ(resumed.scale(), 32768);
  EXPECT_EQ(resumed.skipped_steps(), 1);
  for (int i = 0; i < 3; ++i) {
    scaler.update(false);
    resumed.update(false);
  }
  EXPECT_EQ(resumed.scale(), 65536);  // the good step before the checkpoint counted
  EXPECT_EQ(resumed.scale(), scaler.scale());
  LossScaler fresh(8, 4);
  fresh.restore(nlohmann::json(), "run.json");  // a checkpoint without the state
  EXPECT_EQ(fresh.scale(), 8);
}

TEST(LossScaler, RefusesABrokenState) {
  LossScaler scaler(8, 4);
  try {
    scaler.restore({{"loss_scale", -1}, {"good_steps", 0}, {"skipped_steps", 0}}, "ck/run.json");
    FAIL() << "a negative scale must be refused";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ck/run.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/state/loss_scale"), std::string::npos) << e.what();
  }
  EXPECT_THROW(scaler.restore({{"loss_scale", 8}}, "ck/run.json"), madpipe::Error);
}

TEST(LossScaler, GradientsNotFiniteAtEveryScaleAreNoOverflow) {
  LossScaler scaler(1.0 / (1 << 23), 4);
  EXPECT_TRUE(scaler.update(true));  // 2^-24: fp16's smallest subnormal, still a scale
  try {
    scaler.update(true);
    FAIL() << "a scale below 2^-24 cannot undo an overflow";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not an fp16 overflow but a NaN or an infinity"),
              std::string::npos)
        << e.what();
  }
}
