#include "core/analytic_profile.hpp"

#include "core/chain.hpp"
#include "core/decoder_config.hpp"
#include "core/device_spec.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using madpipe::AnalyticOptions;
using madpipe::DecoderArchitecture;
using madpipe::DecoderConfig;
using madpipe::Error;
using madpipe::ErrorKind;
using madpipe::Layer;
using madpipe::Precision;
using madpipe::Profile;
using nlohmann::json;

namespace fs = std::filesystem;

namespace {

// The byte fields of one layer, to compare with a hand computation.
struct LayerBytes {
  std::int64_t weight, output, saved, forward_workspace, backward_workspace;
};

void expect_bytes(const Layer& layer, const std::string& name, const LayerBytes& expected) {
  EXPECT_EQ(layer.name, name);
  EXPECT_EQ(layer.weight_bytes, expected.weight) << name;
  EXPECT_EQ(layer.output_bytes, expected.output) << name;
  EXPECT_EQ(layer.saved_bytes, expected.saved) << name;
  EXPECT_EQ(layer.forward_workspace_bytes, expected.forward_workspace) << name;
  EXPECT_EQ(layer.backward_workspace_bytes, expected.backward_workspace) << name;
}

// vocab 1000, hidden 64, intermediate 176, 2 layers, 4 heads of 16, 2 key/value heads.
json small_llama_json() {
  return json::parse(R"({
    "model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"})");
}

// The built-in gpt of `madpipe train --model gpt` with its defaults on the Debian licenses
// (84 characters), in HF's GPT-2 terms.
json builtin_gpt_json(int layers = 4) {
  json j = json::parse(R"({
    "model_type": "gpt2", "vocab_size": 84, "n_embd": 64, "n_head": 4, "n_positions": 32,
    "n_inner": null, "tie_word_embeddings": false})");
  j["n_layer"] = layers;
  return j;
}

madpipe::DeviceSpec teraflop_device() {
  return madpipe::custom_device_spec(1e12, 1e11);  // 1 TFLOP/s, 100 GB/s
}

AnalyticOptions options(int seq, int micro_batch_size, Precision precision) {
  AnalyticOptions o;
  o.seq = seq;
  o.micro_batch_size = micro_batch_size;
  o.precision = precision;
  o.device = teraflop_device();
  o.name = "test";
  return o;
}

Error config_error(const json& j, const std::string& file = "config.json") {
  try {
    madpipe::decoder_config_from_json(j, file);
    ADD_FAILURE() << "accepted " << j.dump();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::Internal, "", "", "no error thrown");
}

std::string models_dir() { return std::string(MADPIPE_PROFILES_DIR) + "/../models"; }

}  // namespace

// ---- the Llama family --------------------------------------------------------------------

TEST(AnalyticProfile, SmallLlamaBytesByHand) {
  const DecoderConfig config = madpipe::decoder_config_from_json(small_llama_json());
  // 2 samples of 32 tokens: T = 64; bf16: 2 bytes; head_dim 64 / 4 = 16, so q is 64 wide and k,
  // v 2 * 16 = 32 wide.
  const Profile p = madpipe::analytic_profile(config, options(32, 2, Precision::Bf16));
  ASSERT_EQ(p.layers.size(), 4u);
  EXPECT_EQ(p.input_bytes, 64 * 8);  // int64 token ids
  expect_bytes(p.layers[0], "embed",
               {1000 * 64 * 2,          // the table
                64 * 64 * 2,            // T x h
                0, 0, 1000 * 64 * 2});  // the table's gradient
  const LayerBytes block = {
      2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176 + 2 * 64),  // q, k, v, o, MLP, norms
      64 * 64 * 2,
      2 * 64 * 4               // two fp32 rstd
          + 3 * 64 * 64 * 2    // norm outputs n1, n2 and the residual x1
          + 64 * 64 * 2        // q
          + 2 * 64 * 32 * 2    // k and v
          + 64 * 64 * 2        // attention output
          + 2 * 4 * 32 * 4     // logsumexp, b x H x s fp32
          + 3 * 64 * 176 * 2,  // gate, up, their product
      64 * 176 * 2, 3 * 64 * 176 * 2 + 64 * 176 * 2};
  expect_bytes(p.layers[1], "block0", block);
  expect_bytes(p.layers[2], "block1", block);
  expect_bytes(p.layers[3], "head",
               {64 * 2 + 1000 * 64 * 2,                    // norm weight, projection
                4,                                         // the loss
                64 * 4 + 64 * 64 * 2 + 64 * 1000 * 4 + 4,  // rstd, normed, fp32 log-probs, weight
                64 * 1000 * 2 + 64 * 1000 * 4,             // bf16 logits and their fp32 copy
                2 * 64 * 1000 * 4 - 4 - 64 * 64 * 2});     // two fp32 [T, V] gradients
}

TEST(AnalyticProfile, SmallLlamaInFp32) {
  const DecoderConfig config = madpipe::decoder_config_from_json(small_llama_json());
  const Profile p = madpipe::analytic_profile(config, options(16, 1, Precision::Fp32));
  EXPECT_EQ(p.dtype, "float32");
  EXPECT_EQ(p.layers[0].weight_bytes, 1000 * 64 * 4);
  EXPECT_EQ(p.layers[1].saved_bytes, 2 * 16 * 4 + 3 * 16 * 64 * 4 + 16 * 64 * 4 + 2 * 16 * 32 * 4 +
                                         16 * 64 * 4 + 1 * 4 * 16 * 4 + 3 * 16 * 176 * 4);
  // No fp32 copy of fp32 logits.
  EXPECT_EQ(p.layers[3].forward_workspace_bytes, 16 * 1000 * 4);
}

TEST(AnalyticProfile, SmallLlamaTimesFollowFlopsAndBytes) {
  const DecoderConfig config = madpipe::decoder_config_from_json(small_llama_json());
  const Profile p = madpipe::analytic_profile(config, options(32, 2, Precision::Bf16));
  // At efficiency 0.5 of 1 TFLOP/s and 100 GB/s, in ms.
  const double flops_per_ms = 0.5e9, bytes_per_ms = 0.5e8;
  const double matmul = 2.0 * 64 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176);
  const double attention = 2.0 * 2 * 32 * 32 * 64;  // causal: half of 4 b s^2 (H d)
  const double moved = 4 * 8192.0                   // two RMSNorms read and write T h
                       + 2 * 64 * (64 + 32) * 2.0   // rotary on q and k
                       + 2 * 64 * (64 + 32) * 2.0   // attention's reads and write
                       + 6 * 8192.0                 // two residual adds
                       + 3 * 64 * 176 * 2.0;        // SwiGLU
  EXPECT_DOUBLE_EQ(p.layers[1].forward_ms,
                   (matmul + attention) / flops_per_ms + moved / bytes_per_ms);
  EXPECT_DOUBLE_EQ(p.layers[1].backward_ms,
                   (2 * matmul + 2.5 * attention) / flops_per_ms + 2 * moved / bytes_per_ms);
  const double head_flops = 2.0 * 64 * 64 * 1000;
  const double head_moved = 2 * 8192.0 + 64 * 1000 * (2 + 4) + 2 * 64 * 1000 * 4.0;
  EXPECT_DOUBLE_EQ(p.layers[3].forward_ms, head_flops / flops_per_ms + head_moved / bytes_per_ms);
  EXPECT_DOUBLE_EQ(p.layers[3].backward_ms,
                   2 * head_flops / flops_per_ms + 2 * head_moved / bytes_per_ms);
  EXPECT_DOUBLE_EQ(p.layers[0].forward_ms, (64 * 8 + 2 * 8192.0) / bytes_per_ms);
  EXPECT_DOUBLE_EQ(p.layers[0].backward_ms,
                   (2 * (64 * 8 + 2 * 8192.0) + 1000 * 64 * 2) / bytes_per_ms);
}

TEST(AnalyticProfile, EfficiencyScalesTimesOnly) {
  const DecoderConfig config = madpipe::decoder_config_from_json(small_llama_json());
  AnalyticOptions half = options(32, 2, Precision::Bf16);
  AnalyticOptions quarter = half;
  quarter.efficiency = 0.25;
  const Profile a = madpipe::analytic_profile(config, half);
  const Profile b = madpipe::analytic_profile(config, quarter);
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_DOUBLE_EQ(b.layers[l].forward_ms, 2 * a.layers[l].forward_ms);
    EXPECT_DOUBLE_EQ(b.layers[l].backward_ms, 2 * a.layers[l].backward_ms);
    EXPECT_EQ(b.layers[l].saved_bytes, a.layers[l].saved_bytes);
  }
  EXPECT_NE(b.source.find("times at efficiency 0.25 of"), std::string::npos) << b.source;
}

TEST(AnalyticProfile, DescribesItself) {
  const DecoderConfig config = madpipe::decoder_config_from_json(small_llama_json());
  AnalyticOptions o = options(32, 2, Precision::Bf16);
  o.device = madpipe::device_preset("h100");
  const Profile p = madpipe::analytic_profile(config, o);
  EXPECT_EQ(p.name, "test");
  EXPECT_EQ(p.device, "NVIDIA H100 SXM 80GB (analytic model, not measured)");
  EXPECT_EQ(p.dtype, "bfloat16");
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.seq, 32);
  EXPECT_NE(p.source.find("Llama-family"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("of 989 TFLOP/s (dense bf16) and 3.35 TB/s"), std::string::npos)
      << p.source;
  o.device = teraflop_device();
  EXPECT_EQ(madpipe::analytic_profile(config, o).device,
            "custom device: 1 TFLOP/s, 100 GB/s (analytic model, not measured)");
}

TEST(AnalyticProfile, RoundTripsThroughTheProfileFormat) {
  const DecoderConfig config = madpipe::decoder_config_from_json(small_llama_json());
  const Profile p = madpipe::analytic_profile(config, options(32, 2, Precision::Bf16));
  EXPECT_EQ(madpipe::profile_from_json(madpipe::profile_to_json(p)), p);
}

TEST(AnalyticProfile, GroupedQueryHeadsAndBiases) {
  json j = small_llama_json();
  j["model_type"] = "qwen2";  // query, key and value biases
  const Profile qwen = madpipe::analytic_profile(madpipe::decoder_config_from_json(j),
                                                 options(8, 1, Precision::Bf16));
  EXPECT_EQ(qwen.layers[1].weight_bytes,
            2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176 + 2 * 64 + (64 + 2 * 32)));
  j = small_llama_json();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const Profile biased = madpipe::analytic_profile(madpipe::decoder_config_from_json(j),
                                                   options(8, 1, Precision::Bf16));
  EXPECT_EQ(biased.layers[1].weight_bytes, 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176 +
                                                2 * 64 + (64 + 2 * 32 + 64) + (2 * 176 + 64)));
}

// ---- GPT-2: the built-in gpt ------------------------------------------------------------

// The built-in gpt with its defaults (width 64, 4 heads, context 32, 84 characters, micro-batches
// of 8), fp32: every byte field equals what `madpipe profile --model gpt --device cpu` measured
// (docs/cli.md), here written out from the shapes. T = 256 tokens, one activation A = T h 4 =
// 65536 bytes, the probabilities b H s^2 4 = 131072 bytes.
TEST(AnalyticProfile, BuiltinGptBytesByHand) {
  const DecoderConfig config = madpipe::decoder_config_from_json(builtin_gpt_json());
  const Profile p = madpipe::analytic_profile(config, options(32, 8, Precision::Fp32));
  ASSERT_EQ(p.layers.size(), 6u);
  EXPECT_EQ(p.input_bytes, 256 * 8);
  expect_bytes(p.layers[0], "embed",
               {(84 + 32) * 64 * 4,           // token and position tables: 29696 measured
                256 * 64 * 4,                 // 65536
                32 * 8,                       // the position ids: 256
                256 * 64 * 4 + 32 * 64 * 4,   // both lookups: 73728
                32 * 64 * 4 + 84 * 64 * 4});  // 29696
  const LayerBytes block = {
      4 * (2 * 2 * 64 + 64 * 3 * 64 + 3 * 64 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64),
      256 * 64 * 4,
      2 * 2 * 256 * 4            // mean and rstd of both LayerNorms
          + 7 * 256 * 64 * 4     // ln1 out, q, k, v copies, heads' output, residual, ln2 out
          + 2 * 256 * 256 * 4    // fc1 out, GELU out
          + 8 * 4 * 32 * 32 * 4  // softmax probabilities
          + 32 * 32,             // the bool mask: 1119232 measured
      4 * 256 * 64 * 4 + 8 * 4 * 32 * 32 * 4,        // qkv, masked scores, fc2 out: 393216
      256 * 256 * 4 + 256 * 64 * 4 - 256 * 64 * 4};  // fc2's input and weight gradients: 262144
  for (int l = 1; l <= 4; ++l) expect_bytes(p.layers[l], "block" + std::to_string(l - 1), block);
  expect_bytes(p.layers[5], "head",
               {2 * 64 * 4 + 84 * 64 * 4 + 84 * 4,              // 22352
                4,                                              //
                2 * 256 * 4 + 256 * 64 * 4 + 256 * 84 * 4 + 4,  // 153604
                256 * 84 * 4,                                   // 86016
                2 * 256 * 84 * 4 - 4 - 256 * 64 * 4});          // 106492
  EXPECT_EQ(p.layers[1].weight_bytes, 199936);
  EXPECT_EQ(p.layers[1].saved_bytes, 1119232);
}

// Width 32, 2 heads, context 256, 2 samples: the attention's backward is the highest point
// (measured 1372160): the gradients of the probabilities and of the scores, 2 b H s^2 4, once
// fc1's and GELU's outputs (2 T i 4), ln2's input and output (2 A) and statistics are freed,
// less the input's gradient A.
TEST(AnalyticProfile, BuiltinGptLongSequenceBackward) {
  json j = builtin_gpt_json(1);
  j["n_embd"] = 32;
  j["n_head"] = 2;
  j["n_positions"] = 256;
  const Profile p = madpipe::analytic_profile(madpipe::decoder_config_from_json(j),
                                              options(256, 2, Precision::Fp32));
  EXPECT_EQ(p.layers[1].saved_bytes, 2105344);
  EXPECT_EQ(p.layers[1].forward_workspace_bytes, 1310720);
  EXPECT_EQ(p.layers[1].backward_workspace_bytes, 2 * 2 * 2 * 256 * 256 * 4 - 2 * 512 * 128 * 4 -
                                                      2 * 512 * 32 * 4 - 2 * 512 * 4 -
                                                      512 * 32 * 4);
  EXPECT_EQ(p.layers[1].backward_workspace_bytes, 1372160);
  EXPECT_EQ(p.layers[0].backward_workspace_bytes, 256 * 32 * 4 + 256 * 32 * 4);  // 65536
  EXPECT_EQ(p.layers[2].backward_workspace_bytes, 278524);
}

TEST(AnalyticProfile, Gpt2FollowsTheConfigsTying) {
  json j = builtin_gpt_json(1);
  j.erase("tie_word_embeddings");  // GPT-2's default: tied
  const DecoderConfig tied = madpipe::decoder_config_from_json(j);
  EXPECT_TRUE(tied.tied_embeddings);
  const DecoderConfig untied = madpipe::decoder_config_from_json(builtin_gpt_json(1));
  EXPECT_FALSE(untied.tied_embeddings);
  // Both layers count the shared token matrix (V h e: 84 x 64 x 4 bytes in fp32), which the
  // tied profile names once; the position table and the head's bias are not shared.
  Profile tied_profile = madpipe::analytic_profile(tied, options(32, 8, Precision::Fp32));
  const Profile untied_profile = madpipe::analytic_profile(untied, options(32, 8, Precision::Fp32));
  ASSERT_EQ(tied_profile.tied_weights.size(), 1u);
  EXPECT_EQ(tied_profile.tied_weights[0].layers, (std::vector<int>{0, 2}));
  EXPECT_EQ(tied_profile.tied_weights[0].bytes, 84 * 64 * 4);
  EXPECT_TRUE(untied_profile.tied_weights.empty());
  tied_profile.tied_weights.clear();
  EXPECT_EQ(tied_profile, untied_profile);
}

TEST(AnalyticProfile, Gpt2SequenceMustFitThePositionTable) {
  const DecoderConfig config = madpipe::decoder_config_from_json(builtin_gpt_json(1));
  try {
    madpipe::analytic_profile(config, options(33, 1, Precision::Fp32));
    ADD_FAILURE() << "accepted seq 33 with 32 positions";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "seq");
    EXPECT_NE(e.problem().find("n_positions (32)"), std::string::npos) << e.problem();
  }
}

TEST(AnalyticProfile, RefusesBadOptions) {
  const DecoderConfig config = madpipe::decoder_config_from_json(small_llama_json());
  const std::vector<std::pair<std::function<void(AnalyticOptions&)>, std::string>> cases = {
      {[](AnalyticOptions& o) { o.seq = 0; }, "seq"},
      {[](AnalyticOptions& o) { o.micro_batch_size = 0; }, "micro_batch_size"},
      {[](AnalyticOptions& o) { o.efficiency = 0; }, "efficiency"},
      {[](AnalyticOptions& o) { o.efficiency = 1.5; }, "efficiency"},
      {[](AnalyticOptions& o) { o.device = madpipe::DeviceSpec{}; }, "device"},
  };
  for (const auto& [change, field] : cases) {
    AnalyticOptions o = options(32, 2, Precision::Bf16);
    change(o);
    try {
      madpipe::analytic_profile(config, o);
      ADD_FAILURE() << "accepted bad " << field;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
      EXPECT_EQ(e.field(), field);
    }
  }
}

TEST(AnalyticProfile, RefusesByteCountsBeyondTwoPow62) {
  json j = small_llama_json();
  j["vocab_size"] = 2'000'000'000;
  j["hidden_size"] = 2'000'000'000;
  j["num_attention_heads"] = 1;
  j["num_key_value_heads"] = 1;
  try {
    madpipe::analytic_profile(madpipe::decoder_config_from_json(j),
                              options(1024, 1024, Precision::Fp32));
    ADD_FAILURE() << "accepted a table of 4e18 elements";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
    EXPECT_NE(e.problem().find("2^62"), std::string::npos) << e.problem();
  }
}

// ---- shipped configs ---------------------------------------------------------------------

std::int64_t total_weight_bytes(const Profile& p) {
  std::int64_t total = 0;
  for (const Layer& layer : p.layers) total += layer.weight_bytes;
  return total;
}

TEST(AnalyticProfile, ShippedConfigsHaveTheirModelsParameters) {
  AnalyticOptions o = options(4096, 1, Precision::Bf16);
  const DecoderConfig llama8 = madpipe::read_decoder_config(models_dir() + "/llama3-8b.json");
  EXPECT_EQ(llama8.kv_heads, 8);
  EXPECT_EQ(llama8.head_dim, 128);
  EXPECT_FALSE(llama8.tied_embeddings);
  Profile p = madpipe::analytic_profile(llama8, o);
  EXPECT_EQ(p.layers.size(), 34u);
  EXPECT_EQ(total_weight_bytes(p), 2 * 8'030'261'248);  // Llama 3 8B's parameters
  const DecoderConfig llama70 = madpipe::read_decoder_config(models_dir() + "/llama3-70b.json");
  EXPECT_EQ(total_weight_bytes(madpipe::analytic_profile(llama70, o)), 2 * 70'553'706'496);
  const DecoderConfig gemma = madpipe::read_decoder_config(models_dir() + "/gemma-7b.json");
  EXPECT_TRUE(gemma.tied_embeddings);
  EXPECT_EQ(gemma.head_dim, 256);
  // 8,537,680,896 parameters: the layers' weight bytes count the tied matrix in the embedding
  // and in the head, the chain as a whole once.
  const Profile gemma_profile = madpipe::analytic_profile(gemma, o);
  EXPECT_EQ(total_weight_bytes(gemma_profile), 2 * (8'537'680'896 + 256'000 * 3072));
  ASSERT_EQ(gemma_profile.tied_weights.size(), 1u);
  EXPECT_EQ(gemma_profile.tied_weights[0].bytes, 2 * 256'000 * 3072);
  const int last = static_cast<int>(gemma_profile.layers.size()) - 1;
  EXPECT_EQ(madpipe::ChainCosts(gemma_profile).weight_bytes(0, last), 2 * 8'537'680'896);
  const DecoderConfig gpt = madpipe::read_decoder_config(models_dir() + "/builtin-gpt.json");
  EXPECT_EQ(gpt.architecture, DecoderArchitecture::Gpt2);
  EXPECT_EQ(gpt.layers, 4);
}

// ---- reading configs ---------------------------------------------------------------------

TEST(DecoderConfig, ReadsLlamaDefaults) {
  json j = small_llama_json();
  j.erase("num_key_value_heads");
  j.erase("model_type");  // Llama's keys without a type: a Llama
  const DecoderConfig c = madpipe::decoder_config_from_json(j);
  EXPECT_EQ(c.architecture, DecoderArchitecture::Llama);
  EXPECT_EQ(c.model_type, "");
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias || c.output_bias || c.mlp_bias);
  j["num_key_value_heads"] = nullptr;  // null: the default
  j["head_dim"] = 32;                  // given: need not divide the width
  j["hidden_size"] = 66;
  const DecoderConfig given = madpipe::decoder_config_from_json(j);
  EXPECT_EQ(given.kv_heads, 4);
  EXPECT_EQ(given.head_dim, 32);
}

TEST(DecoderConfig, ReadsEachLlamaFamilyType) {
  for (const char* type : {"llama", "mistral", "qwen2", "gemma"}) {
    json j = small_llama_json();
    j["model_type"] = type;
    const DecoderConfig c = madpipe::decoder_config_from_json(j);
    EXPECT_EQ(c.architecture, DecoderArchitecture::Llama) << type;
    EXPECT_EQ(c.model_type, type);
    EXPECT_EQ(c.tied_embeddings, std::string(type) == "gemma") << type;
    EXPECT_EQ(c.qkv_bias, std::string(type) == "qwen2") << type;
  }
}

TEST(DecoderConfig, ReadsGpt2) {
  json j = builtin_gpt_json();
  j["n_inner"] = 100;
  const DecoderConfig c = madpipe::decoder_config_from_json(j);
  EXPECT_EQ(c.architecture, DecoderArchitecture::Gpt2);
  EXPECT_EQ(c.intermediate_size, 100);
  EXPECT_EQ(c.positions, 32);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_TRUE(c.qkv_bias && c.output_bias && c.mlp_bias);
  j.erase("n_inner");
  EXPECT_EQ(madpipe::decoder_config_from_json(j).intermediate_size, 256);
}

TEST(DecoderConfig, NamesFileAndFieldOfEachProblem) {
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    const char* field;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {"not an object", [](json& j) { j = json::array(); }, "", "must be a JSON object, got array"},
      {"missing field", [](json& j) { j.erase("intermediate_size"); }, "/intermediate_size",
       "missing required field"},
      {"wrong type", [](json& j) { j["hidden_size"] = "64"; }, "/hidden_size",
       "must be an integer >= 1, got string"},
      {"fraction", [](json& j) { j["num_hidden_layers"] = 2.5; }, "/num_hidden_layers",
       "must be an integer >= 1, got 2.5"},
      {"zero heads", [](json& j) { j["num_attention_heads"] = 0; }, "/num_attention_heads",
       "must be an integer >= 1, got 0"},
      {"too many blocks", [](json& j) { j["num_hidden_layers"] = 1'000'000; }, "/num_hidden_layers",
       "must be at most 999998 (a profile holds at most 1000000 layers), got 1000000"},
      {"width not divisible", [](json& j) { j["hidden_size"] = 66; }, "/hidden_size",
       "must be a multiple of num_attention_heads (4) when head_dim is not given, got 66"},
      {"kv heads not dividing", [](json& j) { j["num_key_value_heads"] = 3; },
       "/num_key_value_heads", "must divide num_attention_heads (4), got 3"},
      {"tie not a bool", [](json& j) { j["tie_word_embeddings"] = 1; }, "/tie_word_embeddings",
       "must be true or false, got number"},
      {"model type number", [](json& j) { j["model_type"] = 7; }, "/model_type",
       "must be a string, got number"},
      {"unknown model type", [](json& j) { j["model_type"] = "bert"; }, "/model_type",
       "unknown model type \"bert\" (supported: llama, mistral, qwen2, gemma, gpt2)"},
      {"no type, no Llama keys",
       [](json& j) {
         j.erase("model_type");
         j.erase("hidden_size");
       },
       "/model_type", "missing, and no Llama-style hidden_size either (supported: llama"},
      {"gpt2 without its keys", [](json& j) { j["model_type"] = "gpt2"; }, "/n_embd",
       "missing required field"},
  };
  for (const Case& c : cases) {
    json j = small_llama_json();
    c.mutate(j);
    const Error e = config_error(j, "cfg.json");
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput) << c.what;
    EXPECT_EQ(e.file(), "cfg.json") << c.what;
    EXPECT_EQ(e.field(), c.field) << c.what;
    EXPECT_NE(e.problem().find(c.problem), std::string::npos)
        << c.what << ": got '" << e.problem() << "'";
  }
  json gpt = builtin_gpt_json();
  gpt["n_embd"] = 66;
  const Error e = config_error(gpt, "gpt.json");
  EXPECT_EQ(e.field(), "/n_embd");
  EXPECT_EQ(e.problem(), "must be a multiple of n_head (4), got 66");
}

TEST(DecoderConfig, ReadsAFileAndNamesIt) {
  const fs::path dir = fs::temp_directory_path() /
                       ("madpipe_decoder_config_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  json j = small_llama_json();
  j["vocab_size"] = -1;
  std::ofstream(path) << j.dump();
  try {
    madpipe::read_decoder_config(path);
    ADD_FAILURE() << "accepted vocab_size -1";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": /vocab_size: must be an integer >= 1, got -1");
  }
  fs::remove_all(dir);
  EXPECT_THROW(madpipe::read_decoder_config(path), Error);  // gone: an I/O error
}

// ---- devices -----------------------------------------------------------------------------

TEST(DeviceSpec, PresetsHaveTheirDatasheetRates) {
  const madpipe::DeviceSpec h100 = madpipe::device_preset("H100");
  EXPECT_EQ(h100.name, "h100");
  EXPECT_DOUBLE_EQ(h100.peak_flops(Precision::Bf16), 989e12);
  EXPECT_DOUBLE_EQ(h100.peak_flops(Precision::Fp16), 989e12);
  EXPECT_DOUBLE_EQ(h100.peak_flops(Precision::Fp32), 67e12);
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth, 3.35e12);
  EXPECT_DOUBLE_EQ(madpipe::device_preset("h200").memory_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(madpipe::device_preset("a100").matrix_flops, 312e12);
  EXPECT_DOUBLE_EQ(madpipe::device_preset("b200").matrix_flops, 2.25e15);
  EXPECT_DOUBLE_EQ(madpipe::device_preset("mi300x").fp32_flops, 163.4e12);
  EXPECT_DOUBLE_EQ(madpipe::device_preset("l40s").memory_bandwidth, 0.864e12);
  for (const madpipe::DeviceSpec& spec : madpipe::device_presets()) {
    EXPECT_GT(spec.matrix_flops, spec.fp32_flops) << spec.name;
    EXPECT_GT(spec.memory_bytes, 0) << spec.name;
  }
  EXPECT_EQ(madpipe::device_preset_names(), "h100, h200, a100, b200, mi300x, l40s");
}

TEST(DeviceSpec, UnknownPresetListsThePresets) {
  try {
    madpipe::device_preset("v100", "--device-spec");
    ADD_FAILURE() << "accepted v100";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "--device-spec");
    EXPECT_NE(e.problem().find("unknown device 'v100' (presets: h100, h200"), std::string::npos)
        << e.problem();
  }
}

TEST(DeviceSpec, CustomRates) {
  const madpipe::DeviceSpec spec = madpipe::custom_device_spec(2e12, 5e10);
  EXPECT_EQ(spec.name, "custom");
  EXPECT_DOUBLE_EQ(spec.peak_flops(Precision::Fp32), 2e12);
  EXPECT_DOUBLE_EQ(spec.peak_flops(Precision::Bf16), 2e12);
  EXPECT_DOUBLE_EQ(spec.memory_bandwidth, 5e10);
  EXPECT_THROW(madpipe::custom_device_spec(0, 1), Error);
  EXPECT_THROW(madpipe::custom_device_spec(1, -1), Error);
}

TEST(ParseFlops, ReadsRatesWithPrefixes) {
  EXPECT_DOUBLE_EQ(madpipe::parse_flops("989T"), 989e12);
  EXPECT_DOUBLE_EQ(madpipe::parse_flops("989e12"), 989e12);
  EXPECT_DOUBLE_EQ(madpipe::parse_flops("67 TFLOP/s"), 67e12);
  EXPECT_DOUBLE_EQ(madpipe::parse_flops("2.25PFLOPS"), 2.25e15);
  EXPECT_DOUBLE_EQ(madpipe::parse_flops("50 GFLOPS"), 50e9);
  EXPECT_DOUBLE_EQ(madpipe::parse_flops("1e9 flop/s"), 1e9);
  EXPECT_DOUBLE_EQ(madpipe::parse_bandwidth("3.35TB/s") * 1000, 3.35e12);
  for (const char* bad : {"", "abc", "989X", "5 GB/s", "-1T", "0", "inf"}) {
    try {
      madpipe::parse_flops(bad, "--peak-flops");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "--peak-flops") << bad;
    }
  }
}

TEST(FormatRate, ThreeSignificantDigits) {
  EXPECT_EQ(madpipe::format_rate(989e12, "FLOP/s"), "989 TFLOP/s");
  EXPECT_EQ(madpipe::format_rate(2.25e15, "FLOP/s"), "2.25 PFLOP/s");
  EXPECT_EQ(madpipe::format_rate(19.5e12, "FLOP/s"), "19.5 TFLOP/s");
  EXPECT_EQ(madpipe::format_rate(1.2e9, "FLOP/s"), "1.2 GFLOP/s");
  EXPECT_EQ(madpipe::format_rate(3.35e12, "B/s"), "3.35 TB/s");
  EXPECT_EQ(madpipe::format_rate(864e9, "B/s"), "864 GB/s");
  EXPECT_EQ(madpipe::format_rate(500, "B/s"), "500 B/s");
}
