#include "runtime/data/data.hpp"

#include "core/error.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/model/script_model.hpp"

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

// `rows` windows of `context` + 1 consecutive ids (id_at(i): the i-th), at offsets in
// [0, last_offset] drawn from `seed`: the input is each window's first `context` ids, the target
// its last `context`.
template <typename IdAt>
static madpipe::runtime::Batch random_windows(std::uint64_t seed, std::size_t last_offset, int rows,
                                              int context, const IdAt& id_at) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> offset(0, last_offset);
  auto input = torch::empty({rows, context}, torch::kLong);
  auto target = torch::empty({rows, context}, torch::kLong);
  auto in = input.accessor<std::int64_t, 2>();
  auto out = target.accessor<std::int64_t, 2>();
  for (int b = 0; b < rows; ++b) {
    const std::size_t o = offset(rng);
    for (int t = 0; t < context; ++t) {
      in[b][t] = id_at(o + t);
      out[b][t] = id_at(o + t + 1);
    }
  }
  return {input, target};
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
  return random_windows(batch_seed(seed_, step, index, validation), tokens.size() - context_ - 2,
                        micro_batch_size_, context_, [&](std::size_t i) { return tokens[i]; });
}

std::int64_t madpipe::runtime::TextData::host_bytes() const {
  return static_cast<std::int64_t>((train_.size() + validation_.size()) * sizeof(std::int64_t));
}

std::string madpipe::runtime::TextData::description() const {
  return "text from " + path_ + " (" + std::to_string(files_) + " files, " +
         std::to_string(train_.size()) + " training and " + std::to_string(validation_.size()) +
         " validation characters, " + std::to_string(alphabet_.size()) + " symbols)";
}

namespace {
// llm.c's token files start with 256 little-endian int32: this magic, a version (1: 16-bit
// tokens, 2: 32-bit) and the number of tokens that follow.
constexpr std::int32_t kLlmcMagic = 20240520;
constexpr std::size_t kLlmcHeaderBytes = 256 * 4;

std::int32_t int32_at(const madpipe::runtime::MappedFile& file, std::size_t word) {
  std::uint32_t value = 0;
  for (int b = 3; b >= 0; --b) value = (value << 8) | file.data()[4 * word + b];
  return static_cast<std::int32_t>(value);
}

const char* format_of_bytes(int token_bytes) {
  return token_bytes == 2 ? "tokens-u16" : "tokens-u32";
}

// The tokens of a file: after llm.c's header where it has one (checked against the declared
// format and the file's size), else all of it.
std::pair<std::size_t, std::size_t> token_span(const madpipe::runtime::MappedFile& file,
                                               int token_bytes) {
  using madpipe::Error;
  using madpipe::ErrorKind;
  const std::size_t size = file.size();
  if (size >= kLlmcHeaderBytes && int32_at(file, 0) == kLlmcMagic) {
    const std::int32_t version = int32_at(file, 1);
    const std::int64_t count = int32_at(file, 2);
    const int version_bytes = version == 1 ? 2 : version == 2 ? 4 : 0;
    if (version_bytes == 0)
      throw Error(ErrorKind::InvalidInput, file.path(), "data-format",
                  "an llm.c token file (magic " + std::to_string(kLlmcMagic) +
                      ") of unknown version " + std::to_string(version) +
                      " (known: 1, 16-bit tokens; 2, 32-bit tokens)");
    if (version_bytes != token_bytes)
      throw Error(ErrorKind::InvalidInput, file.path(), "data-format",
                  std::string("an llm.c token file of version ") + std::to_string(version) +
                      " holds " + std::to_string(8 * version_bytes) +
                      "-bit tokens, but it is read as " + format_of_bytes(token_bytes) +
                      ": use --data-format " + format_of_bytes(version_bytes));
    const std::size_t body = size - kLlmcHeaderBytes;
    if (count < 0 || static_cast<std::size_t>(count) * version_bytes != body)
      throw Error(ErrorKind::InvalidInput, file.path(), "data",
                  "its llm.c header says " + std::to_string(count) + " tokens of " +
                      std::to_string(version_bytes) + " bytes, but " + std::to_string(body) +
                      " bytes follow the header (a truncated or damaged file?)");
    return {kLlmcHeaderBytes / token_bytes, static_cast<std::size_t>(count)};
  }
  if (size % static_cast<std::size_t>(token_bytes) != 0)
    throw Error(ErrorKind::InvalidInput, file.path(), "data-format",
                "the file is " + std::to_string(size) + " bytes, not a whole number of " +
                    std::to_string(token_bytes) +
                    "-byte tokens (tokens-u16: 2 bytes, tokens-u32: 4)" +
                    (token_bytes == 4 && size % 2 == 0 ? "; is it --data-format tokens-u16?" : ""));
  return {0, size / static_cast<std::size_t>(token_bytes)};
}
}  // namespace

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
    const auto [first, count] = token_span(*file, token_bytes);
    return Tokens{file, first, count};
  };
  const Tokens train = open(train_path);
  if (validation_path.empty()) {
    const std::size_t held_out = train.count / 10;
    train_ = {train.file, train.first, train.count - held_out};
    validation_ = {train.file, train.first + train.count - held_out, held_out};
  } else {
    train_ = train;
    validation_ = open(validation_path);
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
  return random_windows(batch_seed(seed_, step, index, validation),
                        tokens.count - static_cast<std::size_t>(context_) - 1, micro_batch_size_,
                        context_,
                        [&](std::size_t i) { return static_cast<std::int64_t>(token(tokens, i)); });
}

std::int64_t madpipe::runtime::TokenFileData::check_ids(std::int64_t vocab) const {
  // Ids no tokenizer has (2^20 and more): 16-bit tokens read as 32-bit ones pair up into them.
  constexpr std::uint64_t kLargestVocabulary = 1ULL << 20;
  const std::string u16_as_u32 =
      token_bytes_ == 4 ? " (16-bit tokens read as tokens-u32 pair up into such ids: is the file "
                          "--data-format tokens-u16?)"
                        : "";
  if (validation_.file == train_.file) {
    check_word_pattern({train_.file, train_.first, train_.count + validation_.count});
  } else {
    check_word_pattern(train_);
    check_word_pattern(validation_);
  }
  std::uint64_t largest = 0;
  for (const Tokens* split : {&train_, &validation_}) {
    for (std::size_t i = 0; i < split->count; ++i) {
      const std::uint64_t id = token(*split, i);
      largest = std::max(largest, id);
      if (vocab > 0 && id >= static_cast<std::uint64_t>(vocab))
        throw Error(ErrorKind::InvalidInput, split->file->path(), "vocab",
                    "token " + std::to_string(split->first + i) + " is id " + std::to_string(id) +
                        ", outside the embedding of " + std::to_string(vocab) + " ids" +
                        (id >= (1U << 16) ? u16_as_u32 : ""));
      if (vocab == 0 && id >= kLargestVocabulary)
        throw Error(ErrorKind::InvalidInput, split->file->path(), "vocab",
                    "token " + std::to_string(split->first + i) + " is id " + std::to_string(id) +
                        ", beyond any tokenizer's vocabulary of fewer than 2^20 ids (give --vocab "
                        "if the ids are meant)" +
                        u16_as_u32);
    }
  }
  return static_cast<std::int64_t>(largest) + 1;
}

void madpipe::runtime::TokenFileData::check_word_pattern(const Tokens& tokens) const {
  // 32-bit ids below 65536 read as tokens-u16: every second 16-bit word is zero.
  if (token_bytes_ != 2 || tokens.count < 8 || tokens.count % 2 != 0) return;
  bool low_words_used = false;
  for (std::size_t i = 0; i + 1 < tokens.count; i += 2) {
    if (token(tokens, i + 1) != 0) return;
    low_words_used = low_words_used || token(tokens, i) != 0;
  }
  if (low_words_used)
    throw Error(ErrorKind::InvalidInput, tokens.file->path(), "data-format",
                "every second 16-bit token is 0, as when 32-bit tokens are read as tokens-u16: is "
                "the file --data-format tokens-u32?");
}

std::string madpipe::runtime::TokenFileData::description() const {
  std::string text = "tokens from " + train_.file->path();
  if (validation_.file != train_.file) text += " and " + validation_.file->path();
  return text + " (" + std::to_string(train_.count) + " training and " +
         std::to_string(validation_.count) + " validation tokens of " +
         std::to_string(8 * token_bytes_) + " bits, mapped)";
}

namespace {
// The first line of an exception's message (LibTorch's carry a C++ backtrace after it).
std::string first_line(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

// The "inputs" and "targets" of the dict that torch.save wrote to `path`.
madpipe::runtime::Batch read_tensor_file(const std::string& path) {
  using madpipe::Error;
  using madpipe::ErrorKind;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::Io, path, "data", "cannot be read");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  torch::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::InvalidInput, path, "data",
                "not a file that torch.save wrote, or a truncated one (" + first_line(e) + ")");
  }
  if (!value.isGenericDict())
    throw Error(ErrorKind::InvalidInput, path, "data",
                std::string("holds a ") + value.tagKind() +
                    ", not the dict {\"inputs\": X, \"targets\": Y} of torch.save");
  const c10::Dict<torch::IValue, torch::IValue> dict = value.toGenericDict();
  std::vector<torch::Tensor> parts;
  for (const char* key : {"inputs", "targets"}) {
    const auto it = dict.find(torch::IValue(std::string(key)));
    if (it == dict.end())
      throw Error(ErrorKind::InvalidInput, path, key,
                  std::string("missing: the dict needs \"inputs\" and \"targets\""));
    if (!it->value().isTensor())
      throw Error(ErrorKind::InvalidInput, path, key,
                  std::string("is a ") + it->value().tagKind() + ", not a tensor");
    parts.push_back(it->value().toTensor().contiguous());
  }
  if (parts[0].dim() == 0 || parts[1].dim() == 0 || parts[0].size(0) != parts[1].size(0))
    throw Error(ErrorKind::InvalidInput, path, "targets",
                "its rows must be those of \"inputs\": " +
                    std::to_string(parts[0].dim() == 0 ? 0 : parts[0].size(0)) + " inputs, " +
                    std::to_string(parts[1].dim() == 0 ? 0 : parts[1].size(0)) + " targets");
  return {parts[0], parts[1]};
}

// Position `i` of a permutation of [0, n) drawn from `key`: a 4-round Feistel network on the
// smallest even number of bits that covers n, walked back into [0, n).
std::uint64_t permuted(std::uint64_t i, std::uint64_t n, std::uint64_t key) {
  int bits = 2;
  while ((std::uint64_t{1} << bits) < n) bits += 2;
  const int half = bits / 2;
  const std::uint64_t mask = (std::uint64_t{1} << half) - 1;
  do {
    std::uint64_t left = i >> half, right = i & mask;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t next = left ^ (mix(key + round, right) & mask);
      left = right;
      right = next;
    }
    i = (left << half) | right;
  } while (i >= n);
  return i;
}

// "[3, 32, 32] Float": the shape and type of one row.
std::string row_text(const std::vector<std::int64_t>& shape, torch::ScalarType type) {
  std::string text = "[";
  for (std::size_t d = 0; d < shape.size(); ++d)
    text += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return text + "] " + std::string(c10::toString(type));
}

// Throws Error{InvalidInput} naming the file when the rows of `part` ("inputs" or "targets")
// are not what the model takes.
void check_rows(const std::string& path, const char* part, const torch::Tensor& all,
                const std::vector<std::int64_t>& shape, torch::ScalarType type,
                const std::string& model) {
  const std::vector<std::int64_t> rows = all.sizes().slice(1).vec();
  if (rows != shape || all.scalar_type() != type)
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, path, part,
                         "rows are " + row_text(rows, all.scalar_type()) + ", but --model " +
                             model + " takes " + row_text(shape, type));
}

// Every id in `ids` below `bound`; throws naming the file, the row and the id.
void check_ids_below(const std::string& path, const char* part, const torch::Tensor& ids,
                     std::int64_t bound, const std::string& what) {
  const torch::Tensor bad = (ids < 0).logical_or(ids >= bound).reshape({ids.size(0), -1}).any(1);
  if (!bad.any().item<bool>()) return;
  const std::int64_t row = bad.nonzero()[0][0].item<std::int64_t>();
  const torch::Tensor values = ids[row].reshape({-1});
  const torch::Tensor outside = values.index({(values < 0).logical_or(values >= bound)});
  throw madpipe::Error(madpipe::ErrorKind::InvalidInput, path, part,
                       "row " + std::to_string(row) + " holds " +
                           std::to_string(outside[0].item<std::int64_t>()) + ", outside " + what);
}

torch::Tensor rows_of(const torch::Tensor& all, std::int64_t first, std::int64_t count) {
  return all.narrow(0, first, count);
}
}  // namespace

madpipe::runtime::TensorFileData::TensorFileData(const std::string& train_path,
                                                 const std::string& validation_path,
                                                 int micro_batch_size, int micro_batches_per_step,
                                                 std::uint64_t seed)
    : path_(train_path),
      validation_path_(validation_path),
      micro_batch_size_(micro_batch_size),
      micro_batches_per_step_(micro_batches_per_step),
      seed_(seed) {
  const Batch all = read_tensor_file(train_path);
  const std::int64_t n = all.input.size(0);
  if (validation_path.empty()) {
    const std::int64_t held_out = n / 10;
    if (held_out == 0)
      throw Error(ErrorKind::InvalidInput, train_path, "data",
                  "holds " + std::to_string(n) +
                      " rows, too few to hold out a tenth for validation (give "
                      "--validation-data)");
    train_ = {rows_of(all.input, 0, n - held_out), rows_of(all.target, 0, n - held_out)};
    validation_ = {rows_of(all.input, n - held_out, held_out),
                   rows_of(all.target, n - held_out, held_out)};
  } else {
    train_ = all;
    validation_ = read_tensor_file(validation_path);
    for (std::size_t part = 0; part < 2; ++part) {
      const torch::Tensor& a = part == 0 ? train_.input : train_.target;
      const torch::Tensor& b = part == 0 ? validation_.input : validation_.target;
      if (a.sizes().slice(1) != b.sizes().slice(1) || a.scalar_type() != b.scalar_type())
        throw Error(ErrorKind::InvalidInput, validation_path, part == 0 ? "inputs" : "targets",
                    "its rows differ from those of " + train_path);
    }
  }
}

madpipe::runtime::Batch madpipe::runtime::TensorFileData::micro_batch(std::int64_t step, int index,
                                                                      bool validation) const {
  const Batch& rows = validation ? validation_ : train_;
  const auto n = static_cast<std::uint64_t>(rows.input.size(0));
  std::vector<std::int64_t> picked;
  for (int b = 0; b < micro_batch_size_; ++b) {
    std::uint64_t row = 0;
    if (validation) {
      row = (static_cast<std::uint64_t>(index) * micro_batch_size_ + b) % n;
    } else {
      const std::uint64_t k = ((static_cast<std::uint64_t>(std::max<std::int64_t>(step, 1) - 1) *
                                    micro_batches_per_step_ +
                                static_cast<std::uint64_t>(index)) *
                                   micro_batch_size_ +
                               b);
      row = permuted(k % n, n, mix(seed_, k / n));  // epoch k / n
    }
    picked.push_back(static_cast<std::int64_t>(row));
  }
  const torch::Tensor which = torch::tensor(picked, torch::kLong);
  return {rows.input.index_select(0, which), rows.target.index_select(0, which)};
}

std::int64_t madpipe::runtime::TensorFileData::host_bytes() const {
  std::int64_t bytes = 0;
  for (const Batch* rows : {&train_, &validation_})
    for (const torch::Tensor& t : {rows->input, rows->target})
      if (t.defined()) bytes += static_cast<std::int64_t>(t.nbytes());
  return bytes;
}

std::string madpipe::runtime::TensorFileData::description() const {
  const auto shape = [](const torch::Tensor& t) {
    return row_text(t.sizes().slice(1).vec(), t.scalar_type());
  };
  return "tensors from " + path_ + (validation_path_.empty() ? "" : " and " + validation_path_) +
         " (" + std::to_string(train_.input.size(0)) + " training and " +
         std::to_string(validation_.input.size(0)) + " validation rows; inputs " +
         shape(train_.input) + ", targets " + shape(train_.target) + ")";
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

madpipe::runtime::ChainModel madpipe::runtime::take_model(Workload& workload) {
  if (workload.model.kind == ModelKind::Script) return std::move(workload.script);
  return build_model(workload.model, [](int) { return false; });
}

madpipe::runtime::Workload madpipe::runtime::make_workload(const ModelSettings& m,
                                                           const TrainingSettings& t,
                                                           int replicas) {
  Workload w;
  // The one load of a script model's file on this process.
  if (m.model == ModelKind::Script)
    w.script = script_chain_model(m.script, m.loss.value_or(ModelConfig().loss));
  // From here on only data: what it loads stays out of a CPU rank's metered memory.
  const UncountedHostAllocations data_in_host_memory;
  // A script model's input ids must be below its embedding's rows, as a gpt's below --vocab.
  const std::int64_t id_limit = m.vocab > 0                    ? m.vocab
                                : m.model == ModelKind::Script ? w.script.input_id_limit
                                                               : 0;
  w.model.kind = m.model;
  w.model.layers = m.layers;
  w.model.width = m.width;
  w.model.heads = m.heads;
  w.model.context = m.context;
  w.model.inputs = m.inputs;
  w.model.outputs = m.outputs;
  w.model.image = m.image;
  w.model.seed = t.seed;
  w.model.script = m.script;
  if (m.loss) w.model.loss = *m.loss;
  if (t.data_format == DataFormat::Tensors) {
    auto tensors = std::make_unique<TensorFileData>(t.data, t.validation_data, t.micro_batch_size,
                                                    t.micro_batches * replicas, t.seed);
    const Batch& rows = tensors->training_rows();
    const std::string& path = tensors->path();
    if (m.model == ModelKind::Mlp) {
      check_rows(path, "inputs", rows.input, {m.inputs}, torch::kFloat, "mlp (--inputs)");
      check_rows(path, "targets", rows.target, {m.outputs}, torch::kFloat, "mlp (--outputs)");
    } else if (m.model == ModelKind::Cnn) {
      check_rows(path, "inputs", rows.input, {3, m.image, m.image}, torch::kFloat, "cnn (--image)");
      check_rows(path, "targets", rows.target, {}, torch::kLong, "cnn (class ids)");
      check_ids_below(path, "targets", rows.target, m.outputs,
                      "the " + std::to_string(m.outputs) + " classes of --outputs");
    } else if (m.model == ModelKind::Script) {
      const bool classes = w.model.loss == LossKind::CrossEntropy;
      const torch::ScalarType wanted = classes ? torch::kLong : torch::kFloat;
      if (rows.target.scalar_type() != wanted)
        throw Error(ErrorKind::InvalidInput, path, "targets",
                    "are " + std::string(c10::toString(rows.target.scalar_type())) +
                        ", but --loss " + name_of(kLossNames, w.model.loss) + " takes " +
                        c10::toString(wanted) + (classes ? " class ids" : " values"));
      const std::string rows_of_embedding = "the embedding of " + std::to_string(id_limit) +
                                            " ids" +
                                            (m.vocab > 0 ? " (--vocab)" : " (the module's)");
      if (id_limit > 0 && rows.input.scalar_type() == torch::kLong)
        check_ids_below(path, "inputs", rows.input, id_limit, rows_of_embedding);
      if (classes && m.vocab > 0)
        check_ids_below(path, "targets", rows.target, m.vocab, rows_of_embedding);
    } else if (m.model == ModelKind::Gpt) {
      check_rows(path, "inputs", rows.input, {m.context}, torch::kLong, "gpt (--context)");
      check_rows(path, "targets", rows.target, {m.context}, torch::kLong, "gpt (--context)");
      const Batch& held_out = tensors->validation_rows();
      std::int64_t largest = 0;
      for (const torch::Tensor* ids :
           {&rows.input, &rows.target, &held_out.input, &held_out.target})
        largest = std::max(largest, ids->max().item<std::int64_t>());
      w.model.vocab = m.vocab > 0 ? m.vocab
                                  : static_cast<int>(std::min<std::int64_t>(
                                        largest + 1, std::numeric_limits<int>::max()));
      const std::string embedding = "the embedding of " + std::to_string(w.model.vocab) + " ids";
      for (const Batch* split : {&rows, &held_out}) {
        const std::string& file =
            split == &rows || t.validation_data.empty() ? path : t.validation_data;
        check_ids_below(file, "inputs", split->input, w.model.vocab, embedding);
        check_ids_below(file, "targets", split->target, w.model.vocab, embedding);
      }
    }
    w.data = std::move(tensors);
    return w;
  }
  if ((m.model == ModelKind::Gpt || m.model == ModelKind::Script) &&
      t.data_format != DataFormat::Text) {
    auto tokens = std::make_unique<TokenFileData>(t.data, t.validation_data,
                                                  t.data_format == DataFormat::TokensU16 ? 2 : 4,
                                                  m.context, t.micro_batch_size, t.seed);
    const std::int64_t needed = tokens->check_ids(id_limit);
    if (m.vocab == 0 && needed > std::numeric_limits<int>::max())
      throw Error(ErrorKind::InvalidInput, t.data, "vocab",
                  "token ids up to " + std::to_string(needed - 1) +
                      " need an embedding larger than any model; give --vocab");
    w.model.vocab = m.vocab > 0 ? m.vocab : static_cast<int>(needed);
    w.data = std::move(tokens);
  } else if (m.model == ModelKind::Gpt) {
    auto text = std::make_unique<TextData>(t.data, m.context, t.micro_batch_size, t.seed);
    w.model.vocab = text->vocab();
    w.data = std::move(text);
  } else if (m.model == ModelKind::Cnn) {
    w.data = std::make_unique<SyntheticImages>(m.image, m.outputs, t.micro_batch_size, t.seed);
  } else {
    w.data = std::make_unique<SyntheticData>(m.inputs, m.outputs, t.micro_batch_size, t.seed);
  }
  return w;
}

// From pinned memory, asynchronously on the current stream: a copy from pageable memory would
// make the host wait for the GPU to drain before it queues the next kernel.
static torch::Tensor moved(const torch::Tensor& t, const torch::Device& device) {
  if (t.device() == device) return t;
  if (device.is_cuda() && t.is_cpu()) return t.pin_memory().to(device, /*non_blocking=*/true);
  return t.to(device);
}

madpipe::runtime::Batch madpipe::runtime::on_device(Batch batch, const torch::Device& device) {
  batch.input = moved(batch.input, device);
  batch.target = moved(batch.target, device);
  return batch;
}
