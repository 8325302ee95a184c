#include "core/decoder_config.hpp"

#include "core/json_file.hpp"
#include "core/json_reader.hpp"

#include <climits>
#include <string>

#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {
using madpipe::DecoderArchitecture;
using madpipe::DecoderConfig;
using madpipe::JsonReader;

// The model types of each architecture; Gemma's GeGLU MLP has SwiGLU's three matrices.
constexpr const char* kLlamaTypes[] = {"llama", "mistral", "qwen2", "gemma"};
constexpr const char* kGpt2Type = "gpt2";

// The member `key`, or nullptr when absent or null (Hugging Face writes null for "default").
const json* given(const json& object, const char* key) {
  const json* value = JsonReader::find(object, key);
  return value == nullptr || value->is_null() ? nullptr : value;
}

int positive(const JsonReader& reader, const json& object, const char* key) {
  return reader.int_member(object, "", key, 1);
}

// The blocks, with the embedding and the head, must fit in a profile (madpipe.profile/1 holds at
// most 1,000,000 layers).
int blocks(const JsonReader& reader, const json& object, const char* key) {
  constexpr int kMaxBlocks = 1'000'000 - 2;
  const int count = positive(reader, object, key);
  if (count > kMaxBlocks)
    reader.fail(std::string("/") + key, "must be at most " + std::to_string(kMaxBlocks) +
                                            " (a profile holds at most 1000000 layers), got " +
                                            std::to_string(count));
  return count;
}

int optional_positive(const JsonReader& reader, const json& object, const char* key, int fallback) {
  return given(object, key) == nullptr ? fallback : positive(reader, object, key);
}

bool optional_bool(const JsonReader& reader, const json& object, const char* key, bool fallback) {
  const json* value = given(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean())
    reader.fail(std::string("/") + key,
                "must be true or false, got " + reader.show_wrong_type(*value));
  return value->get<bool>();
}

void read_llama(const JsonReader& reader, const json& j, DecoderConfig& c) {
  c.architecture = DecoderArchitecture::Llama;
  c.vocab_size = positive(reader, j, "vocab_size");
  c.hidden_size = positive(reader, j, "hidden_size");
  c.intermediate_size = positive(reader, j, "intermediate_size");
  c.layers = blocks(reader, j, "num_hidden_layers");
  c.heads = positive(reader, j, "num_attention_heads");
  c.kv_heads = optional_positive(reader, j, "num_key_value_heads", c.heads);
  if (c.heads % c.kv_heads != 0)
    reader.fail("/num_key_value_heads", "must divide num_attention_heads (" +
                                            std::to_string(c.heads) + "), got " +
                                            std::to_string(c.kv_heads));
  if (given(j, "head_dim") == nullptr && c.hidden_size % c.heads != 0)
    reader.fail("/hidden_size", "must be a multiple of num_attention_heads (" +
                                    std::to_string(c.heads) + ") when head_dim is not given, got " +
                                    std::to_string(c.hidden_size));
  c.head_dim = optional_positive(reader, j, "head_dim", c.hidden_size / c.heads);
  c.tied_embeddings = optional_bool(reader, j, "tie_word_embeddings", c.model_type == "gemma");
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2's query, key and value projections always have biases
  } else {
    c.qkv_bias = c.output_bias = optional_bool(reader, j, "attention_bias", false);
  }
  c.mlp_bias = optional_bool(reader, j, "mlp_bias", false);
}

void read_gpt2(const JsonReader& reader, const json& j, DecoderConfig& c) {
  c.architecture = DecoderArchitecture::Gpt2;
  c.vocab_size = positive(reader, j, "vocab_size");
  c.hidden_size = positive(reader, j, "n_embd");
  c.layers = blocks(reader, j, "n_layer");
  c.heads = positive(reader, j, "n_head");
  c.positions = positive(reader, j, "n_positions");
  if (c.hidden_size % c.heads != 0)
    reader.fail("/n_embd", "must be a multiple of n_head (" + std::to_string(c.heads) + "), got " +
                               std::to_string(c.hidden_size));
  if (c.hidden_size > INT_MAX / 4)
    reader.fail("/n_embd", "must be at most " + std::to_string(INT_MAX / 4) +
                               " (n_inner defaults to 4 n_embd), got " +
                               std::to_string(c.hidden_size));
  c.intermediate_size = optional_positive(reader, j, "n_inner", 4 * c.hidden_size);
  c.kv_heads = c.heads;
  c.head_dim = c.hidden_size / c.heads;
  c.tied_embeddings = optional_bool(reader, j, "tie_word_embeddings", true);
  c.qkv_bias = c.output_bias = c.mlp_bias = true;
}
}  // namespace

std::string madpipe::supported_model_types() {
  std::string names;
  for (const char* type : kLlamaTypes) names += std::string(type) + ", ";
  return names + kGpt2Type;
}

DecoderConfig madpipe::decoder_config_from_json(const json& j, const std::string& file) {
  JsonReaderStyle style;
  style.name_wrong_type = true;  // "must be a string, got number"
  const JsonReader reader{file, style};
  reader.require_document(j);
  DecoderConfig config;
  const json* type = given(j, "model_type");
  if (type == nullptr) {
    // Llama's keys without a model type: read as a Llama.
    if (JsonReader::find(j, "hidden_size") == nullptr)
      reader.fail("/model_type", "missing, and no Llama-style hidden_size either (supported: " +
                                     supported_model_types() + ")");
    read_llama(reader, j, config);
    return config;
  }
  config.model_type = reader.string_value(*type, "/model_type");
  if (config.model_type == kGpt2Type) {
    read_gpt2(reader, j, config);
    return config;
  }
  for (const char* llama_type : kLlamaTypes) {
    if (config.model_type == llama_type) {
      read_llama(reader, j, config);
      return config;
    }
  }
  reader.fail("/model_type", "unknown model type " + reader.show(*type) +
                                 " (supported: " + supported_model_types() + ")");
}

DecoderConfig madpipe::read_decoder_config(const std::string& path) {
  return decoder_config_from_json(read_json_file(path), path);
}
