// Run under mpirun -np 1..4 (each rank alone): token files as training data.

#include "core/error.hpp"
#include "runtime/data.hpp"
#include "runtime/mpi/mpi_test_support.hpp"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mr = madpipe::runtime;

using namespace madpipe::testing;

namespace {
std::string temporary_path(const std::string& name) {
  return "token_data_test_rank" + std::to_string(world_rank()) + "_" + name;
}

// Token ids first, first + 1, ... as little-endian integers of `bytes` bytes.
std::string token_file(const std::string& name, int bytes, std::uint32_t count,
                       std::uint32_t first = 0) {
  const std::string path = temporary_path(name);
  std::ofstream out(path, std::ios::binary);
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t id = first + i;
    for (int b = 0; b < bytes; ++b) out.put(static_cast<char>((id >> (8 * b)) & 0xff));
  }
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const madpipe::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(TokenFileData, SamplesAreWindowsOfTheFileShiftedByOne) {
  const std::string path = token_file("ids.bin", 4, 1000);
  const mr::TokenFileData data(path, "", 4, 8, 3, 7);
  const mr::Batch batch = data.micro_batch(2, 1, false);
  ASSERT_EQ(batch.input.sizes(), (std::vector<std::int64_t>{3, 8}));
  ASSERT_EQ(batch.input.scalar_type(), torch::kLong);
  for (int b = 0; b < 3; ++b) {
    const std::int64_t start = batch.input[b][0].item<std::int64_t>();
    EXPECT_LT(start + 8, 900);  // the last tenth is held out for validation
    for (int t = 0; t < 8; ++t) {
      EXPECT_EQ(batch.input[b][t].item<std::int64_t>(), start + t);
      EXPECT_EQ(batch.target[b][t].item<std::int64_t>(), start + t + 1);
    }
  }
  // The same (step, micro-batch) on any rank, another one elsewhere.
  EXPECT_TRUE(torch::equal(batch.input, data.micro_batch(2, 1, false).input));
  EXPECT_FALSE(torch::equal(batch.input, data.micro_batch(2, 2, false).input));
  const mr::Batch validation = data.micro_batch(0, 0, true);
  EXPECT_GE(validation.input.min().item<std::int64_t>(), 900);
  EXPECT_EQ(data.check_ids(0), 1000);
  std::remove(path.c_str());
}

TEST(TokenFileData, ReadsSixteenBitIdsAndAValidationFile) {
  const std::string train = token_file("train.bin", 2, 300, 40000);
  const std::string validation = token_file("val.bin", 2, 20, 60000);
  const mr::TokenFileData data(train, validation, 2, 4, 2, 1);
  EXPECT_GE(data.micro_batch(0, 0, false).input.min().item<std::int64_t>(), 40000);
  EXPECT_GE(data.micro_batch(0, 0, true).input.min().item<std::int64_t>(), 60000);
  EXPECT_EQ(data.check_ids(0), 60020);
  EXPECT_NE(data.description().find("300 training and 20 validation tokens of 16 bits"),
            std::string::npos)
      << data.description();
  std::remove(train.c_str());
  std::remove(validation.c_str());
}

TEST(TokenFileData, BadFilesNameTheFileAndTheProblem) {
  const std::string ids = token_file("ids.bin", 2, 100);
  EXPECT_EQ(error_of([&] { mr::TokenFileData(ids, "", 2, 4, 1, 1).check_ids(50); }),
            ids + ": vocab: token 50 is id 50, outside the embedding of 50 ids");
  const std::string odd = token_file("odd.bin", 1, 101);
  EXPECT_EQ(error_of([&] { mr::TokenFileData(odd, "", 2, 4, 1, 1); }),
            odd +
                ": data-format: the file is 101 bytes, not a whole number of 2-byte tokens "
                "(tokens-u16: 2 bytes, tokens-u32: 4)");
  const std::string short_file = token_file("short.bin", 2, 40);
  EXPECT_EQ(error_of([&] { mr::TokenFileData(short_file, "", 2, 4, 1, 1); }),
            short_file +
                ": data: holds 4 tokens in its last tenth (the validation part without "
                "--validation-data), fewer than one sample of --context + 1 = 5");
  EXPECT_NE(error_of([&] { mr::TokenFileData("no_such.bin", "", 2, 4, 1, 1); }).find("no_such.bin"),
            std::string::npos);
  for (const std::string& path : {ids, odd, short_file}) std::remove(path.c_str());
}
