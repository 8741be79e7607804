// Llama (#31): the layout a loader checks folders against is the model's own state_dict in every
// variant; parameter count and FLOPs per token at GPT-2 124M's sizes; causal masking; the
// rotation makes attention depend on relative positions only; grouped-query attention equals
// multi-head attention with each key/value head copied to its group, forward and backward; recompute gives
// bitwise gradients with dropout; the sizes that do not fit together are named. (Against transformers:
// test_hf_llama.cpp.)
#include <gtest/gtest.h>

#include <cstdio>

#include <torch/nn/functional/loss.h>

#include "config/train_config.h"
#include "kernels/fused_swiglu.h"
#include "models/build_model.h"
#include "models/hf_llama.h"
#include "models/llama.h"
#include "serialize/python_pickle.h"
#include "util/error.h"

using namespace ddptrain;

namespace {

LlamaConfig small_llama() {
  LlamaConfig c;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 32, c.intermediate_size = 48;
  c.block_size = c.max_positions = 16, c.vocab_size = 50;
  return c;
}

std::string train_error(std::vector<std::string> args) {
  try {
    resolve_train_config(args);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

}  // namespace

TEST(Llama, TheLayoutLoadersCheckIsTheModelsStateDictInEveryVariant) {
  for (const AttentionBias bias : {AttentionBias::kNone, AttentionBias::kQkv, AttentionBias::kAll})
    for (const bool tied : {false, true})
      for (const int64_t kv : {1, 2, 4}) {
        LlamaConfig c = small_llama();
        c.attention_bias = bias, c.tie_embeddings = tied, c.n_kv_head = kv;
        const NamedTensors state = state_dict(*Llama(c));
        const auto layout = llama_layout(c);
        ASSERT_EQ(state.size(), layout.size()) << word(bias) << " tied " << tied << " kv " << kv;
        for (size_t i = 0; i < state.size(); ++i) {
          EXPECT_EQ(state[i].first, layout[i].first);
          EXPECT_EQ(state[i].second.sizes().vec(), layout[i].second) << state[i].first;
        }
      }
}

TEST(Llama, ParametersAndFlopsAtGpt2SmallSizes) {
  ModelOptions o;
  o.model = ModelKind::kLlama;
  o.gpt_preset = GptPreset::kGpt2_124m;
  const LlamaConfig c = llama_config(o);
  EXPECT_EQ(c.intermediate_size, 2048);  // 8/3 x 768: SwiGLU's 3 matrices hold GPT's 2 of 4x
  EXPECT_EQ(c.n_kv_head, 12);
  EXPECT_EQ(c.max_positions, 1024);
  Llama m(c);
  int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  const int64_t C = 768, V = 50257, L = 12;
  // embedding and output layer, per layer q/k/v/o and the MLP's three and two norms, the final norm
  EXPECT_EQ(n, 2 * V * C + L * (4 * C * C + 3 * C * 2048 + 2 * C) + C);
  EXPECT_EQ(m->matmul_params(), n - V * C);
  EXPECT_EQ(m->train_flops_per_token(), 6 * (n - V * C) + 12 * L * 12 * 64 * 1024);
  std::printf("llama at gpt2-124m sizes: %lld parameters, %.4f GFLOP per token\n", static_cast<long long>(n),
              static_cast<double>(m->train_flops_per_token()) / 1e9);
  LlamaConfig tied = c;
  tied.tie_embeddings = true;
  EXPECT_EQ(Llama(tied)->matmul_params(), n - V * C);  // the embedding once, as the output layer
}

TEST(Llama, CausalMaskingAndRelativePositions) {
  torch::manual_seed(3);
  Llama m(small_llama());
  m->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor tokens = torch::randint(0, 50, {2, 16}, at::kLong);
  at::Tensor changed = tokens.clone();
  changed.slice(1, 10).copy_(torch::randint(0, 50, {2, 6}, at::kLong));
  const at::Tensor a = m->forward(tokens), b = m->forward(changed);
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{2, 16, 50}));
  EXPECT_LE((a.slice(1, 0, 10) - b.slice(1, 0, 10)).abs().max().item<double>(), 1e-6);
  EXPECT_GT((a.slice(1, 10) - b.slice(1, 10)).abs().max().item<double>(), 1e-3);
  EXPECT_THROW(m->forward(torch::zeros({1, 17}, at::kLong)), Error);
  // A query at i and a key at j, both rotated: their product depends on i - j only.
  const int64_t d = 8;
  const auto [cos, sin] = rotary_cos_sin(12, rotary_inv_freq(d, 500.0));
  const at::Tensor q = torch::randn({d}), k = torch::randn({d});
  const auto rotated = [&](const at::Tensor& x, int64_t pos) {
    const at::Tensor half = at::cat({-x.slice(0, d / 2), x.slice(0, 0, d / 2)});
    return x * cos[pos] + half * sin[pos];
  };
  const double near = rotated(q, 5).dot(rotated(k, 2)).item<double>();
  EXPECT_NEAR(rotated(q, 11).dot(rotated(k, 8)).item<double>(), near, 1e-5);
  EXPECT_GT(std::abs(rotated(q, 11).dot(rotated(k, 2)).item<double>() - near), 1e-4);
}

TEST(Llama, GroupedQueryAttentionIsMultiHeadWithEachKeyValueHeadCopiedToItsGroup) {
  torch::manual_seed(4);
  LlamaConfig grouped = small_llama();  // 4 query heads, 2 key/value heads of 8
  Llama g(grouped);
  LlamaConfig full = grouped;
  full.n_kv_head = 4;
  Llama m(full);
  NamedTensors state = state_dict(*g);
  for (auto& [name, t] : state)
    if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos)
      t = t.view({2, 8, 32}).repeat_interleave(2, 0).reshape({32, 32});  // heads 0,1 <- kv 0; 2,3 <- kv 1
  load_state_dict(*m, state, "test");
  g->eval(), m->eval();
  const at::Tensor x = torch::randint(0, 50, {2, 16}, at::kLong);
  const at::Tensor yg = g->forward(x), ym = m->forward(x);
  EXPECT_LE((yg - ym).abs().max().item<double>(), 1e-5);
  // Backward: a key/value head's gradient is the sum of its copies' (SDPA sums over the group
  // inside the kernel from LibTorch 2.5 on), every other gradient the same.
  yg.pow(2).mean().backward();
  ym.pow(2).mean().backward();
  const auto full_params = m->named_parameters();
  for (const auto& p : g->named_parameters()) {
    at::Tensor want = full_params[p.key()].grad();
    if (p.key().find("k_proj") != std::string::npos || p.key().find("v_proj") != std::string::npos)
      want = want.view({2, 2, 8, 32}).sum(1).reshape({16, 32});
    EXPECT_TRUE(torch::allclose(p.value().grad(), want, 1e-4, 1e-6))
        << p.key() << ": " << (p.value().grad() - want).abs().max();
  }
}

TEST(Llama, RecomputeGivesBitwiseEqualGradientsWithDropout) {
  auto grads = [](bool recompute) {
    LlamaConfig c = small_llama();
    c.dropout = 0.1;
    c.recompute_blocks = recompute;
    c.attention_bias = AttentionBias::kQkv;
    torch::manual_seed(5);
    Llama m(c);
    const at::Tensor tokens = torch::randint(0, 50, {4, 16}, at::kLong);
    const at::Tensor targets = torch::randint(0, 50, {4, 16}, at::kLong);
    torch::manual_seed(6);  // the dropout masks
    torch::nn::functional::cross_entropy(m->forward(tokens).reshape({-1, 50}), targets.reshape({-1}))
        .backward();
    std::vector<at::Tensor> g;
    for (const auto& p : m->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto plain = grads(false), recomputed = grads(true);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(plain[i].equal(recomputed[i])) << "parameter " << i;
}

// transformers' padding_idx: the padding token's embedding row starts at zero and gets no gradient.
TEST(Llama, ThePaddingTokensEmbeddingRowGetsNoGradient) {
  LlamaConfig c = small_llama();
  c.pad_token_id = 3;
  torch::manual_seed(7);
  Llama m(c);
  EXPECT_EQ(m->embed_tokens->weight[3].abs().max().item<double>(), 0.0);
  const at::Tensor tokens = at::tensor({3, 5, 3, 9, 3, 1}, at::kLong).reshape({2, 3});
  m->forward(tokens).sum().backward();
  const at::Tensor g = m->embed_tokens->weight.grad();
  EXPECT_EQ(g[3].abs().max().item<double>(), 0.0);
  EXPECT_GT(g[5].abs().max().item<double>(), 0.0);
}

TEST(Llama, SizesThatDoNotFitTogetherAreNamed) {
  const std::vector<std::string> base = {"--model", "llama", "--dataset", "tokens", "--gpt_preset", "debug"};
  const auto err = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return train_error(args);
  };
  EXPECT_EQ(err({}), "");
  const auto built_error = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const TrainConfig t = resolve_train_config(args);
    try {
      build_model(t.model, DatasetShape{1, 1, 64, 256, 64});
      return std::string();
    } catch (const OptionError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(built_error({"--n_head", "4", "--n_kv_head", "3"}).find("n_head=4 must be a multiple of "),
            std::string::npos);
  EXPECT_NE(built_error({"--n_head", "4", "--n_embd", "12"}).find("is an odd head size 3"),
            std::string::npos);
  EXPECT_NE(built_error({"--max_positions", "32"}).find("block_size=64 is longer than the model's"),
            std::string::npos);
  EXPECT_EQ(built_error({"--n_kv_head", "1", "--tie_embeddings", "--attention_bias", "qkv"}), "");
  EXPECT_NE(built_error({"--pad_token_id", "256"}).find("pad_token_id=256 is not a token of the 256-token"),
            std::string::npos);
  // A Mistral's window is checked against the block size the model resolves (here the tests'
  // 64, no --block_size given): attention beyond it would not be the export's.
  EXPECT_NE(built_error({"--sliding_window", "32"})
                .find("block_size=64 exceeds ModelOptions::sliding_window=32: attention beyond the window"),
            std::string::npos)
      << built_error({"--sliding_window", "32"});
  EXPECT_EQ(built_error({"--sliding_window", "64"}), "");
  EXPECT_EQ(built_error({"--bos_token_id", "50256"}), "") << "kept for an export, as transformers keeps it";
  EXPECT_NE(err({"--sliding_window", "8", "--attention_bias", "all"})
                .find("is a Mistral's (no biases) or a Qwen2's"),
            std::string::npos);
  // A Qwen2's first sliding layer: with its window and q/k/v biases, and below n_layer.
  EXPECT_EQ(built_error({"--sliding_window", "64", "--attention_bias", "qkv", "--max_window_layers", "1"}),
            "");
  EXPECT_NE(
      err({"--sliding_window", "64", "--max_window_layers", "1"}).find("--max_window_layers is a Qwen2's"),
      std::string::npos);
  EXPECT_NE(built_error({"--sliding_window", "64", "--attention_bias", "qkv", "--max_window_layers", "2"})
                .find("max_window_layers=2 leaves none of the 2 layers"),
            std::string::npos)
      << built_error({"--sliding_window", "64", "--attention_bias", "qkv", "--max_window_layers", "2"});
  EXPECT_NE(err({"--eos_token_ids", "5,x"}).find("is not a comma-separated list of token ids"),
            std::string::npos);
  EXPECT_NE(err({"--eos_token_ids", "5,6"}).find("starts with another id than --eos_token_id=-1"),
            std::string::npos);
  EXPECT_EQ(err({"--eos_token_id", "5", "--eos_token_ids", "5,6"}), "");
  EXPECT_NE(err({"--rope_theta", "0"}).find("--rope_theta=0 must be in (0, 1e12)"), std::string::npos);
  EXPECT_NE(err({"--rms_norm_eps", "-1"}).find("--rms_norm_eps=-1 must be in (0, 1)"), std::string::npos);
  EXPECT_NE(err({"--gpt_activation", "gelu_tanh"}).find("--gpt_activation applies to --model gpt"),
            std::string::npos);
  const std::string gpt = train_error({"--model", "gpt", "--dataset", "tokens", "--n_kv_head", "1"});
  EXPECT_NE(gpt.find("apply to --model llama; --model gpt has none"), std::string::npos) << gpt;
  EXPECT_NE(train_error({"--model", "llama"}).find("--model llama reads tokens"), std::string::npos);
}

// Note [SwiGLU in one pass]: off CUDA swiglu is ATen's ops on the halves, gate's columns first
// (forward and backward bitwise silu(gate) * up), and a width that does not split is named.
TEST(FusedSwiglu, TheCpuPathIsSiluOfTheFirstHalfTimesTheSecond) {
  at::manual_seed(17);
  const at::Tensor gu0 = at::randn({3, 5, 2 * 24}) * 2, dy = at::randn({3, 5, 24});
  const at::Tensor gu = gu0.clone().requires_grad_(), ref = gu0.clone().requires_grad_();
  const at::Tensor y = swiglu(gu);
  const at::Tensor r = at::silu(ref.narrow(-1, 0, 24)) * ref.narrow(-1, 24, 24);
  EXPECT_TRUE(at::equal(y, r));
  EXPECT_FALSE(at::equal(y, at::silu(gu0.narrow(-1, 24, 24)) * gu0.narrow(-1, 0, 24)))
      << "the halves' order shows";
  y.backward(dy);
  r.backward(dy);
  EXPECT_TRUE(at::equal(gu.grad(), ref.grad()));
  try {
    swiglu(at::randn({2, 7}));
    FAIL() << "an odd width was split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 x the MLP's width"), std::string::npos) << e.what();
  }
}
