// Run under mpirun -np 1..4 (each rank alone): token files and tensor files as training data.

#include "core/error.hpp"
#include "runtime/config/train_config.hpp"
#include "runtime/data/data.hpp"
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
std::string temporary_path(const std::string& name) { return scratch_file(name); }

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

namespace {
// What torch.save({"inputs": inputs, "targets": targets}) writes.
std::string tensor_file(const std::string& name, const torch::Tensor& inputs,
                        const torch::Tensor& targets, std::size_t keep_bytes = 0) {
  c10::Dict<std::string, torch::Tensor> dict;
  dict.insert("inputs", inputs);
  dict.insert("targets", targets);
  const std::vector<char> bytes = torch::pickle_save(torch::IValue(dict));
  const std::string path = temporary_path(name);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(),
             static_cast<std::streamsize>(keep_bytes > 0 ? keep_bytes : bytes.size()));
  return path;
}
}  // namespace

TEST(TensorFileData, VisitsEveryTrainingRowOnceAnEpoch) {
  const torch::Tensor x = torch::arange(20, torch::kFloat).reshape({20, 1});
  const std::string path = tensor_file("rows.pt", x, 2 * x);
  // 18 training rows (the last 2 held out), 3 per micro-batch, 2 micro-batches a step: 3 steps
  // are one epoch.
  const mr::TensorFileData data(path, "", 3, 2, 5);
  std::vector<int> seen(20, 0);
  for (int step = 1; step <= 3; ++step)
    for (int i = 0; i < 2; ++i) {
      const mr::Batch batch = data.micro_batch(step, i, false);
      EXPECT_TRUE(torch::equal(batch.target, 2 * batch.input));
      for (int b = 0; b < 3; ++b)
        ++seen.at(static_cast<std::size_t>(batch.input[b][0].item<float>()));
    }
  EXPECT_EQ(seen, (std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  // Another epoch, another order; validation takes the held-out rows in order.
  EXPECT_FALSE(
      torch::equal(data.micro_batch(1, 0, false).input, data.micro_batch(4, 0, false).input));
  EXPECT_TRUE(torch::equal(data.micro_batch(0, 0, true).input.reshape({-1}),
                           torch::tensor({18.0f, 19.0f, 18.0f})));
  std::remove(path.c_str());
}

TEST(TensorFileData, BadFilesNameTheFileAndTheProblem) {
  const torch::Tensor x = torch::zeros({10, 4});
  const std::string truncated = tensor_file("truncated.pt", x, x, 100);
  EXPECT_NE(error_of([&] {
              mr::TensorFileData(truncated, "", 2, 1, 1);
            }).find(truncated + ": data: not a file that torch.save wrote, or a truncated one"),
            std::string::npos);
  const std::string uneven = tensor_file("uneven.pt", x, torch::zeros({9, 4}));
  EXPECT_EQ(error_of([&] { mr::TensorFileData(uneven, "", 2, 1, 1); }),
            uneven + ": targets: its rows must be those of \"inputs\": 10 inputs, 9 targets");
  // A model that takes other rows: every rank fails before training, naming the file.
  const std::string doubles = tensor_file("doubles.pt", x.to(torch::kDouble), x);
  mr::TrainConfig config;
  config.model = mr::ModelKind::Mlp;
  config.inputs = 4;
  config.outputs = 4;
  config.data = doubles;
  config.data_format = mr::DataFormat::Tensors;
  EXPECT_EQ(error_of([&] { mr::make_workload(config, config, config.replicas); }),
            doubles + ": inputs: rows are [4] Double, but --model mlp (--inputs) takes [4] Float");
  for (const std::string& path : {truncated, uneven, doubles}) std::remove(path.c_str());
}
