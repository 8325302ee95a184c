#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace madpipe {

// The two layer structures an analytic profile knows (analytic_profile.hpp).
enum class DecoderArchitecture {
  // Llama, Mistral, Qwen2, Gemma: RMSNorm, rotary positions, grouped-query attention, a gated
  // MLP of three matrices (SwiGLU; Gemma's GeGLU has the same shapes).
  Llama,
  // GPT-2: learned position embeddings, LayerNorm, multi-head attention, a GELU MLP of two
  // matrices, biases everywhere.
  Gpt2,
};

// The sizes of a decoder-only transformer, as a Hugging Face config.json gives them.
struct DecoderConfig {
  DecoderArchitecture architecture = DecoderArchitecture::Llama;
  std::string model_type;  // as the file says it ("llama", "gpt2"); empty when it says none
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;  // the MLP's inner width
  int layers = 0;             // transformer blocks
  int heads = 0;              // query heads
  int kv_heads = 0;           // key and value heads (grouped-query attention); heads when not
  int head_dim = 0;
  int positions = 0;  // rows of a learned position table (GPT-2's n_positions); 0: rotary
  // The output projection is the token embedding's matrix (tie_word_embeddings).
  bool tied_embeddings = false;
  bool qkv_bias = false;     // biases of the query, key and value projections
  bool output_bias = false;  // bias of the attention's output projection
  bool mlp_bias = false;     // biases of the MLP's matrices
};

// The model types read_decoder_config accepts: "llama, mistral, qwen2, gemma, gpt2".
std::string supported_model_types();

// Reads a Hugging Face config.json of a decoder. Llama family (model_type llama, mistral, qwen2,
// gemma, or none with Llama's keys): vocab_size, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, and optionally num_key_value_heads (default: the
// heads), head_dim (default: hidden_size / num_attention_heads), tie_word_embeddings (default
// false, gemma true), attention_bias and mlp_bias (default false; qwen2 has query, key and value
// biases). GPT-2 (model_type gpt2): vocab_size, n_embd, n_layer, n_head, n_positions, and
// optionally n_inner (null: 4 n_embd) and tie_word_embeddings (default true). Other keys are
// ignored. Every problem throws Error{InvalidInput} naming the file, the JSON pointer of the
// field and the problem; I/O failures throw Error{Io}.
DecoderConfig read_decoder_config(const std::string& path);
// Same, from parsed JSON; `file` is only used in messages.
DecoderConfig decoder_config_from_json(const nlohmann::json& j, const std::string& file = "");

}  // namespace madpipe
