#include "models/build_model.h"

#include "models/gpt.h"
#include "models/llama.h"
#include "models/model_options.h"
#include "models/script_model.h"
#include "util/error.h"

namespace ddptrain {
namespace {

std::vector<int64_t> token_id_list(const std::string& ids) {
  return parse_token_ids(ids).value_or(std::vector<int64_t>{});  // validated: ModelOptions::validate
}
constexpr const char* kModelOptions = "ModelOptions";

// The sizes that only fit together: grouped heads, an even head size for the rotation, and
// a window no longer than the model's positions.
void check_llama_sizes(const ModelOptions& o) {
  const LlamaConfig c = llama_config(o);
  if (c.n_head % c.n_kv_head != 0)
    throw OptionError(
        {{&o.n_kv_head, "n_kv_head"}, {&o.n_head, "n_head"}},
        str("{1}=", c.n_head, " must be a multiple of {0}=", c.n_kv_head,
            " (each key/value head serves a whole group of query heads); pass e.g. {0:", c.n_head, "}"),
        kModelOptions)
        .within(&o);
  if (c.head_dim() % 2 != 0)
    throw OptionError({{&o.n_embd, "n_embd"}, {&o.n_head, "n_head"}},
                      str("{0}=", c.n_embd, " / {1}=", c.n_head, " is an odd head size ", c.head_dim(),
                          "; rotary embeddings rotate pairs: pass e.g. {0:", c.n_head * 64, "}"),
                      kModelOptions)
        .within(&o);
  if (c.max_positions < c.block_size)
    throw OptionError({{&o.max_positions, "max_positions"}, {&o.block_size, "block_size"}},
                      str("{1}=", c.block_size, " is longer than the model's {0}=", c.max_positions,
                          "; pass {1:", c.max_positions, "} or less"),
                      kModelOptions)
        .within(&o);
  if (c.sliding_window > 0 && c.block_size > c.sliding_window)  // the block size resolved (0: the preset's)
    throw OptionError(
        {{&o.sliding_window, "sliding_window"}, {&o.block_size, "block_size"}},
        str("{1}=", c.block_size, " exceeds {0}=", c.sliding_window,
            ": attention beyond the window is not computed; pass {1:", c.sliding_window, "} or less"),
        kModelOptions)
        .within(&o);
  if (c.max_window_layers >= c.n_layer && c.max_window_layers > 0)
    throw OptionError({{&o.max_window_layers, "max_window_layers"}, {&o.n_layer, "n_layer"}},
                      str("{0}=", c.max_window_layers, " leaves none of the ", c.n_layer,
                          " layers ({1}) with the sliding window; pass {0} below ", c.n_layer,
                          ", or drop it and --sliding_window"),
                      kModelOptions)
        .within(&o);
}

}  // namespace

GptConfig gpt_config(const ModelOptions& o) {
  GptConfig c = gpt_preset(o.gpt_preset);
  if (o.n_layer > 0) c.n_layer = o.n_layer;
  if (o.n_head > 0) c.n_head = o.n_head;
  if (o.n_embd > 0) c.n_embd = o.n_embd;
  if (o.block_size > 0) c.block_size = o.block_size;
  if (o.vocab_size > 0) c.vocab_size = o.vocab_size;
  c.vocab_multiple = o.vocab_multiple;
  c.dropout = o.dropout;
  c.gelu_tanh = o.gpt_activation == GptActivation::kGeluTanh;
  c.fused_norm = o.fused_norm;
  c.fused_linear = o.fused_linear;
  c.recompute_blocks = o.activation_checkpointing == Recompute::kBlocks;
  c.bos_token_id = o.bos_token_id, c.eos_token_id = o.eos_token_id;
  c.eos_token_ids = token_id_list(o.eos_token_ids);
  return c;
}

LlamaConfig llama_config(const ModelOptions& o) {
  const GptConfig sizes = gpt_config(o);
  LlamaConfig c;
  c.n_layer = sizes.n_layer, c.n_head = sizes.n_head, c.n_embd = sizes.n_embd;
  c.block_size = sizes.block_size, c.vocab_size = sizes.vocab_size, c.vocab_multiple = sizes.vocab_multiple;
  c.n_kv_head = o.n_kv_head > 0 ? o.n_kv_head : c.n_head;
  c.intermediate_size = o.intermediate_size > 0 ? o.intermediate_size : default_intermediate_size(c.n_embd);
  c.max_positions = o.max_positions > 0 ? o.max_positions : c.block_size;
  c.rope_theta = o.rope_theta;
  c.rms_norm_eps = o.rms_norm_eps;
  c.tie_embeddings = o.tie_embeddings;
  c.attention_bias = o.attention_bias;
  c.pad_token_id = o.pad_token_id, c.bos_token_id = o.bos_token_id, c.eos_token_id = o.eos_token_id;
  c.eos_token_ids = token_id_list(o.eos_token_ids);
  c.sliding_window = o.sliding_window;
  c.max_window_layers = o.max_window_layers;
  c.dropout = o.dropout;
  c.recompute_blocks = o.activation_checkpointing == Recompute::kBlocks;
  c.fused_norm = o.fused_norm;
  return c;
}

TokenSpec token_spec(const ModelOptions& o) {
  if (o.model == ModelKind::kTorchscript) return {o.block_size, o.vocab_size};
  if (!is_decoder_model(o.model)) return {};
  const GptConfig c = gpt_config(o);
  return {static_cast<int>(c.block_size), static_cast<int>(c.vocab_size)};
}

bool uses_channels_last(const ModelOptions& o) {
  if (o.memory_format == MemoryFormat::kAuto) return o.model == ModelKind::kMiniResnet;
  return o.memory_format == MemoryFormat::kChannelsLast;
}

void to_channels_last(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& t : m.parameters())
    if (t.dim() == 4) t.set_data(t.data().contiguous(at::MemoryFormat::ChannelsLast));
  for (auto& t : m.buffers())
    if (t.dim() == 4) t.set_data(t.data().contiguous(at::MemoryFormat::ChannelsLast));
}

bool takes_unit_sink(const ModelOptions& o) { return is_decoder_model(o.model); }

std::shared_ptr<Model> build_model(const ModelOptions& o, const DatasetShape& data, NormFactory norm,
                                   UnitSink* sink) {
  if (o.model == ModelKind::kTorchscript) {
    try {
      return std::make_shared<ScriptModel>(o.model_path, o.flops_per_sample);
    } catch (const UsageError& e) {  // the file's error, as the field that named it
      throw OptionError({{&o.model_path, "model_path"}}, "{0}: " + OptionError::literal(e.what()),
                        kModelOptions)
          .within(&o);
    }
  }
  if (is_decoder_model(o.model)) {
    const GptConfig c = gpt_config(o);
    if (c.n_head > 0 && c.n_embd % c.n_head != 0)
      throw OptionError({{&o.n_embd, "n_embd"}, {&o.n_head, "n_head"}},
                        str("{0}=", c.n_embd, " must be a multiple of {1}=", c.n_head,
                            "; pass e.g. {0:", c.n_head * 64, "}"),
                        kModelOptions)
          .within(&o);
    // pad is llama's alone (ModelOptions::validate); bos and eos are only carried to an export,
    // as given (transformers keeps an id outside the vocabulary, with a warning).
    if (o.pad_token_id >= c.vocab_size)
      throw OptionError({{&o.pad_token_id, "pad_token_id"}, {&o.vocab_size, "vocab_size"}},
                        str("{0}=", o.pad_token_id, " is not a token of the ", c.vocab_size,
                            "-token vocabulary ({1}); pass -1 for none"),
                        kModelOptions)
          .within(&o);
    if (data.num_classes > c.vocab_size)
      throw OptionError({{&o.vocab_size, "vocab_size"}},
                        str("the data has ", data.num_classes, " token values but the model's vocabulary is ",
                            c.vocab_size, "; pass {0:", data.num_classes, "} or more"),
                        kModelOptions)
          .within(&o);
    std::shared_ptr<Model> model;
    if (o.model == ModelKind::kGpt) {
      model = Gpt(c, sink).ptr();
    } else {
      check_llama_sizes(o);
      model = Llama(llama_config(o), sink).ptr();
    }
    model->units().clear_sink();
    return model;
  }
  MiniResNetOptions mo{data.channels, data.num_classes, o.width};
  mo.norm = std::move(norm);
  mo.dropout = o.dropout;
  mo.recompute_blocks = o.activation_checkpointing == Recompute::kBlocks;
  mo.image_height = data.height;
  mo.image_width = data.width;
  return MiniResNet(mo).ptr();
}

}  // namespace ddptrain
