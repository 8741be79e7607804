// The Llama family from and to Hugging Face (#31): LlamaForCausalLM (grouped-query attention
// untied, tied, with attention biases), Qwen2ForCausalLM (q/k/v biases, tied) and
// MistralForCausalLM, saved by transformers (one file and sharded), load into Llama with the
// logits and loss of transformers' own forward; an export is a folder from_pretrained loads
// with the same logits and reads back bitwise; every folder that does not fit is named with
// the file and the tensor or field. Skipped, saying so, where the interop Python has no
// transformers (Debian's torch 1.13).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/hf_folder.h"
#include "hf_fixtures.h"
#include "models/build_model.h"
#include "models/hf_llama.h"
#include "models/hf_model.h"
#include "util/error.h"

using namespace ddptrain;
using namespace hf_fixtures;
namespace fs = std::filesystem;

namespace {

ModelOptions llama_options(const std::string& dir) {
  ModelOptions o;
  apply_hf_config(read_hf_config(dir), dir + "/config.json", o);
  return o;
}

Llama load_llama(const std::string& dir) {
  const ModelOptions o = llama_options(dir);
  EXPECT_EQ(o.model, ModelKind::kLlama);
  Llama m(llama_config(o));
  load_state_dict(*m, model_from_hf(read_hf_tensors(dir), o, dir), dir);
  m->eval();
  return m;
}

// The largest |logit difference| from transformers' on (3, 16) tokens; the losses compared too.
double logits_difference(Llama& m, const std::string& dir) {
  const int64_t B = 3, T = 16, V = 96;
  const at::Tensor x = tokens(B, T, V);
  const at::Tensor ours = m->forward(x).detach();
  const auto [theirs, their_loss] = transformers_logits(dir, B, T, V);
  const at::Tensor shifted = m->forward(x.slice(1, 0, T - 1)).detach();
  const double our_loss =
      at::cross_entropy_loss(shifted.reshape({-1, V}), x.slice(1, 1, T).reshape({-1})).item<double>();
  // A few float ulps (test_hf_gpt2.cpp says why).
  EXPECT_NEAR(our_loss, their_loss, 8 * std::numeric_limits<float>::epsilon() * their_loss) << dir;
  EXPECT_GT(std::abs(their_loss - std::log(96.0)), 0.3) << "a loss near ln(V): the logits are near 0";
  return (ours - theirs).abs().max().item<double>();
}

}  // namespace

TEST(HfLlama, LogitsAndLossEqualTransformersInEachArchitecture) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string one = hf_dir("hfl_one"), sharded = hf_dir("hfl_sharded");
  ASSERT_EQ(hf_python("make-arch llama " + one), "");
  ASSERT_EQ(hf_python("make-arch llama " + sharded + " 20KB"), "");
  ASSERT_TRUE(fs::exists(sharded + "/model.safetensors.index.json")) << "transformers wrote no shards";
  Llama from_one = load_llama(one), from_shards = load_llama(sharded);
  for (size_t i = 0; i < from_one->parameters().size(); ++i)
    EXPECT_TRUE(from_one->parameters()[i].equal(from_shards->parameters()[i]));
  const LlamaConfig c = from_one->config();
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.rope_theta, 500.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_embeddings);
  const double d = logits_difference(from_shards, one);
  std::printf("llama: max |logit difference| from transformers: %.3g\n", d);
  EXPECT_LT(d, 1e-5);
  for (const std::string arch : {"llama_tied", "llama_bias", "qwen2", "mistral"}) {
    const std::string dir = hf_dir("hfl_" + arch);
    ASSERT_EQ(hf_python("make-arch " + arch + " " + dir), "");
    Llama m = load_llama(dir);
    const double diff = logits_difference(m, dir);
    std::printf("%s (%s): max |logit difference| from transformers: %.3g\n", arch.c_str(),
                m->describe().c_str(), diff);
    EXPECT_LT(diff, 1e-5) << arch;
    const AttentionBias bias = arch == "qwen2"        ? AttentionBias::kQkv
                               : arch == "llama_bias" ? AttentionBias::kAll
                                                      : AttentionBias::kNone;
    EXPECT_EQ(m->config().attention_bias, bias) << arch;
  }
}

// A Mistral whose sliding window (8) is shorter than its positions (16): its weights load (the
// window is the default block size) and within the window the logits are
// transformers'.
TEST(HfLlama, AMistralWithAShorterSlidingWindowLoadsAndEqualsTransformersWithinIt) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string dir = hf_dir("hfl_mistral_window");
  ASSERT_EQ(hf_python("make-arch mistral " + dir), "");
  ASSERT_EQ(hf_python("config " + dir + " sliding_window=8"), "");
  Llama m = load_llama(dir);
  EXPECT_EQ(m->config().max_positions, 16);  // the config's, for an export
  EXPECT_EQ(m->config().block_size, 8);
  const at::Tensor x = tokens(2, 8, 96);
  const at::Tensor theirs = transformers_logits(dir, 2, 8, 96).first;
  EXPECT_LT((m->forward(x).detach() - theirs).abs().max().item<double>(), 1e-5);
  // Exported, it is a Mistral with its window again: on 16 tokens, twice the window, transformers
  // computes the same logits from the export as from the original (exported as a Llama without
  // a window, it attended to all 16).
  const ModelOptions o = llama_options(dir);
  EXPECT_EQ(o.sliding_window, 8);
  const std::string out = hf_dir("hfl_mistral_window_export");
  write_hf_folder(out, hf_config_json(o, "float32"), model_to_hf(state_dict(*m), o), at::kFloat, 1 << 30);
  EXPECT_EQ(read_hf_config(out)["model_type"], "mistral");
  EXPECT_EQ(hf_architecture(o), "Mistral");  // what export and --init_from_hf say it is
  EXPECT_EQ(read_hf_config(out)["sliding_window"], 8);
  EXPECT_EQ(read_hf_config(out)["max_position_embeddings"], 16);
  const at::Tensor original = transformers_logits(dir, 2, 16, 96).first;
  EXPECT_LT((transformers_logits(out, 2, 16, 96).first - original).abs().max().item<double>(), 1e-5);
}

// A Qwen2 whose second layer slides (window 8, 16 positions): within the window its logits are
// transformers', and exported it is such a Qwen2 again: on 16 tokens transformers computes the
// same logits from the export as from the original (exported without the window, the second
// layer attended to all 16) and the positions come back as they came in.
TEST(HfLlama, AQwen2WhoseLaterLayersSlideKeepsItsWindowInAnExport) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string dir = hf_dir("hfl_qwen2_window");
  ASSERT_EQ(hf_python("make-arch qwen2 " + dir), "");
  ASSERT_EQ(hf_python("config " + dir +
                      " use_sliding_window=true sliding_window=8 max_window_layers=1 layer_types=null"),
            "");
  Llama m = load_llama(dir);
  EXPECT_EQ(m->config().block_size, 8);
  const at::Tensor x = tokens(2, 8, 96);
  EXPECT_LT((m->forward(x).detach() - transformers_logits(dir, 2, 8, 96).first).abs().max().item<double>(),
            1e-5);
  const ModelOptions o = llama_options(dir);
  EXPECT_EQ(o.sliding_window, 8);
  EXPECT_EQ(o.max_window_layers, 1);
  const std::string out = hf_dir("hfl_qwen2_window_export");
  write_hf_folder(out, hf_config_json(o, "float32"), model_to_hf(state_dict(*m), o), at::kFloat, 1 << 30);
  const nlohmann::json exported = read_hf_config(out);
  EXPECT_EQ(exported["model_type"], "qwen2");
  EXPECT_EQ(exported["use_sliding_window"], true);
  EXPECT_EQ(exported["max_window_layers"], 1);
  EXPECT_EQ(exported["max_position_embeddings"], 16);
  const at::Tensor original = transformers_logits(dir, 2, 16, 96).first;
  EXPECT_LT((transformers_logits(out, 2, 16, 96).first - original).abs().max().item<double>(), 1e-5);
  ASSERT_EQ(hf_python("config " + out + " use_sliding_window=false"), "");  // the window matters here
  EXPECT_GT((transformers_logits(out, 2, 16, 96).first - original).abs().max().item<double>(), 1e-4);
}

TEST(HfLlama, AnExportLoadsInTransformersWithTheSameLogitsAndReadsBackBitwise) {
  SKIP_WITHOUT_TRANSFORMERS();
  for (const std::string arch : {"llama", "qwen2", "mistral"}) {
    const std::string src = hf_dir("hfl_src_" + arch), out = hf_dir("hfl_export_" + arch),
                      half = hf_dir("hfl_export_bf16_" + arch);
    ASSERT_EQ(hf_python("make-arch " + arch + " " + src), "");
    const ModelOptions o = llama_options(src);
    Llama m = load_llama(src);
    const NamedTensors state = state_dict(*m);
    write_hf_folder(out, hf_config_json(o, "float32"), model_to_hf(state, o), at::kFloat, 20 << 10);
    ASSERT_TRUE(fs::exists(out + "/model.safetensors.index.json")) << arch;
    EXPECT_EQ(read_hf_config(out)["model_type"], arch);
    EXPECT_EQ(read_hf_config(out)["eos_token_id"], read_hf_config(src)["eos_token_id"]) << arch;
    EXPECT_EQ(read_hf_config(out)["bos_token_id"], read_hf_config(src)["bos_token_id"]) << arch;
    const ModelOptions back_options = llama_options(out);
    EXPECT_EQ(hf_config_json(back_options, "float32"), hf_config_json(o, "float32"))
        << "the config round trip";
    const NamedTensors back = model_from_hf(read_hf_tensors(out), back_options, out);
    ASSERT_EQ(back.size(), state.size());
    for (size_t i = 0; i < state.size(); ++i) {
      EXPECT_EQ(back[i].first, state[i].first);
      EXPECT_TRUE(back[i].second.equal(state[i].second)) << state[i].first << " changed in the round trip";
    }
    EXPECT_LT(logits_difference(m, out), 1e-5) << arch << ": transformers on the export";
    write_hf_folder(half, hf_config_json(o, "bfloat16"), model_to_hf(state, o), at::kBFloat16, 1 << 30);
    for (const auto& [name, t] : read_hf_tensors(half)) EXPECT_EQ(t.scalar_type(), at::kBFloat16) << name;
    const NamedTensors rounded = model_from_hf(read_hf_tensors(half), o, half);
    for (size_t i = 0; i < state.size(); ++i)
      EXPECT_TRUE(rounded[i].second.equal(state[i].second.to(at::kBFloat16).to(at::kFloat)))
          << state[i].first;
  }
}

TEST(HfLlama, EveryFolderThatDoesNotFitIsNamedWithTheFileAndTheTensorOrField) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string d = hf_dir("hfl_bad");
  ASSERT_EQ(hf_python("make-arch llama " + d + " 20KB"), "");
  const auto load = [](const std::string& dir) { return folder_error([&] { load_llama(dir); }); };
  const auto variant = [&](const std::string& name, const std::string& change) {
    return hf_variant(d, name, change);
  };
  const auto expect = [&](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << "wanted \"" << part << "\" in: " << e;
  };
  expect(load(variant("hfl_bert", "model_type='\"bert\"'")),
         "model_type 'bert' is not a model ddptrain reads from a Hugging Face folder");
  expect(load(variant("hfl_gelu", "hidden_act='\"gelu\"'")), "hidden_act 'gelu'");
  expect(load(variant("hfl_scaled", "rope_parameters='{\"rope_type\": \"llama3\", \"rope_theta\": 5e5}'")),
         "rope_parameters.rope_type 'llama3' (scaled rotary embeddings)");
  expect(load(variant("hfl_old_scaled", "rope_scaling='{\"type\": \"linear\", \"factor\": 2.0}'")),
         "rope_scaling.rope_type 'linear'");
  expect(load(variant("hfl_mlp_bias", "mlp_bias=true")), "mlp_bias true");
  expect(load(variant("hfl_head_dim", "head_dim=16")),
         "head_dim 16 (not hidden_size / num_attention_heads = 8)");
  // A window shorter than the model's positions: refused for a longer training window.
  ModelOptions window_16;
  window_16.block_size = 16;
  const std::string windowed = variant("hfl_window", "model_type='\"mistral\"' sliding_window=8");
  expect(folder_error([&] { apply_hf_config(read_hf_config(windowed), windowed, window_16); }),
         "sliding_window 8 is shorter than the training window 16");
  expect(load(variant("hfl_layers", "num_hidden_layers=3")),
         "tensor 'model.layers.2.self_attn.q_proj.weight' is missing");
  expect(load(variant("hfl_mlp", "intermediate_size=64")),
         "tensor 'model.layers.0.mlp.down_proj.weight' has shape [32, 48]; the config's sizes need [32, 64]");
  expect(load(variant("hfl_bias", "attention_bias=true")),
         "tensor 'model.layers.0.self_attn.q_proj.bias' is missing");
  expect(load(variant("hfl_untied", "tie_word_embeddings=true")),
         "lm_head.weight differs from model.embed_tokens.weight");
  expect(load(variant("hfl_zero", "num_key_value_heads=0")), "num_key_value_heads 0 (below 1)");
  ModelOptions contradicting;
  contradicting.n_kv_head = 4;
  contradicting.init_from_hf = d;
  std::string e;
  try {
    apply_hf_config(read_hf_config(d), d, contradicting);
  } catch (const OptionError& err) {
    e = err.what();
  }
  expect(e, "n_kv_head=4 differs from num_key_value_heads 2 in ModelOptions::init_from_hf's config.json");
  ModelOptions gpt;
  gpt.model = ModelKind::kGpt;
  e = "";
  try {
    apply_hf_config(read_hf_config(d), d, gpt);
  } catch (const OptionError& err) {
    e = err.what();
  }
  expect(e, "ModelOptions::model=gpt cannot hold ModelOptions::init_from_hf's model_type 'llama'");
  const std::vector<std::string> shards = hf_shards(d);
  ASSERT_GE(shards.size(), 2u);
  const std::string missing = variant("hfl_missing", "");
  fs::remove(missing + "/" + shards[1]);
  expect(load(missing), shards[1] + "' is missing");
}
