#include "config/train_config.h"

#include <algorithm>

#include <filesystem>

#include "checkpoint/hf_folder.h"
#include "config/checkpoint_flags.h"
#include "config/hf_init_flags.h"
#include "config/train_config_checks.h"
#include "util/error.h"

namespace ddptrain {

const char* const kTrainUsage =
    "usage: ddptrain train [options]\n"
    "Trains a model with data-parallel SGD. Single process by default; under `ddptrain launch`,\n"
    "torchrun, Slurm or MPI the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) makes\n"
    "it one rank of a distributed job.";

namespace {

// The run's config file, its data and how the data is batched.
std::vector<Flag> data_flags(TrainConfig& c) {
  return {
      bind_flag("config", &c.program.config,
                "TOML file with the same keys as these flags; flags override it"),
      bind_choice(
          "dataset", &c.data.dataset, dataset_choices(),
          "tensors reads DIR/train.pt and DIR/test.pt; image_folder DIR/train/<class>/<image>.jpg|png "
          "(and DIR/val/...); webdataset tar shards of KEY.jpg|png + KEY.cls (--data_path, --val_path); "
          "tokens (synthetic), text (bytes of "
          "--data_path) and token_shards (pre-tokenized files: nanoGPT's .bin, llm.c's) are for gpt and "
          "llama"),
      bind_flag("data_dir", &c.data.data_dir,
                "directory of the dataset's files: needed for mnist, cifar10, tensors and image_folder; "
                "fashion-mnist "
                "defaults to /usr/share/datasets/fashion-mnist (Debian: apt install dataset-fashion-mnist)"),
      bind_flag("data_path", &c.data.data_path,
                "--dataset text: the text file (90% train, 10% validation); token_shards, webdataset: the "
                "training shards, a file or a glob ('data/fineweb_train_*.bin', 'shards/train-*.tar')"),
      bind_flag("val_path", &c.data.val_path,
                "--dataset token_shards, webdataset: the validation shards, a file or a glob (none: no "
                "evaluation)"),
      bind_flag("num_classes", &c.data.num_classes, "classes (synthetic data)"),
      bind_flag("in_channels", &c.data.in_channels, "image channels (synthetic data)"),
      bind_flag("image_size", &c.data.image_size,
                "image height and width: synthetic data (0 = 32), image_folder's and webdataset's crops (0 = "
                "224)"),
      bind_flag("resize_size", &c.data.resize_size,
                "image_folder, webdataset: evaluation resizes the shorter side to this, then center-crops "
                "image_size "
                "(0 = floor(image_size*8/7): 256 for 224)"),
      bind_flag("jpeg_dct_scaling", &c.data.jpeg_dct_scaling,
                "image_folder, webdataset: decode a JPEG at a reduced size (libjpeg-turbo's DCT scaling, "
                "1/8..1) where its "
                "crop stays at least image_size; --no-jpeg_dct_scaling decodes full size, then resamples"),
      bind_choice(
          "bad_images", &c.data.bad_images, bad_image_choices(),
          "image_folder, webdataset: an image that does not decode stops the run naming it (error), or is "
          "replaced by the next readable image and reported in the log and metrics (skip)"),
      bind_flag("dataset_size", &c.data.dataset_size,
                "samples in the synthetic datasets (synthetic, tokens)"),
      bind_flag("batch_size", &c.trainer.data.batch_size, "samples per rank per micro-batch"),
      bind_flag("num_workers", &c.trainer.data.num_workers,
                "loader threads per rank (0 = in the training thread)"),
      bind_flag("drop_last", &c.trainer.data.drop_last,
                "drop each epoch's last partial batch per rank, as the reference's "
                "DataLoader(drop_last=True); --no-drop_last trains it (PyTorch DataLoader's default)"),
      bind_flag("prefetch_factor", &c.trainer.data.prefetch_factor,
                "batches each loader thread prepares ahead of the trainer"),
      bind_flag("augment", &c.data.augment,
                "augment training images: random crop with padding 4 and horizontal flip (cifar10), random "
                "crop with padding 2 (fashion-mnist, mnist), RandomResizedCrop and flip (image_folder, "
                "webdataset; without it "
                "training images get the evaluation's resize and center crop)"),
  };
}

// The model and its sizes.
std::vector<Flag> model_flags(TrainConfig& c) {
  return {
      bind_choice(
          "model", &c.model.model, model_choices(),
          "mini_resnet for images; gpt (GPT-2's shape) or llama (Llama's) for tokens (--dataset tokens, "
          "text or token_shards); torchscript: a module scripted in Python (--model_path)"),
      bind_flag("model_path", &c.model.model_path,
                "torchscript: the file of torch.jit.script(model).save(path); trained from its weights"),
      bind_flag("flops_per_sample", &c.model.flops_per_sample,
                "torchscript: training FLOPs per sample (forward + backward), for MFU (0 = no MFU)"),
      bind_flag("width", &c.model.width, "channel multiplier of mini_resnet"),
      bind_choice("gpt_preset", &c.model.gpt_preset, gpt_preset_choices(),
                  "the sizes of gpt and llama (layers, heads, width, block, vocabulary); the flags below "
                  "override them"),
      bind_flag("n_layer", &c.model.n_layer, "gpt/llama transformer blocks (0 = the preset's)"),
      bind_flag("n_head", &c.model.n_head, "gpt/llama attention heads (0 = the preset's)"),
      bind_flag("n_embd", &c.model.n_embd, "gpt/llama width (0 = the preset's)"),
      bind_flag("block_size", &c.model.block_size,
                "gpt/llama context length in tokens, the training window (0 = the preset's)"),
      bind_flag("vocab_size", &c.model.vocab_size,
                "gpt/llama vocabulary (0 = the preset's; text data needs >= 256)"),
      bind_flag(
          "vocab_multiple", &c.model.vocab_multiple,
          "gpt/llama: round the embedding and output rows up to a multiple of this (64: aligned GEMMs on a "
          "GPU; the padded rows are zeros, never targets, and not in the logits; 1: none)"),
      bind_choice("fused_norm", &c.model.fused_norm, fused_norm_choices(),
                  "gpt, llama: LayerNorm (RMSNorm) written in the autocast dtype by one kernel each way "
                  "(statistics in fp32; the same function as the norm and autocast's cast): auto on CUDA "
                  "under autocast, on everywhere, off: ATen's (the default until a GPU run has checked the "
                  "CUDA kernels)"),
      bind_choice("fused_linear", &c.model.fused_linear, fused_linear_choices(),
                  "gpt: the Linear layers through cuBLASLt's epilogues: the bias gradients in the weight "
                  "gradients' GEMMs, and with gelu_tanh the MLP's GELU and its derivative in its GEMMs "
                  "(auto: on CUDA in bf16/fp16; off: ATen's, the default until a GPU run has checked them)"),
      bind_choice("gpt_activation", &c.model.gpt_activation, gpt_activation_choices(),
                  "gpt: the MLP's GELU, exact (gelu) or in its tanh form (gelu_tanh: GPT-2's gelu_new)"),
      bind_flag("n_kv_head", &c.model.n_kv_head,
                "llama: key/value heads, each shared by n_head / n_kv_head query heads (grouped-query "
                "attention; 0 = n_head)"),
      bind_flag("intermediate_size", &c.model.intermediate_size,
                "llama: the SwiGLU MLP's width (0 = 8/3 x n_embd rounded up to 64)"),
      bind_flag("max_positions", &c.model.max_positions,
                "llama: the longest sequence the model is for (config.json's max_position_embeddings; "
                "0 = block_size); training windows are --block_size"),
      bind_flag("rope_theta", &c.model.rope_theta, "llama: the rotary position embedding's base"),
      bind_flag("rms_norm_eps", &c.model.rms_norm_eps, "llama: RMSNorm's epsilon"),
      bind_flag("tie_embeddings", &c.model.tie_embeddings, "llama: the output layer is the token embedding"),
      bind_choice("attention_bias", &c.model.attention_bias, attention_bias_choices(),
                  "llama: biases on q/k/v (qkv: Qwen2's) or on q/k/v/o (all); none: Llama's"),
      bind_flag("pad_token_id", &c.model.pad_token_id,
                "llama: the padding token, whose embedding row gets no gradient (transformers' padding_idx; "
                "-1 = none)"),
      bind_flag("bos_token_id", &c.model.bos_token_id,
                "gpt, llama: the first token of a sequence, for an export's config.json (-1 = none, "
                "written as null)"),
      bind_flag("sliding_window", &c.model.sliding_window,
                "llama: a Mistral's or Qwen2's attention window, for an export's config.json (0 = none; "
                "--block_size must not exceed it)"),
      bind_flag("max_window_layers", &c.model.max_window_layers,
                "llama: a Qwen2's first layer with the sliding window, for an export's config.json (0 = "
                "every layer's, a Mistral's)"),
      bind_flag("eos_token_id", &c.model.eos_token_id,
                "gpt, llama: the end of a sequence, for an export's config.json (-1 = none, written as "
                "null)"),
      bind_flag("eos_token_ids", &c.model.eos_token_ids,
                "gpt, llama: every end-of-sequence id where a Hugging Face config lists several (Llama 3's), "
                "comma-separated, --eos_token_id first, for an export's config.json (empty = --eos_token_id "
                "alone)"),
      bind_flag(
          "init_from_hf", &c.model.init_from_hf,
          "a Hugging Face folder (save_pretrained's config.json and model.safetensors) of GPT-2 (--model "
          "gpt) or Llama, Qwen2, Mistral (--model llama): the model's sizes from its config, its initial "
          "weights from its tensors"),
      bind_flag("dropout", &c.model.dropout,
                "dropout probability (mini_resnet: inside each residual block; gpt: embeddings, attention "
                "weights, residual branches; llama: attention weights; 0 = the reference model)"),
      bind_choice("memory_format", &c.model.memory_format, memory_format_choices(),
                  "the layout of mini_resnet's weights and images (auto: channels_last, faster with oneDNN "
                  "and cuDNN)"),
      bind_choice("activation_checkpointing", &c.model.activation_checkpointing, recompute_choices(),
                  "blocks: recompute each block's activations (all but the last block) in backward instead "
                  "of storing them"),
  };
}

// How long and how it optimises: epochs, ZeRO, the optimizer and its schedule, precision.
std::vector<Flag> optimization_flags(TrainConfig& c) {
  return {
      bind_flag("epochs", &c.trainer.loop.epochs, "passes over the training data"),
      bind_flag("zero_stage", &c.trainer.zero.stage,
                "0: DDP, every rank holds the whole optimizer state and gradients; 1: ZeRO stage 1, each "
                "rank holds 1/world of the optimizer state; 2: of the gradients too; 3: of the parameters "
                "too, gathered one block at a time (a checkpoint of any stage resumes at any)"),
      bind_choice("optimizer", &c.optimizer.optimizer, optimizer_choices(), "SGD with momentum, or AdamW"),
      bind_choice("loss", &c.program.loss, loss_choices(),
                  "cross_entropy of class (or next-token) logits; mse of outputs and float targets "
                  "(--dataset tensors with float labels)"),
      bind_choice(
          "fused_loss", &c.program.fused_loss, fused_loss_choices(),
          "a language model's cross-entropy in one fused pass each way, bf16 logits read once and the "
          "gradient written over them (no fp32 copy): auto on CUDA, on everywhere, off: eager"),
      bind_flag("lr", &c.optimizer.lr, "peak learning rate"),
      bind_choice(
          "lr_schedule", &c.trainer.optim.lr_schedule, schedule_choices(),
          "epoch_cosine per epoch (the reference), step_cosine per step after --warmup_steps, constant: "
          "--lr throughout; auto: sgd epoch_cosine, adamw step_cosine"),
      bind_flag("warmup_steps", &c.trainer.optim.warmup_steps,
                "step_cosine: optimizer steps of linear warmup"),
      bind_flag("min_lr_ratio", &c.trainer.optim.min_lr_ratio, "step_cosine: final learning rate / --lr"),
      bind_flag("momentum", &c.optimizer.momentum, "SGD momentum"),
      bind_choice("fused_optimizer", &c.optimizer.fused, fused_optimizer_choices(),
                  "ATen's fused kernels for the optimizer step (one per parameter group): auto on CUDA only "
                  "(on CPU the loop: SGD's bitwise Python's default), on everywhere (LibTorch >= 2.4), off: "
                  "the loop"),
      bind_flag("adam_beta1", &c.optimizer.adam_beta1, "AdamW beta1"),
      bind_flag("adam_beta2", &c.optimizer.adam_beta2, "AdamW beta2"),
      bind_flag("weight_decay", &c.optimizer.weight_decay,
                "weight decay (adamw: decoupled, on weight matrices and embeddings only)"),
      bind_flag("grad_accum_steps", &c.trainer.loop.grad_accum_steps, "micro-batches per optimizer step"),
      bind_flag("max_steps", &c.trainer.loop.max_steps,
                "stop after this many optimizer steps (0 = no limit)"),
      bind_flag("clip_grad_norm", &c.trainer.optim.clip_grad_norm,
                "clip the global gradient norm to this (0 = off)"),
      bind_choice("amp_dtype", &c.trainer.precision.amp_dtype, amp_dtype_choices(),
                  "the autocast type of --use_amp; auto: bf16 on GPUs that have it, else fp16; on CPU bf16 "
                  "only where a start-up probe measures it faster than fp32 (CPU: no fp16)"),
      bind_choice("grad_scaler", &c.trainer.precision.grad_scaler, scaler_mode_choices(),
                  "dynamic loss scaling (auto: with fp16 autocast)"),
      bind_flag("scaler_init_scale", &c.trainer.precision.scaler_init_scale, "initial loss scale"),
      bind_flag("scaler_growth_interval", &c.trainer.precision.scaler_growth_interval,
                "finite steps before the loss scale doubles"),
  };
}

// The process group and DDP (and --use_amp, listed after them).
std::vector<Flag> distributed_flags(TrainConfig& c) {
  return {
      bind_flag("backend", &c.dist.backend, "auto | gloo | nccl (auto: nccl on CUDA, else gloo)"),
      bind_flag(
          "dist_timeout_s", &c.dist.dist_timeout_s,
          "timeout of every collective (and of the rendezvous without --rendezvous_timeout_s), seconds"),
      bind_flag("rendezvous_timeout_s", &c.dist.rendezvous_timeout_s,
                "how long the ranks wait for each other to join, seconds (nodes that start minutes "
                "apart); 0: --dist_timeout_s"),
      bind_flag("flight_recorder", &c.dist.flight_recorder,
                "collectives each rank remembers; when one fails every rank writes them to "
                "--checkpoint_dir/flight_rank<r>.json and the log names the rank behind the hang (`ddptrain "
                "inspect hang DIR`); 0: off"),
      bind_flag("bucket_cap_mb", &c.trainer.ddp.bucket_cap_mb,
                "all-reduce bucket size cap, MiB; auto: chosen from the measured all-reduce latency and "
                "bandwidth and the backward time (the log says how)"),
      bind_flag("first_bucket_mb", &c.trainer.ddp.first_bucket_mb,
                "cap of the first bucket (last layers), MiB"),
      bind_flag("gradient_as_bucket_view", &c.trainer.ddp.gradient_as_bucket_view,
                "gradients are views into the all-reduce buckets"),
      bind_flag("find_unused_parameters", &c.trainer.ddp.find_unused_parameters,
                "allow parameters without a gradient in a step (with --zero_stage 3 or --sync_bn: "
                "gradients reduced after backward, the whole gradient held once)"),
      bind_flag("broadcast_buffers", &c.trainer.ddp.broadcast_buffers,
                "broadcast rank 0's buffers before the first forward of each accumulation group"),
      bind_flag("sync_bn", &c.dist.sync_bn, "BatchNorm statistics over the global batch (SyncBatchNorm)"),
      bind_choice("ddp_comm_hook", &c.trainer.ddp.comm_hook, comm_hook_choices(),
                  "compress gradients for the all-reduce"),
      bind_flag("ddp_overlap", &c.trainer.ddp.overlap, "all-reduce buckets during backward (else after it)"),
      bind_flag("accum_no_sync", &c.trainer.ddp.accum_no_sync,
                "with --grad_accum_steps: all-reduce once per step, not per micro-batch"),
      bind_flag("use_amp", &c.trainer.precision.use_amp, "mixed precision where the device supports it"),
  };
}

// Checkpoints, resume, reports, and the process's own settings.
std::vector<Flag> output_flags(TrainConfig& c) {
  return {
      bind_flag("checkpoint_dir", &c.trainer.checkpoint.dir,
                "where rank 0 writes checkpoints (created when missing); '' saves none (a benchmark)"),
      bind_flag("save_every", &c.trainer.checkpoint.save_every, "save every N epochs (0 = only at the end)"),
      bind_flag("save_every_steps", &c.trainer.checkpoint.save_every_steps,
                "also save every N optimizer steps (0 = off)"),
      bind_flag("keep_checkpoints", &c.trainer.checkpoint.keep,
                "newest complete checkpoints to keep (0 = all)"),
      bind_flag("resume_from", &c.trainer.checkpoint.resume_from,
                "checkpoint directory to resume from, or auto (newest valid in --checkpoint_dir)"),
      bind_flag(
          "resume_fallback", &c.trainer.checkpoint.resume_fallback,
          "with --resume_from auto: the checkpoint directory to resume when --checkpoint_dir holds none "
          "of this run's or only earlier ones; checked first, as --resume_from is (ddptrain launch "
          "passes the first attempt's --resume_from on a restart)"),
      bind_flag("init_from", &c.trainer.checkpoint.init_from,
                "start from these weights: a state_dict saved by Python torch.save (a DDP model's "
                "\"module.\" prefix is removed), a model.pt, a .safetensors file (ddptrain export), or a "
                "Hugging Face folder (see --init_from_hf)"),
      bind_flag("eval_every", &c.trainer.loop.eval_every,
                "evaluate on the test split every N epochs and after the last (0 = never)"),
      bind_flag(
          "metrics_file", &c.trainer.report.metrics_file,
          "append one JSON line per step line and per epoch (rank 0; its folder is created when missing)"),
      bind_flag("tensorboard_dir", &c.trainer.report.tensorboard_dir,
                "write TensorBoard scalars (loss, lr, samples/s, MFU, ...) here (rank 0)"),
      bind_flag("peak_tflops", &c.trainer.report.peak_tflops,
                "peak TFLOP/s per rank for MFU (0 = GPU table, or a CPU probe)"),
      bind_flag(
          "keep_global_batch", &c.trainer.loop.keep_global_batch,
          "a resume at another world size keeps the checkpoint's global batch by changing --grad_accum_steps "
          "(exit 2 when it cannot: the global batch is not a multiple of --batch_size x world)"),
      bind_flag("trace_samples_dir", &c.trainer.report.trace_samples_dir,
                "debug data order: each rank appends every micro-batch's sample indices to DIR/rank<r>.txt"),
      bind_flag("checkpoint_on_signal", &c.trainer.checkpoint.on_signal,
                "on SIGTERM/SIGINT finish the step and save a checkpoint"),
      bind_flag("log_interval", &c.trainer.report.log_interval, "optimizer steps between step lines"),
      bind_flag("enable_profiling", &c.trainer.report.enable_profiling,
                "write a Chrome trace of --profile_steps steps from --profile_first_step per rank to the "
                "checkpoint directory"),
      bind_flag("profile_first_step", &c.trainer.report.profile_first_step,
                "the first step --enable_profiling traces, counted from 1 in this run (>= 2; after the "
                "loader's and the allocator's warm-up)"),
      bind_flag("profile_steps", &c.trainer.report.profile_steps, "how many steps --enable_profiling traces"),
      bind_flag("seed", &c.trainer.loop.seed, "seed of model init, data order and all randomness"),
      bind_flag(
          "deterministic", &c.program.deterministic,
          "deterministic algorithms only, so a run repeats bitwise on a GPU (a CPU run repeats without it): "
          "SDPA skips cuDNN's attention for flash attention's deterministic backward, cuBLAS gets "
          "CUBLAS_WORKSPACE_CONFIG=:4096:8; slower (the GPU check measures by how much)"),
      bind_flag("tf32", &c.program.tf32,
                "fp32 matmuls on a GPU in TensorFloat-32 (10-bit mantissa; ~7x the IEEE fp32 rate on "
                "A100/H100), as torch.backends.cuda.matmul.allow_tf32 = True; off: IEEE fp32, PyTorch's "
                "default. cuDNN's convolutions take TF32 either way (PyTorch's default). MFU's fp32 peak "
                "follows it"),
      bind_flag("threads", &c.program.threads, "intra-op threads per rank (0 = cores / local ranks)"),
      bind_flag("cpu_heap_keep_mb", &c.program.cpu_heap_keep_mb,
                "MiB of freed CPU heap malloc keeps for the next step instead of returning it to the OS and "
                "page-faulting it back (0 = glibc's own policy; -1 = 1024, but under --zero_stage >= 1 "
                "return every block of 1 MiB or more at once, to hold the least memory)"),

  };
}

}  // namespace

std::vector<Flag> train_flags(TrainConfig& c) {
  std::vector<Flag> all;
  for (auto part : {data_flags, model_flags, optimization_flags, distributed_flags, output_flags}) {
    std::vector<Flag> flags = part(c);
    all.insert(all.end(), std::make_move_iterator(flags.begin()), std::make_move_iterator(flags.end()));
  }
  return all;
}

LrSchedule effective_lr_schedule(const TrainConfig& c) {
  return resolved_schedule(c.trainer.optim.lr_schedule, c.optimizer.optimizer == OptimizerKind::kAdamw);
}

namespace {

// A word that is no flag's value: after a switch (--use_amp false), the switch's two spellings.
[[noreturn]] void refuse_a_positional(const std::vector<Flag>& table, const std::vector<std::string>& args,
                                      const std::string& word) {
  const auto at = std::find(args.begin(), args.end(), word);
  if (at != args.begin() && at != args.end() && (at - 1)->rfind("--", 0) == 0) {
    std::string name = (at - 1)->substr(2);
    if (name.rfind("no-", 0) == 0) name = name.substr(3);
    const Flag* flag = find_flag(table, name);
    if (flag != nullptr && flag->type == FlagType::kBool)
      throw UsageError(str("unexpected argument '", word, "' after --", name,
                           ": a switch takes no value; pass --", name, " to turn it on or --no-", name,
                           " to turn it off"));
  }
  throw UsageError(str("unexpected argument '", word, "'; flags start with -- (see ddptrain train --help)"));
}

}  // namespace

std::set<std::string> flags_given(const std::vector<std::string>& args, bool with_config) {
  TrainConfig scratch;
  auto table = train_flags(scratch);
  std::set<std::string> given;
  for (Flag& f : table)
    f.set = [&given, name = f.name, set = f.set](const std::string& value) {
      given.insert(name);
      set(value);
    };
  parse_flags(table, args);
  if (with_config && !scratch.program.config.empty() &&
      std::filesystem::is_regular_file(scratch.program.config))
    apply_toml_file(table, scratch.program.config);
  return given;
}

TrainConfig resolve_train_config(const std::vector<std::string>& args, const std::vector<std::string>& base) {
  TrainConfig c;
  auto table = train_flags(c);
  DDP_USAGE_CHECK(parse_flags(table, base).empty(), "unexpected argument in the base flags");
  if (!base.empty()) forget_what_only_training_reads(c);  // Note [A checkpoint's own flags]
  // The config file comes first so that flags override it, wherever --config stands.
  TrainConfig probe;
  auto probe_table = train_flags(probe);
  parse_flags(probe_table, args);
  if (!probe.program.config.empty()) {
    DDP_USAGE_CHECK(std::filesystem::is_regular_file(probe.program.config), "--config='",
                    probe.program.config, "' does not exist; pass the path of a TOML file");
    apply_toml_file(table, probe.program.config);
  }
  auto positional = parse_flags(table, args);
  if (!positional.empty()) refuse_a_positional(table, args, positional[0]);
  // Note [A checkpoint's own flags]: eval and export build the checkpoint's model; where a run
  // started (in a --config file given to them: the training run's own) is not theirs to read.
  if (!base.empty()) {
    c.trainer.checkpoint.init_from.clear();
    c.trainer.checkpoint.resume_from.clear();
    c.trainer.checkpoint.resume_fallback.clear();
    c.model.init_from_hf.clear();
  }
  // Recorded as absolute paths (config.json): eval, export and resumes from another folder find
  // them (a glob stays a glob: its folder is made absolute).
  for (std::string* path : {&c.model.model_path, &c.data.data_dir, &c.data.data_path, &c.data.val_path})
    if (!path->empty()) *path = std::filesystem::absolute(*path).lexically_normal().string();
  // A Hugging Face folder as --init_from is --init_from_hf: its weights need its sizes and activation.
  if (c.model.init_from_hf.empty() && is_hf_folder(c.trainer.checkpoint.init_from))
    c.model.init_from_hf = c.trainer.checkpoint.init_from;
  if (!c.model.init_from_hf.empty()) from_hugging_face(c, table, args);
  validate_train_config(c, table);
  return c;
}

}  // namespace ddptrain
