// The readers of a Hugging Face folder under hostile input (#31's fuzz targets): seeded mutation
// loops over the safetensors reader (a file's bytes flipped, cut short, grown) and the config
// readers (fields replaced by values of every JSON kind, removed, or the text's bytes flipped).
// Each input is read or refused with a UsageError naming the file (or the field): never another
// error, a crash, a hang or an allocation the file's size does not justify. And the file reader
// reads what the writer wrote, bitwise, as the in-memory reader does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "checkpoint/hf_folder.h"
#include "models/hf_llama.h"
#include "models/hf_model.h"
#include "models/llama.h"
#include "serialize/safetensors.h"
#include "util/error.h"

using namespace ddptrain;
namespace fs = std::filesystem;

namespace {

std::string readers_dir(const std::string& name) {
  const std::string d = testing::TempDir() + name + "_" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void readers_put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A safetensors file of `header` (padded to 8 bytes, its length before it, little-endian) and
// the data bytes after it, as a test writes one its writer would not.
std::string safetensors_file_bytes(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return length + header + data;
}

NamedTensors varied_tensors() {
  return {{"a.weight", at::randn({3, 5})},
          {"b.bias", at::randn({7}).to(at::kBFloat16)},
          {"c.half", at::randn({2, 2, 2}).to(at::kHalf)},
          {"d.ids", at::arange(6, at::kLong).reshape({2, 3})},
          {"e.empty", at::empty({0, 4})},
          {"f.flag", at::ones({3}, at::kBool)}};
}

}  // namespace

TEST(HfReaders, TheFileReaderReadsWhatTheWriterWroteAsTheInMemoryReaderDoes) {
  const std::string dir = readers_dir("st_roundtrip");
  const NamedTensors tensors = varied_tensors();
  const std::string bytes = safetensors_bytes(tensors, {{"format", "pt"}});
  readers_put(dir + "/m.safetensors", bytes);
  const SafetensorsFile file(dir + "/m.safetensors");
  const NamedTensors in_memory = read_safetensors(bytes, "bytes");
  ASSERT_EQ(file.entries().size(), tensors.size());
  ASSERT_EQ(in_memory.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor t = file.read(file.entries()[i]);
    EXPECT_EQ(file.entries()[i].name, tensors[i].first);  // the writer sorts; these are sorted already
    EXPECT_EQ(t.scalar_type(), tensors[i].second.scalar_type()) << tensors[i].first;
    EXPECT_TRUE(t.equal(tensors[i].second)) << tensors[i].first;
    EXPECT_TRUE(in_memory[i].second.equal(t)) << tensors[i].first;
  }
  // A header claiming a tensor of 2^80 bytes is refused before anything is allocated.
  readers_put(
      dir + "/huge.safetensors",
      safetensors_file_bytes(
          R"({"x":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})", "abcd"));
  try {
    SafetensorsFile bad(dir + "/huge.safetensors");
    ADD_FAILURE() << "accepted a shape of 2^80 bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'x' has a shape that is not one"), std::string::npos)
        << e.what();
  }
  // What safetensors' own reader refuses: a shape or offsets that are not lists (nlohmann would
  // iterate a number or an object as one), metadata that is not an object of strings.
  const auto refusal = [&](const std::string& header) {
    readers_put(dir + "/odd.safetensors", safetensors_file_bytes(header, "abcd"));
    try {
      SafetensorsFile odd(dir + "/odd.safetensors");
      return std::string("accepted");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(refusal(R"({"x":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})")
                .find("tensor 'x' is {\"data_offsets\":[0,4],\"dtype\":\"F32\",\"shape\":1}, not an object"),
            std::string::npos);
  EXPECT_NE(
      refusal(R"({"x":{"dtype":"F32","shape":{"n":1},"data_offsets":[0,4]}})").find("not an object with a"),
      std::string::npos);
  EXPECT_NE(refusal(R"({"__metadata__":{"format":5},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})")
                .find("__metadata__ is {\"format\":5}, not an object of strings"),
            std::string::npos);
  EXPECT_EQ(
      refusal(R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"),
      "accepted");
}

TEST(HfReaders, MutatedSafetensorsAreReadOrRefusedNamingTheFile) {
  const std::string dir = readers_dir("st_fuzz");
  at::manual_seed(1);
  const std::string seed = safetensors_bytes(varied_tensors(), {{"format", "pt"}});
  const uint64_t header_end = 8 + static_cast<uint8_t>(seed[0]) + 256u * static_cast<uint8_t>(seed[1]);
  std::mt19937 rng(20261204);
  int read = 0, refused = 0;
  for (int round = 0; round < 800; ++round) {
    std::string bytes = seed;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const uint32_t kind = rng() % 5;
      if (kind <= 2 && !bytes.empty()) {  // a byte: of the length (0), of the header (1), anywhere (2)
        const size_t span = kind == 0 ? 8 : kind == 1 ? header_end : bytes.size();
        bytes[rng() % std::min(span, bytes.size())] =
            static_cast<char>(kind == 1 ? "{}[]\":,0129-e. "[rng() % 15] : rng());
      } else if (kind == 3) {
        bytes.resize(rng() % (bytes.size() + 1));
      } else {
        bytes.append(rng() % 17, static_cast<char>(rng()));
      }
    }
    const std::string folder = dir + "/f" + std::to_string(round % 5);
    fs::create_directories(folder);
    readers_put(folder + "/config.json", "{}");
    readers_put(folder + "/model.safetensors", bytes);
    try {
      const NamedTensors got = read_hf_tensors(folder);
      for (const auto& [name, t] : got) EXPECT_TRUE(t.defined()) << name;
      ++read;
    } catch (const UsageError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(folder + "/model.safetensors"), std::string::npos)
          << "round " << round << ": " << e.what();
    }
  }
  std::printf("800 mutated safetensors files: %d read, %d refused naming the file\n", read, refused);
  EXPECT_GT(read, 0);
  EXPECT_GT(refused, 0);
}

TEST(HfReaders, MutatedConfigsApplyOrAreRefusedNamingTheField) {
  const std::string dir = readers_dir("config_fuzz");
  LlamaConfig c;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 32, c.intermediate_size = 48;
  const nlohmann::json llama = nlohmann::json::parse(hf_llama_config_json(c));
  c.attention_bias = AttentionBias::kQkv;
  const nlohmann::json qwen2 = nlohmann::json::parse(hf_llama_config_json(c));
  const nlohmann::json gpt2 = {{"model_type", "gpt2"},
                               {"n_layer", 2},
                               {"n_head", 2},
                               {"n_embd", 32},
                               {"n_positions", 16},
                               {"vocab_size", 96},
                               {"activation_function", "gelu_new"}};
  const std::vector<nlohmann::json> seeds = {llama, qwen2, gpt2};
  const std::vector<nlohmann::json> values = {nullptr,
                                              true,
                                              false,
                                              0,
                                              -1,
                                              1,
                                              7,
                                              4096,
                                              2147483648LL,
                                              -2147483649LL,
                                              18446744073709551615ULL,
                                              1e30,
                                              -0.5,
                                              2.0,
                                              1e-300,
                                              "llama",
                                              "",
                                              "silu",
                                              nlohmann::json::array(),
                                              nlohmann::json::object(),
                                              {{"rope_type", "yarn"}},
                                              {{"rope_theta", "x"}},
                                              {1, 2}};
  std::mt19937 rng(20261205);
  int applied = 0, refused = 0;
  for (int round = 0; round < 1500; ++round) {
    nlohmann::json config = seeds[static_cast<size_t>(round) % seeds.size()];
    std::vector<std::string> keys;
    for (const auto& [k, v] : config.items()) keys.push_back(k);
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::string& key = keys[rng() % keys.size()];
      if (rng() % 6 == 0)
        config.erase(key);
      else
        config[key] = values[rng() % values.size()];
    }
    std::string text = config.dump();
    if (round % 4 == 3) text[rng() % text.size()] = "{}[]\":,0 x"[rng() % 10];  // the text itself
    const std::string folder = dir + "/c" + std::to_string(round % 5);
    fs::create_directories(folder);
    readers_put(folder + "/config.json", text);
    ModelOptions o;
    try {
      apply_hf_config(read_hf_config(folder), folder + "/config.json", o);
      EXPECT_TRUE(o.n_layer >= 1 && o.n_head >= 1 && o.n_embd >= 1 && o.vocab_size >= 1) << text;
      if (o.model == ModelKind::kLlama) {
        EXPECT_TRUE(o.n_kv_head >= 1 && o.intermediate_size >= 1 && o.max_positions >= 1) << text;
        EXPECT_EQ(int64_t{o.n_embd} % o.n_head, 0) << text;
      }
      ++applied;
    } catch (const UsageError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(folder + "/config.json"), std::string::npos)
          << "round " << round << ": " << e.what();
    }
  }
  std::printf("1500 mutated configs: %d applied, %d refused naming the file\n", applied, refused);
  EXPECT_GT(applied, 0);
  EXPECT_GT(refused, 0);
}

// config.json read as transformers reads it, without transformers: each family's defaults for
// what a file leaves out, sliding windows (Mistral's caps the model's positions; Qwen2's only
// when some layer slides), where rope_theta comes from, and the token ids.
TEST(HfReaders, LlamaFamilyConfigsAreReadAsTransformersReadsThem) {
  const auto read = [](const nlohmann::json& c, int block_size = 0) {
    ModelOptions o;
    o.block_size = block_size;
    apply_hf_config(c, "config.json", o);
    return o;
  };
  const auto refusal = [&](const nlohmann::json& c, int block_size = 0) {
    try {
      read(c, block_size);
      return std::string();
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
  };
  ModelOptions o = read({{"model_type", "mistral"}});
  EXPECT_EQ(o.n_kv_head, 8);  // MistralConfig's default, not num_attention_heads
  EXPECT_EQ(o.intermediate_size, 14336);
  EXPECT_EQ(o.max_positions, 131072);  // kept for an export; the default window of 4,096 is the block
  EXPECT_EQ(o.block_size, 4096);
  EXPECT_EQ(o.sliding_window, 4096);
  o = read({{"model_type", "qwen2"}});
  EXPECT_EQ(o.vocab_size, 151936);
  EXPECT_EQ(o.n_kv_head, 32);
  EXPECT_EQ(o.max_positions, 32768);
  EXPECT_EQ(o.attention_bias, AttentionBias::kQkv);
  o = read({{"model_type", "llama"}, {"num_attention_heads", 8}});
  EXPECT_EQ(o.n_kv_head, 8);     // Llama's: num_attention_heads
  EXPECT_EQ(o.bos_token_id, 1);  // LlamaConfig's 1 and 2; Qwen2Config's none
  EXPECT_EQ(o.eos_token_id, 2);
  EXPECT_EQ(read({{"model_type", "qwen2"}}).eos_token_id, -1);
  // null is not left out: no window (Mistral-7B-v0.2's config), one key/value head per query head.
  o = read({{"model_type", "mistral"}, {"sliding_window", nullptr}, {"max_position_embeddings", 32768}});
  EXPECT_EQ(o.max_positions, 32768);
  EXPECT_EQ(read({{"model_type", "qwen2"},
                  {"num_key_value_heads", nullptr},
                  {"num_attention_heads", 4},
                  {"hidden_size", 32}})
                .n_kv_head,
            4);
  // Mistral's window: within it, any block; beyond it, refused naming it.
  const nlohmann::json mistral = {{"model_type", "mistral"},  {"max_position_embeddings", 16},
                                  {"sliding_window", 8},      {"hidden_size", 32},
                                  {"num_attention_heads", 4}, {"vocab_size", 96}};
  EXPECT_EQ(read(mistral).max_positions, 16);
  EXPECT_EQ(read(mistral).block_size, 8);
  EXPECT_EQ(read(mistral, 4).block_size, 4);
  EXPECT_NE(refusal(mistral, 16).find("sliding_window 8 is shorter than the training window 16"),
            std::string::npos);
  // Qwen2's window: used only for the layers from max_window_layers on.
  nlohmann::json qwen2 = {
      {"model_type", "qwen2"}, {"max_position_embeddings", 16}, {"use_sliding_window", true},
      {"sliding_window", 8},   {"num_hidden_layers", 2},        {"max_window_layers", 28},
      {"hidden_size", 32},     {"num_attention_heads", 4},      {"vocab_size", 96}};
  EXPECT_EQ(read(qwen2).block_size, 16);
  EXPECT_EQ(read(qwen2).sliding_window, 0);
  {  // a window the config does not have contradicts it (an export would slide every layer)
    ModelOptions windowed;
    windowed.sliding_window = 8;
    EXPECT_THROW(apply_hf_config(qwen2, "config.json", windowed), OptionError);
  }
  qwen2["max_window_layers"] = 1;
  o = read(qwen2);
  EXPECT_EQ(o.block_size, 8);
  EXPECT_EQ(o.max_positions, 16);
  EXPECT_EQ(o.sliding_window, 8);
  EXPECT_EQ(o.max_window_layers, 1);
  qwen2["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_EQ(read(qwen2).block_size, 16);
  EXPECT_EQ(read(qwen2).sliding_window, 0);
  qwen2["layer_types"] = {"sliding_attention", "sliding_attention"};  // layer_types over max_window_layers
  EXPECT_EQ(read(qwen2).max_window_layers, 0);
  qwen2["layer_types"] = {"sliding_attention", "full_attention"};  // no first sliding layer says it
  EXPECT_NE(refusal(qwen2).find("layer_types: layer 0 slides before a layer with full attention"),
            std::string::npos)
      << refusal(qwen2);
  // rope_theta: the rope_scaling object as a whole over rope_parameters, then the top level.
  nlohmann::json rope = {{"model_type", "llama"}, {"rope_theta", 1.0e4}};
  EXPECT_EQ(read(rope).rope_theta, 1.0e4);
  rope["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5.0e5}};
  EXPECT_EQ(read(rope).rope_theta, 5.0e5);
  rope["rope_scaling"] = {{"rope_type", "default"}, {"rope_theta", 2.0e5}};
  EXPECT_EQ(read(rope).rope_theta, 2.0e5);
  rope["rope_scaling"] = {{"rope_type", "default"}};  // without a base: the top level's, not rope_parameters'
  EXPECT_EQ(read(rope).rope_theta, 1.0e4);
  rope["rope_scaling"] = nlohmann::json::object();  // empty: rope_parameters
  EXPECT_EQ(read(rope).rope_theta, 5.0e5);
  rope["rope_parameters"] = {{"full_attention", {{"rope_theta", 1.0}}}};
  EXPECT_NE(refusal(rope).find("rope_parameters per layer type ('full_attention')"), std::string::npos);
  EXPECT_NE(refusal({{"model_type", "llama"}, {"partial_rotary_factor", 0.5}})
                .find("partial_rotary_factor 0.5 (a partial rotation)"),
            std::string::npos);
  // Token ids: of Llama 3.1's list of eos ids, eos_token_id is the first and eos_token_ids all; a
  // pad id outside the vocabulary is named.
  o = read({{"model_type", "llama"},
            {"vocab_size", 300},
            {"bos_token_id", 1},
            {"eos_token_id", {2, 7}},
            {"pad_token_id", 0}});
  EXPECT_EQ(o.bos_token_id, 1);
  EXPECT_EQ(o.eos_token_id, 2);
  EXPECT_EQ(o.eos_token_ids, "2,7") << "the whole list, for the export";
  EXPECT_EQ(o.pad_token_id, 0);
  // ... and the export says them all (generate() stops at each: Llama 3 Instruct's <|eot_id|> is
  // its list's last); a single id stays a number.
  EXPECT_EQ(nlohmann::json::parse(hf_config_json(o, "float32")).at("eos_token_id"), nlohmann::json({2, 7}));
  o.eos_token_ids.clear();
  EXPECT_EQ(nlohmann::json::parse(hf_config_json(o, "float32")).at("eos_token_id"), 2);
  EXPECT_NE(refusal({{"model_type", "llama"}, {"vocab_size", 300}, {"pad_token_id", 300}})
                .find("pad_token_id 300 (not a token of the 300-token vocabulary)"),
            std::string::npos);
  // pad -1 is the last row, as nn.Embedding(padding_idx=-1) takes it; null is none.
  EXPECT_EQ(read({{"model_type", "llama"}, {"vocab_size", 300}, {"pad_token_id", -1}}).pad_token_id, 299);
  EXPECT_EQ(read({{"model_type", "llama"}, {"vocab_size", 300}, {"pad_token_id", nullptr}}).pad_token_id, -1);
  // GPT-2's ids: GPT2Config's 50256 where left out, as transformers' config object has it (in a
  // smaller vocabulary too: kept for the export).
  o = read({{"model_type", "gpt2"}});
  EXPECT_EQ(o.bos_token_id, 50256);
  EXPECT_EQ(o.eos_token_id, 50256);
  o = read({{"model_type", "gpt2"}, {"vocab_size", 96}, {"n_embd", 32}, {"n_head", 2}, {"eos_token_id", 7}});
  EXPECT_EQ(o.bos_token_id, 50256);
  EXPECT_EQ(o.eos_token_id, 7);
  // null is none, and an export writes null again (it wrote the vocabulary's last token, 95).
  o = read({{"model_type", "gpt2"},
            {"vocab_size", 96},
            {"n_embd", 32},
            {"n_head", 2},
            {"bos_token_id", nullptr},
            {"eos_token_id", nullptr}});
  EXPECT_EQ(o.bos_token_id, -1);
  EXPECT_EQ(o.eos_token_id, -1);
  for (const char* key : {"bos_token_id", "eos_token_id"})
    EXPECT_TRUE(nlohmann::json::parse(hf_config_json(o, "float32")).at(key).is_null()) << key;
  // What GPT2Config(vocab_size=96).save_pretrained() writes: GPT-2's 50256 for both, outside the
  // vocabulary, which transformers only warns of: kept for the export (it was refused).
  o = read({{"model_type", "gpt2"},
            {"vocab_size", 96},
            {"n_embd", 32},
            {"n_head", 2},
            {"bos_token_id", 50256},
            {"eos_token_id", 50256}});
  EXPECT_EQ(o.bos_token_id, 50256);
  EXPECT_EQ(o.eos_token_id, 50256);
  EXPECT_EQ(read({{"model_type", "llama"}, {"vocab_size", 300}, {"eos_token_id", {300, 2}}}).eos_token_id,
            300);
  // GPT2Config's attribute_map: the common names win over GPT-2's own, as transformers sets them
  // after (4 heads, not the 2 of n_head: no weight's shape would have told).
  o = read({{"model_type", "gpt2"},
            {"vocab_size", 96},
            {"n_embd", 32},
            {"n_head", 2},
            {"num_attention_heads", 4},
            {"num_hidden_layers", 3},
            {"max_position_embeddings", 64}});
  EXPECT_EQ(o.n_head, 4);
  EXPECT_EQ(o.n_layer, 3);
  EXPECT_EQ(o.block_size, 64);
  EXPECT_EQ(read({{"model_type", "gpt2"}, {"vocab_size", 96}, {"hidden_size", 48}, {"n_head", 2}}).n_embd,
            48);
  // What Qwen2 and Mistral fix in code is not read from their config; Llama's is.
  EXPECT_EQ(read({{"model_type", "mistral"}, {"attention_bias", true}}).attention_bias, AttentionBias::kNone);
  EXPECT_EQ(read({{"model_type", "llama"}, {"attention_bias", true}}).attention_bias, AttentionBias::kAll);
  EXPECT_NE(refusal({{"model_type", "llama"}, {"hidden_size", 30}, {"num_attention_heads", 4}})
                .find("hidden_size 30 is not a multiple of num_attention_heads 4"),
            std::string::npos);
}
