#pragma once

#include "runtime/config/model_settings.hpp"
#include "runtime/config/training_settings.hpp"
#include "runtime/data/mapped_file.hpp"
#include "runtime/model/batch.hpp"
#include "runtime/model/model.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// Deterministic micro-batches: the same (step, index) gives the same batch on every rank, so
// only the ranks that need a batch (first and last stage) compute it.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Batch micro_batch(std::int64_t step, int index, bool validation) const = 0;
  virtual std::string description() const = 0;
  // Bytes this source holds in host memory on each rank (its rows or tokens; 0 for generated or
  // mapped data): outside the plan's memory, which counts each micro-batch's data only.
  virtual std::int64_t host_bytes() const { return 0; }
};

// Character-level text from every regular file under `path` (a file or a directory, read in
// name order): 90% train, 10% validation. Samples are `context` characters; the target is the
// input shifted by one.
class TextData final : public DataSource {
 public:
  TextData(const std::string& path, int context, int micro_batch_size, std::uint64_t seed);
  Batch micro_batch(std::int64_t step, int index, bool validation) const override;
  std::string description() const override;
  std::int64_t host_bytes() const override;
  int vocab() const noexcept { return static_cast<int>(alphabet_.size()); }
  const std::string& alphabet() const noexcept { return alphabet_; }

 private:
  std::vector<std::int64_t> train_, validation_;
  std::string alphabet_;
  std::string path_;
  int files_ = 0;
  int context_;
  int micro_batch_size_;
  std::uint64_t seed_;
};

// Token ids in flat binary files, as nanoGPT's train.bin and val.bin: little-endian unsigned
// integers of `token_bytes` (2 or 4) bytes each, mapped rather than read, so files may exceed
// memory. A sample is a window of `context` + 1 tokens at an offset drawn from (seed, step,
// micro-batch): the input is its first `context` tokens, the target its last. Without a
// validation file, the last tenth of the training file is held out. A file may start with llm.c's
// header (256 int32: magic 20240520, version 1 for 16-bit or 2 for 32-bit tokens, token count),
// which is checked against the format and the file's size. Throws Error{InvalidInput} naming the
// file when its size is not a whole number of tokens, its header does not fit, or it holds less
// than one window.
class TokenFileData final : public DataSource {
 public:
  TokenFileData(const std::string& train_path, const std::string& validation_path, int token_bytes,
                int context, int micro_batch_size, std::uint64_t seed);
  Batch micro_batch(std::int64_t step, int index, bool validation) const override;
  std::string description() const override;
  // Checks every token id of both files against an embedding of `vocab` ids (0: none) and
  // returns the largest id + 1; throws Error{InvalidInput} naming the file, the position and the
  // id of the first one outside it (without a vocabulary, of an id of 2^20 or more), or naming the
  // likely right format where the ids look like the other width's. Reads the whole files.
  std::int64_t check_ids(std::int64_t vocab) const;

 private:
  struct Tokens {
    std::shared_ptr<const MappedFile> file;
    std::size_t first = 0, count = 0;  // the tokens of this split
  };
  std::uint64_t token(const Tokens& tokens, std::size_t i) const;
  // Throws Error{InvalidInput} suggesting tokens-u32 when every odd 16-bit word is zero.
  void check_word_pattern(const Tokens& tokens) const;

  Tokens train_, validation_;
  int token_bytes_, context_, micro_batch_size_;
  std::uint64_t seed_;
};

// Samples from files written by torch.save({"inputs": X, "targets": Y}) in Python: row r of X
// and of Y is sample r. Training visits the rows in a permutation drawn from the seed, a new one
// each epoch (sample k of the run is micro-batch k / B of step k / (B M) + 1, M the micro-batches
// of a step in all); validation takes the rows in order. Without a validation file the last tenth
// of the rows is held out. Throws Error{InvalidInput} naming the file when it is not what
// torch.save writes (or is truncated), lacks "inputs" or "targets", or their rows differ.
class TensorFileData final : public DataSource {
 public:
  TensorFileData(const std::string& train_path, const std::string& validation_path,
                 int micro_batch_size, int micro_batches_per_step, std::uint64_t seed);
  Batch micro_batch(std::int64_t step, int index, bool validation) const override;
  std::string description() const override;
  std::int64_t host_bytes() const override;
  // Every row (inputs and targets), to check against a model.
  const Batch& training_rows() const noexcept { return train_; }
  const Batch& validation_rows() const noexcept { return validation_; }
  const std::string& path() const noexcept { return path_; }

 private:
  Batch train_, validation_;
  std::string path_, validation_path_;
  int micro_batch_size_, micro_batches_per_step_;
  std::uint64_t seed_;
};

// Regression on random inputs: target = tanh(x W) for a fixed random W.
class SyntheticData final : public DataSource {
 public:
  SyntheticData(int inputs, int outputs, int micro_batch_size, std::uint64_t seed);
  Batch micro_batch(std::int64_t step, int index, bool validation) const override;
  std::string description() const override;

 private:
  torch::Tensor weights_;
  int inputs_, outputs_, micro_batch_size_;
  std::uint64_t seed_;
};

// Image classification on random images: [B, 3, S, S] inputs, the class is the argmax of a fixed
// random projection of the image, so a CNN can learn it.
class SyntheticImages final : public DataSource {
 public:
  SyntheticImages(int image, int classes, int micro_batch_size, std::uint64_t seed);
  Batch micro_batch(std::int64_t step, int index, bool validation) const override;
  std::string description() const override;

 private:
  torch::Tensor projection_;
  int image_, classes_, micro_batch_size_;
  std::uint64_t seed_;
};

// A model's sizes and its data, from the [model] and [training] settings (the gpt vocabulary comes
// from the corpus); a step's micro-batches come from every one of `replicas` pipelines. The same
// on every rank.
struct Workload {
  ModelConfig model;
  std::unique_ptr<DataSource> data;
  ChainModel script;  // a script model, loaded (once) to check the data against
};
Workload make_workload(const ModelSettings& model, const TrainingSettings& training, int replicas);
// The workload's model, holding no layer (a script model: the one make_workload loaded).
ChainModel take_model(Workload& workload);

// The micro-batch's tensors on `device` (from pinned memory on a GPU: no host wait).
Batch on_device(Batch batch, const torch::Device& device);

}  // namespace madpipe::runtime
