#include "config/checkpoint_flags.h"

namespace ddptrain {

void forget_what_only_training_reads(TrainConfig& c) {
  const TrainConfig d;
  const OptimizerKind optimizer = c.optimizer.optimizer;
  c.optimizer = d.optimizer;
  c.optimizer.optimizer = optimizer;
  const LrSchedule schedule = c.trainer.optim.lr_schedule;
  c.trainer.optim = d.trainer.optim;
  c.trainer.optim.lr_schedule = schedule;
  c.trainer.precision.scaler_init_scale = d.trainer.precision.scaler_init_scale;
  c.trainer.precision.scaler_growth_interval = d.trainer.precision.scaler_growth_interval;
  c.program.fused_loss = d.program.fused_loss;
  // What only training reads that a later check ties to another flag (Note [A checkpoint's own
  // flags]: eval and export never refuse a checkpoint for a combination it trained with).
  if (!c.trainer.precision.use_amp) c.trainer.precision.amp_dtype = d.trainer.precision.amp_dtype;
  c.trainer.data.prefetch_factor = d.trainer.data.prefetch_factor;
  c.trainer.report.profile_first_step = d.trainer.report.profile_first_step;
  c.trainer.report.profile_steps = d.trainer.report.profile_steps;
  c.trainer.checkpoint.save_every = d.trainer.checkpoint.save_every;
  c.trainer.checkpoint.save_every_steps = d.trainer.checkpoint.save_every_steps;
  c.trainer.checkpoint.keep = d.trainer.checkpoint.keep;
  ModelOptions& m = c.model;
  const ModelOptions& md = d.model;
  const bool decoder = is_decoder_model(m.model);
  if (m.model != ModelKind::kMiniResnet) {
    m.width = md.width;
    m.memory_format = md.memory_format;
  }
  if (m.model != ModelKind::kTorchscript)
    m.flops_per_sample = md.flops_per_sample;  // model_path: eval's check
  if (m.model == ModelKind::kTorchscript) m.dropout = md.dropout;
  if (m.model != ModelKind::kGpt) {
    m.gpt_activation = md.gpt_activation;
    m.fused_linear = md.fused_linear;
  }
  if (m.model != ModelKind::kLlama) {
    m.n_kv_head = md.n_kv_head;
    m.intermediate_size = md.intermediate_size;
    m.max_positions = md.max_positions;
    m.rope_theta = md.rope_theta;
    m.rms_norm_eps = md.rms_norm_eps;
    m.tie_embeddings = md.tie_embeddings;
    m.attention_bias = md.attention_bias;
    m.pad_token_id = md.pad_token_id;
    m.sliding_window = md.sliding_window;
    m.max_window_layers = md.max_window_layers;
  }
  if (!decoder) {
    m.bos_token_id = md.bos_token_id;  // gpt's and llama's, for an export's config.json
    m.eos_token_id = md.eos_token_id;
    m.eos_token_ids = md.eos_token_ids;
    m.gpt_preset = md.gpt_preset;
    m.n_layer = md.n_layer;
    m.n_head = md.n_head;
    m.n_embd = md.n_embd;
    m.vocab_multiple = md.vocab_multiple;
    m.fused_norm = md.fused_norm;
  }
  if (m.model == ModelKind::kMiniResnet) {
    m.block_size = md.block_size;
    m.vocab_size = md.vocab_size;
  }
}

}  // namespace ddptrain
