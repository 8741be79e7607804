// Hugging Face GPT-2 in and out (#31, GPT-2 part): a GPT2LMHeadModel that transformers saved
// (one file and sharded) loads into Gpt with logits and loss equal to transformers' own; the
// export is a folder from_pretrained loads with no missing or unexpected tensor and the same
// logits, and reads back bitwise; every folder that does not fit is named with the file and
// the tensor or field. The Python side is transformers itself (tests/python/hf.py); where the
// interop Python has no transformers (Debian's torch 1.13) the tests say so and skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/hf_folder.h"
#include "checkpoint/hf_models.h"
#include "checkpoint/weights_file.h"
#include "hf_fixtures.h"
#include "models/build_model.h"
#include "models/hf_gpt2.h"
#include "models/hf_model.h"
#include "util/error.h"

using namespace ddptrain;
using namespace hf_fixtures;
namespace fs = std::filesystem;

namespace {

// A folder's GPT options: sizes and activation from its config.
ModelOptions gpt2_options(const std::string& dir, int vocab_multiple = 1) {
  ModelOptions o;
  o.model = ModelKind::kGpt;
  o.vocab_multiple = vocab_multiple;
  apply_hf_gpt2_config(read_hf_config(dir), dir + "/config.json", o);
  return o;
}

// A tiny GPT's sizes: `layers` blocks `width` wide, 2 heads, 5 positions, 11 tokens.
GptConfig tiny_gpt(int layers, int width) {
  GptConfig c;
  c.n_layer = layers;
  c.n_head = 2;
  c.n_embd = width;
  c.block_size = 5;
  c.vocab_size = 11;
  return c;
}

// A folder's Gpt: sizes from its config, weights from its tensors.
Gpt load_gpt(const std::string& dir) {
  const ModelOptions o = gpt2_options(dir);
  const GptConfig c = gpt_config(o);
  Gpt g(c);
  load_state_dict(*g, gpt_from_hf(read_hf_tensors(dir), c, dir), dir);
  g->eval();
  return g;
}

}  // namespace

TEST(HfGpt2, LogitsAndLossEqualTransformersFromOneFileAndFromShards) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string one = hf_dir("hf_one"), sharded = hf_dir("hf_sharded");
  ASSERT_EQ(hf_python("make " + one), "");
  ASSERT_EQ(hf_python("make " + sharded + " 20KB"), "");
  ASSERT_TRUE(fs::exists(sharded + "/model.safetensors.index.json")) << "transformers wrote no shards";
  const NamedTensors a = read_hf_tensors(one), b = read_hf_tensors(sharded);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(a[i].second.equal(b[i].second)) << a[i].first;
  }
  ModelOptions sizes;
  apply_hf_gpt2_config(read_hf_config(sharded), sharded, sizes);
  at::manual_seed(7);
  const at::Tensor draws = at::rand({8});
  at::manual_seed(7);
  gpt_from_hf(b, gpt_config(sizes), sharded);  // builds a Gpt of its own to learn the names
  EXPECT_TRUE(at::rand({8}).equal(draws)) << "gpt_from_hf moved the program's random stream";
  Gpt g = load_gpt(sharded);
  const int64_t B = 3, T = 16, V = 96;
  const at::Tensor x = tokens(B, T, V);
  const at::Tensor ours = g->forward(x).detach();
  const auto [theirs, their_loss] = transformers_logits(one, B, T, V);
  const double diff = (ours - theirs).abs().max().item<double>();
  std::printf("max |logit difference| from transformers: %.3g\n", diff);
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(theirs.abs().max().item<double>(), 0.1)
      << "the logits are all near 0: the comparison means little";
  // ddptrain's objective: the next token of each of the first T - 1 positions.
  const at::Tensor shifted = g->forward(x.slice(1, 0, T - 1)).detach();
  const double our_loss =
      at::cross_entropy_loss(shifted.reshape({-1, V}), x.slice(1, 1, T).reshape({-1})).item<double>();
  // A few float ulps of a loss near ln(96): the two reduce the same logits (within 1e-8) in
  // their own order (transformers: a sum divided by the count).
  EXPECT_NEAR(our_loss, their_loss, 8 * std::numeric_limits<float>::epsilon() * their_loss);
}

TEST(HfGpt2, AnExportLoadsInTransformersWithTheSameLogitsAndReadsBackBitwise) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string src = hf_dir("hf_src"), out = hf_dir("hf_export"), half = hf_dir("hf_export_bf16");
  ASSERT_EQ(hf_python("make " + src), "");
  const ModelOptions o = gpt2_options(src);
  const GptConfig c = gpt_config(o);
  Gpt g = load_gpt(src);
  const NamedTensors state = state_dict(*g);
  write_hf_folder(out, hf_gpt2_config_json(c), gpt_to_hf(state), at::kFloat, 30 << 10);  // 30 KB: shards
  ASSERT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  const NamedTensors back = gpt_from_hf(read_hf_tensors(out), c, out);
  ASSERT_EQ(back.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(back[i].first, state[i].first);
    EXPECT_TRUE(back[i].second.equal(state[i].second)) << state[i].first << " changed in the round trip";
  }
  const at::Tensor ours = g->forward(tokens(2, 16, 96)).detach();
  const at::Tensor theirs = transformers_logits(out, 2, 16, 96).first;
  EXPECT_LT((ours - theirs).abs().max().item<double>(), 1e-5);
  for (const char* id : {"bos_token_id", "eos_token_id"})  // the folder's (93 and 94), not the last token
    EXPECT_EQ(read_hf_config(out)[id], read_hf_config(src)[id]) << id;
  // The same folder again as one file: the shards and index of the first export are gone.
  write_hf_folder(out, hf_gpt2_config_json(c), gpt_to_hf(state), at::kFloat, 1 << 30);
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json") ||
               fs::exists(out + "/model-00001-of-00002.safetensors"));
  EXPECT_TRUE(is_hf_folder(out));
  // An export that fails (a tensor safetensors cannot hold) leaves the folder's export whole (it
  // deleted the weights first, then wrote config.json and stopped).
  NamedTensors bad = gpt_to_hf(state);
  bad.emplace_back("z.complex", at::zeros({2}, at::kComplexFloat));
  EXPECT_THROW(write_hf_folder(out, "{\"broken\": true}", bad, at::kFloat, 30 << 10), Error);
  EXPECT_EQ(read_hf_config(out).count("broken"), 0u) << "config.json of the failed export";
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_NE(e.path().filename().string().rfind(".export-", 0), 0u) << e.path() << " left behind";
  const NamedTensors kept = gpt_from_hf(read_hf_tensors(out), c, out);
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_TRUE(kept[i].second.equal(state[i].second)) << state[i].first;
  write_hf_folder(half, hf_gpt2_config_json(c, "bfloat16"), gpt_to_hf(state), at::kBFloat16, 1 << 30);
  ASSERT_TRUE(fs::exists(half + "/model.safetensors"));
  for (const auto& [name, t] : read_hf_tensors(half)) EXPECT_EQ(t.scalar_type(), at::kBFloat16) << name;
  const NamedTensors rounded = gpt_from_hf(read_hf_tensors(half), c, half);
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_TRUE(rounded[i].second.equal(state[i].second.to(at::kBFloat16).to(at::kFloat))) << state[i].first;
}

TEST(HfGpt2, EveryFolderThatDoesNotFitIsNamedWithTheFileAndTheTensorOrField) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string d = hf_dir("hf_bad");
  ASSERT_EQ(hf_python("make " + d + " 20KB"), "");
  const auto load = [](const std::string& dir) { return folder_error([&] { load_gpt(dir); }); };
  const auto variant = [&](const std::string& name, const std::string& change) {
    return hf_variant(d, name, change);
  };
  std::string e = load(variant("hf_llama", "model_type='\"llama\"'"));
  EXPECT_NE(e.find("model_type 'llama' is not a model ddptrain reads"), std::string::npos) << e;
  e = load(variant("hf_inner", "n_inner=100"));
  EXPECT_NE(e.find("n_inner 100 is not 4 x n_embd"), std::string::npos) << e;
  e = load(variant("hf_relu", "activation_function='\"relu\"'"));
  EXPECT_NE(e.find("activation_function 'relu'"), std::string::npos) << e;
  e = load(variant("hf_untied", "tie_word_embeddings=false"));
  EXPECT_NE(e.find("tie_word_embeddings false"), std::string::npos) << e;
  e = load(variant("hf_layers", "n_layer=3"));
  EXPECT_NE(e.find("tensor 'transformer.h.2.ln_1.weight' is missing"), std::string::npos) << e;
  e = load(variant("hf_wide", "n_embd=64"));
  EXPECT_NE(e.find("has shape"), std::string::npos) << e;
  const std::vector<std::string> shards = hf_shards(d);
  ASSERT_GE(shards.size(), 3u);
  const std::string missing = variant("hf_missing", "");
  fs::remove(missing + "/" + shards[1]);
  e = load(missing);
  EXPECT_NE(e.find(shards[1] + "' is missing"), std::string::npos) << e;
  const std::string cut = variant("hf_cut", "");
  fs::resize_file(cut + "/" + shards[2], 6);
  e = load(cut);
  EXPECT_NE(e.find(shards[2] + "' is not readable"), std::string::npos) << e;
  const std::string none = variant("hf_none", "");
  fs::remove(none + "/model.safetensors.index.json");
  e = load(none);
  EXPECT_NE(e.find("has neither model.safetensors nor model.safetensors.index.json"), std::string::npos) << e;
  ModelOptions tanh_wanted;
  tanh_wanted.gpt_activation = GptActivation::kGeluTanh;
  const std::string exact = variant("hf_exact", "activation_function='\"gelu\"'");
  e = folder_error([&] { apply_hf_gpt2_config(read_hf_config(exact), exact, tanh_wanted); });
  EXPECT_NE(e.find("gpt_activation=gelu_tanh differs from"), std::string::npos) << e;
  e = load(variant("hf_zero", "n_head=0"));
  EXPECT_NE(e.find("n_head 0 (below 1)"), std::string::npos) << e;
  // A ddptrain checkpoint has a config.json too, but no safetensors: not a Hugging Face folder.
  const std::string ours = hf_dir("hf_ours");
  fs::create_directories(ours);
  std::ofstream(ours + "/config.json") << "{}";
  std::ofstream(ours + "/model.pt") << "pt";
  EXPECT_FALSE(is_hf_folder(ours));
  EXPECT_TRUE(is_hf_folder(d));
  const std::string garbled = variant("hf_garbled", "");
  std::ofstream(garbled + "/config.json") << "{not json";
  e = load(garbled);
  EXPECT_NE(e.find(garbled + "/config.json' is not readable"), std::string::npos) << e;
}

// Note [Padded vocabulary]: with --vocab_multiple 64 a GPT-2 folder of 96 tokens loads into 128
// rows (the last 32 zeros) with transformers' logits, and the export drops them: the folder's
// tensors come back bitwise.
TEST(HfGpt2, APaddedVocabularyLoadsPaddedAndExportsTheRealRows) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string src = hf_dir("hf_padded");
  ASSERT_EQ(hf_python("make " + src), "");
  const ModelOptions o = gpt2_options(src, 64);
  const NamedTensors hf = read_hf_tensors(src);
  const NamedTensors ours = model_from_hf(hf, o, src);
  Gpt g(gpt_config(o));
  load_state_dict(*g, ours, src);
  g->eval();
  ASSERT_EQ(g->wte->weight.size(0), 128);
  EXPECT_EQ(g->wte->weight.narrow(0, 96, 32).abs().max().item<double>(), 0.0) << "the padded rows are zeros";
  const at::Tensor logits = g->forward(tokens(2, 16, 96)).detach();
  ASSERT_EQ(logits.size(-1), 96) << "the logits are the real vocabulary's";
  EXPECT_LT((logits - transformers_logits(src, 2, 16, 96).first).abs().max().item<double>(), 1e-5);
  const NamedTensors back = model_to_hf(state_dict(*g), o);
  std::map<std::string, at::Tensor> original(hf.begin(), hf.end());
  for (const auto& [name, t] : back) {
    ASSERT_TRUE(original.count(name)) << name;
    const at::Tensor want = original[name].to(at::kFloat);
    EXPECT_TRUE(t.sizes() == want.sizes() && t.equal(want)) << name << " changed in the round trip";
  }
}

// checkpoint/hf_models.h, the library's three calls: a folder's options, the model build_model
// makes of them with the folder's weights loaded gives transformers' logits, and saved as a
// folder (in shards) it is what transformers loads, with every tensor as the folder had it.
TEST(HfGpt2, TheLibrarysCallsLoadAndSaveAFolderAsTheCommandsDo) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string src = hf_dir("hf_library_src"), out = hf_dir("hf_library_out");
  ASSERT_EQ(hf_python("make " + src + " 20KB"), "");
  const ModelOptions o = hf_model_options(src);
  EXPECT_EQ(o.model, ModelKind::kGpt);
  DatasetShape data;
  data.num_classes = 96;  // the folder's vocabulary
  data.block_size = 16;
  const std::shared_ptr<Model> model = build_model(o, data);
  const Logger log(0, 1);
  load_hf_weights(*model, src, log);
  model->eval();
  const at::Tensor ours = model->forward(tokens(2, 16, 96)).detach();
  EXPECT_LT((ours - transformers_logits(src, 2, 16, 96).first).abs().max().item<double>(), 1e-5);
  save_hf_folder(*model, o, out, at::kFloat, 30 << 10);
  ASSERT_TRUE(fs::exists(out + "/model.safetensors.index.json")) << "not in shards";
  const NamedTensors original = read_hf_tensors(src);
  std::map<std::string, at::Tensor> saved;
  for (auto& [name, t] : read_hf_tensors(out)) saved[name] = t;
  size_t compared = 0;
  for (const auto& [name, t] : original) {
    if (!saved.count(name)) continue;  // a tied lm_head the folder stores and transformers ties
    EXPECT_TRUE(saved[name].equal(t.to(at::kFloat))) << name << " changed";
    ++compared;
  }
  EXPECT_GE(compared + 1, original.size()) << "tensors of the folder not saved";
  EXPECT_LT((ours - transformers_logits(out, 2, 16, 96).first).abs().max().item<double>(), 1e-5);
  EXPECT_THROW(hf_model_options(hf_dir("hf_library_empty")), UsageError);
}

// gpt_layout names Gpt's tensors without building it (a loader plans a folder before the model
// exists, and a ZeRO-3 build never holds the whole model): the names, shapes and order of a
// built Gpt's state, for two shapes.
TEST(HfGpt2, TheLayoutIsGptsStateWithoutBuildingIt) {
  for (const auto& [layers, width] : {std::pair{1, 8}, std::pair{3, 16}}) {
    const GptConfig c = tiny_gpt(layers, width);
    const auto layout = gpt_layout(c);
    const NamedTensors built = state_dict(*Gpt(c));
    ASSERT_EQ(layout.size(), built.size());
    for (size_t i = 0; i < built.size(); ++i) {
      EXPECT_EQ(layout[i].first, built[i].first);
      EXPECT_EQ(at::IntArrayRef(layout[i].second), built[i].second.sizes()) << built[i].first;
    }
  }
}

// A weight stored twice, under its prefixed and its bare name (a merged or hand-converted
// state dict), is refused naming both; before, whichever came last in name order won.
TEST(HfGpt2, AWeightStoredTwiceIsRefused) {
  const GptConfig c = tiny_gpt(1, 8);
  NamedTensors hf = gpt_to_hf(state_dict(*Gpt(c)));
  ASSERT_NO_THROW(gpt_from_hf(hf, c, "folder"));
  hf.emplace_back("ln_f.weight", at::zeros({8}));
  const std::string e = folder_error([&] { gpt_from_hf(hf, c, "folder"); });
  EXPECT_NE(e.find("' are the same weight (ln_f.weight) stored twice"), std::string::npos) << e;
}

// HfInitialWeights (the trainer's --init_from_hf, and ZeRO-3's unit by unit) writes each tensor
// into its parameter: straight from the file where dtype and layout allow, converted or
// transposed where not, a padded vocabulary's extra rows zero. Filling the units one at a time
// and then the rest gives the whole folder's load bitwise, from float32 and from bfloat16 files.
TEST(HfGpt2, InitialWeightsAreReadIntoTheParametersAsTheWholeFolderLoads) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string src = hf_dir("hf_into"), half = hf_dir("hf_into_bf16");
  ASSERT_EQ(hf_python("make " + src), "");
  const Logger log;
  for (const int multiple : {1, 64}) {
    const ModelOptions o = gpt2_options(src, multiple);
    Gpt whole(gpt_config(o));
    load_state_dict(*whole, model_from_hf(read_hf_tensors(src), o, src), src);
    write_hf_folder(half, hf_config_json(o, "bfloat16"), model_to_hf(state_dict(*whole), o), at::kBFloat16,
                    int64_t{1} << 40);
    for (const std::string& dir : {src, half}) {
      Gpt want(gpt_config(o)), into(gpt_config(o));
      load_state_dict(*want, model_from_hf(read_hf_tensors(dir), o, dir), dir);
      HfInitialWeights weights(dir, log);
      for (size_t u = 0; u < into->units().size(); ++u)
        weights.fill(*into->units().modules()[u], into->units().name(u) + ".");
      weights.fill(*into);
      weights.finish();
      const NamedTensors a = state_dict(*want), b = state_dict(*into);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(a[i].second.equal(b[i].second)) << dir << " multiple " << multiple << ": " << a[i].first;
    }
  }
}

// A model of other sizes than the folder's (a library caller's: the CLI takes the config's) is a
// UsageError naming the tensor, not zero rows: only a padded vocabulary may have more rows.
TEST(HfGpt2, InitialWeightsRefuseAModelOfOtherSizes) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string src = hf_dir("hf_into_sizes");
  ASSERT_EQ(hf_python("make " + src), "");
  GptConfig longer = gpt_config(gpt2_options(src));
  longer.block_size *= 2;
  Gpt g(longer);
  const Logger log;
  HfInitialWeights weights(src, log);
  try {
    weights.fill(*g);
    FAIL() << "a longer wpe was filled";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("wpe.weight"), std::string::npos) << e.what();
  }
}
