#include "runtime/data.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>

namespace fs = std::filesystem;

static std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return x;
}

static std::uint64_t batch_seed(std::uint64_t seed, std::int64_t step, int index, bool validation) {
  return mix(mix(mix(seed, static_cast<std::uint64_t>(step)), static_cast<std::uint64_t>(index)),
             validation ? 1 : 0);
}

madpipe::runtime::TextData::TextData(const std::string& path, int context, int micro_batch_size,
                                     std::uint64_t seed)
    : path_(path), context_(context), micro_batch_size_(micro_batch_size), seed_(seed) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::recursive_directory_iterator(path, ec))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  }
  if (files.empty())
    throw Error(ErrorKind::Io, path, "data", "no readable text files (a file or a directory)");
  std::string text;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream content;
    content << in.rdbuf();
    text += content.str();
    ++files_;
  }
  // Printable ASCII and newlines; anything else becomes a space.
  for (char& c : text)
    if (c != '\n' && (c < 32 || c > 126)) c = ' ';
  std::array<bool, 128> used{};
  for (char c : text) used[static_cast<unsigned char>(c)] = true;
  std::array<int, 128> id{};
  for (int c = 0; c < 128; ++c)
    if (used[c]) {
      id[c] = static_cast<int>(alphabet_.size());
      alphabet_.push_back(static_cast<char>(c));
    }
  const std::size_t split = text.size() * 9 / 10;
  for (std::size_t i = 0; i < text.size(); ++i)
    (i < split ? train_ : validation_).push_back(id[static_cast<unsigned char>(text[i])]);
  const std::size_t needed = static_cast<std::size_t>(context_) + 2;
  if (train_.size() < needed || validation_.size() < needed)
    throw Error(ErrorKind::InvalidInput, path, "data",
                "the text is too short for samples of " + std::to_string(context_) + " characters");
}

madpipe::runtime::Batch madpipe::runtime::TextData::micro_batch(std::int64_t step, int index,
                                                                bool validation) const {
  const std::vector<std::int64_t>& tokens = validation ? validation_ : train_;
  std::mt19937_64 rng(batch_seed(seed_, step, index, validation));
  std::uniform_int_distribution<std::size_t> offset(0, tokens.size() - context_ - 2);
  auto input = torch::empty({micro_batch_size_, context_}, torch::kLong);
  auto target = torch::empty({micro_batch_size_, context_}, torch::kLong);
  auto in = input.accessor<std::int64_t, 2>();
  auto out = target.accessor<std::int64_t, 2>();
  for (int b = 0; b < micro_batch_size_; ++b) {
    const std::size_t o = offset(rng);
    for (int t = 0; t < context_; ++t) {
      in[b][t] = tokens[o + t];
      out[b][t] = tokens[o + t + 1];
    }
  }
  return {input, target};
}

std::string madpipe::runtime::TextData::description() const {
  return "text from " + path_ + " (" + std::to_string(files_) + " files, " +
         std::to_string(train_.size()) + " training and " + std::to_string(validation_.size()) +
         " validation characters, " + std::to_string(alphabet_.size()) + " symbols)";
}

madpipe::runtime::TokenFileData::TokenFileData(const std::string& train_path,
                                               const std::string& validation_path, int token_bytes,
                                               int context, int micro_batch_size,
                                               std::uint64_t seed)
    : token_bytes_(token_bytes),
      context_(context),
      micro_batch_size_(micro_batch_size),
      seed_(seed) {
  const auto open = [token_bytes](const std::string& path) {
    auto file = std::make_shared<const MappedFile>(path);
    if (file->size() % static_cast<std::size_t>(token_bytes) != 0)
      throw Error(ErrorKind::InvalidInput, path, "data-format",
                  "the file is " + std::to_string(file->size()) + " bytes, not a whole number of " +
                      std::to_string(token_bytes) +
                      "-byte tokens (tokens-u16: 2 bytes, tokens-u32: 4)");
    return file;
  };
  const std::shared_ptr<const MappedFile> train = open(train_path);
  const std::size_t n = train->size() / static_cast<std::size_t>(token_bytes);
  if (validation_path.empty()) {
    const std::size_t held_out = n / 10;
    train_ = {train, 0, n - held_out};
    validation_ = {train, n - held_out, held_out};
  } else {
    const std::shared_ptr<const MappedFile> validation = open(validation_path);
    train_ = {train, 0, n};
    validation_ = {validation, 0, validation->size() / static_cast<std::size_t>(token_bytes)};
  }
  const std::size_t window = static_cast<std::size_t>(context) + 1;
  for (const Tokens* split : {&train_, &validation_})
    if (split->count < window)
      throw Error(ErrorKind::InvalidInput, split->file->path(), "data",
                  "holds " + std::to_string(split->count) + " tokens" +
                      (validation_path.empty() && split == &validation_
                           ? " in its last tenth (the validation part without --validation-data)"
                           : "") +
                      ", fewer than one sample of --context + 1 = " + std::to_string(window));
}

std::uint64_t madpipe::runtime::TokenFileData::token(const Tokens& tokens, std::size_t i) const {
  const std::uint8_t* p = tokens.file->data() + (tokens.first + i) * token_bytes_;
  std::uint64_t id = 0;
  for (int b = token_bytes_ - 1; b >= 0; --b) id = (id << 8) | p[b];  // little-endian
  return id;
}

madpipe::runtime::Batch madpipe::runtime::TokenFileData::micro_batch(std::int64_t step, int index,
                                                                     bool validation) const {
  const Tokens& tokens = validation ? validation_ : train_;
  std::mt19937_64 rng(batch_seed(seed_, step, index, validation));
  std::uniform_int_distribution<std::size_t> offset(
      0, tokens.count - static_cast<std::size_t>(context_) - 1);
  auto input = torch::empty({micro_batch_size_, context_}, torch::kLong);
  auto target = torch::empty({micro_batch_size_, context_}, torch::kLong);
  auto in = input.accessor<std::int64_t, 2>();
  auto out = target.accessor<std::int64_t, 2>();
  for (int b = 0; b < micro_batch_size_; ++b) {
    const std::size_t o = offset(rng);
    for (int t = 0; t < context_; ++t) {
      in[b][t] = static_cast<std::int64_t>(token(tokens, o + t));
      out[b][t] = static_cast<std::int64_t>(token(tokens, o + t + 1));
    }
  }
  return {input, target};
}

std::int64_t madpipe::runtime::TokenFileData::check_ids(std::int64_t vocab) const {
  std::uint64_t largest = 0;
  for (const Tokens* split : {&train_, &validation_})
    for (std::size_t i = 0; i < split->count; ++i) {
      const std::uint64_t id = token(*split, i);
      largest = std::max(largest, id);
      if (vocab > 0 && id >= static_cast<std::uint64_t>(vocab))
        throw Error(ErrorKind::InvalidInput, split->file->path(), "vocab",
                    "token " + std::to_string(split->first + i) + " is id " + std::to_string(id) +
                        ", outside the embedding of " + std::to_string(vocab) + " ids");
    }
  return static_cast<std::int64_t>(largest) + 1;
}

std::string madpipe::runtime::TokenFileData::description() const {
  std::string text = "tokens from " + train_.file->path();
  if (validation_.file != train_.file) text += " and " + validation_.file->path();
  return text + " (" + std::to_string(train_.count) + " training and " +
         std::to_string(validation_.count) + " validation tokens of " +
         std::to_string(8 * token_bytes_) + " bits, mapped)";
}

madpipe::runtime::SyntheticData::SyntheticData(int inputs, int outputs, int micro_batch_size,
                                               std::uint64_t seed)
    : inputs_(inputs), outputs_(outputs), micro_batch_size_(micro_batch_size), seed_(seed) {
  std::mt19937_64 rng(mix(seed, 0xabcdef));
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(inputs)));
  weights_ = torch::empty({inputs, outputs});
  auto w = weights_.accessor<float, 2>();
  for (int i = 0; i < inputs; ++i)
    for (int o = 0; o < outputs; ++o) w[i][o] = normal(rng);
}

madpipe::runtime::Batch madpipe::runtime::SyntheticData::micro_batch(std::int64_t step, int index,
                                                                     bool validation) const {
  std::mt19937_64 rng(batch_seed(seed_, step, index, validation));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto input = torch::empty({micro_batch_size_, inputs_});
  auto x = input.accessor<float, 2>();
  for (int b = 0; b < micro_batch_size_; ++b)
    for (int i = 0; i < inputs_; ++i) x[b][i] = normal(rng);
  return {input, torch::tanh(torch::matmul(input, weights_))};
}

std::string madpipe::runtime::SyntheticData::description() const {
  return "synthetic regression (" + std::to_string(inputs_) + " -> " + std::to_string(outputs_) +
         ")";
}

madpipe::runtime::SyntheticImages::SyntheticImages(int image, int classes, int micro_batch_size,
                                                   std::uint64_t seed)
    : image_(image), classes_(classes), micro_batch_size_(micro_batch_size), seed_(seed) {
  std::mt19937_64 rng(mix(seed, 0x1a2b3c));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int features = 3 * image * image;
  projection_ = torch::empty({features, classes});
  auto w = projection_.accessor<float, 2>();
  for (int i = 0; i < features; ++i)
    for (int c = 0; c < classes; ++c) w[i][c] = normal(rng);
}

madpipe::runtime::Batch madpipe::runtime::SyntheticImages::micro_batch(std::int64_t step, int index,
                                                                       bool validation) const {
  std::mt19937_64 rng(batch_seed(seed_, step, index, validation));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto input = torch::empty({micro_batch_size_, 3, image_, image_});
  float* x = input.data_ptr<float>();
  for (std::int64_t i = 0; i < input.numel(); ++i) x[i] = normal(rng);
  auto target = torch::matmul(input.reshape({micro_batch_size_, -1}), projection_).argmax(1);
  return {input, target};
}

std::string madpipe::runtime::SyntheticImages::description() const {
  return "synthetic images (" + std::to_string(image_) + "x" + std::to_string(image_) + ", " +
         std::to_string(classes_) + " classes)";
}

madpipe::runtime::Workload madpipe::runtime::make_workload(const TrainConfig& c) {
  Workload w;
  w.model.name = c.model;
  w.model.layers = c.layers;
  w.model.width = c.width;
  w.model.heads = c.heads;
  w.model.context = c.context;
  w.model.inputs = c.inputs;
  w.model.outputs = c.outputs;
  w.model.image = c.image;
  w.model.seed = c.seed;
  if (c.model == "gpt" && c.data_format != DataFormat::Text) {
    auto tokens = std::make_unique<TokenFileData>(c.data, c.validation_data,
                                                  c.data_format == DataFormat::TokensU16 ? 2 : 4,
                                                  c.context, c.micro_batch_size, c.seed);
    const std::int64_t needed = tokens->check_ids(c.vocab);
    if (c.vocab == 0 && needed > std::numeric_limits<int>::max())
      throw Error(ErrorKind::InvalidInput, c.data, "vocab",
                  "token ids up to " + std::to_string(needed - 1) +
                      " need an embedding larger than any model; give --vocab");
    w.model.vocab = c.vocab > 0 ? c.vocab : static_cast<int>(needed);
    w.data = std::move(tokens);
  } else if (c.model == "gpt") {
    auto text = std::make_unique<TextData>(c.data, c.context, c.micro_batch_size, c.seed);
    w.model.vocab = text->vocab();
    w.data = std::move(text);
  } else if (c.model == "cnn") {
    w.data = std::make_unique<SyntheticImages>(c.image, c.outputs, c.micro_batch_size, c.seed);
  } else {
    w.data = std::make_unique<SyntheticData>(c.inputs, c.outputs, c.micro_batch_size, c.seed);
  }
  return w;
}
