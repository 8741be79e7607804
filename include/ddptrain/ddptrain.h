// ddptrain: data-parallel training of your own LibTorch modules, across processes and nodes.
// The one header a program includes; everything is in namespace ddptrain.
//
//   auto ctx = ddptrain::join();                       // the job this process belongs to
//   auto net = std::make_shared<MyNet>();              // any torch::nn::Module with forward(x)
//   torch::optim::SGD sgd(net->parameters(), 0.05);
//   ddptrain::TrainerOptions opts;                     // every field has a default
//   ddptrain::Trainer trainer(*ctx, ddptrain::trainable(net), sgd, opts);
//   trainer.fit(my_train_set, &my_test_set);           // any ddptrain::Dataset: size() and get(i)
//
// What each part gives (see the header named for the details):
//  - join(), DistContext (dist/dist_context.h): rank, world, device and the process group,
//    from torchrun's environment (also Slurm and Open MPI; a world of one when nothing is
//    set), with a timeout and a backend (auto: NCCL on a GPU, Gloo on CPU).
//  - DistributedDataParallel (ddp/ddp.h): any module; bucketed all-reduce overlapped with
//    backward, no_sync() for accumulation, buffer sync, compression hooks.
//  - DistributedSampler (data/distributed_sampler.h): PyTorch's order, index for index;
//    Loader (data/loader.h): batches of any Dataset built by worker threads, in order.
//  - ImageFolderDataset (data/image_folder.h), WebDatasetDataset (data/webdataset.h),
//    TokenShardDataset (data/token_datasets.h): JPEG/PNG class folders and WebDataset tar
//    shards with torchvision's transforms; nanoGPT and llm.c token shards.
//  - save_checkpoint / load_checkpoint / find_latest_checkpoint (checkpoint/checkpoint.h):
//    atomic, verified checkpoints of a module, an optimizer and the training position.
//  - Trainer (train/trainer.h), TrainerOptions (train/trainer_options.h), Trainable and
//    Objective (train/trainable.h; unique_parameters: a module's tensors once each, for its
//    optimizer), Callback (train/callbacks.h): the whole training loop
//    of `ddptrain train` for your module, dataset and loss. claim_checkpoint_folder
//    (train/folder_claim.h): what a Trainer does first with its checkpoint folder (lock,
//    leftovers, the checkpoint chosen and verified), for a program whose start-up is slow to
//    do before it; give the claim to the Trainer, which sets an abandoned branch aside.
//  - Units (ddp/units.h): the blocks of your module that TrainerOptions::zero.stage 3
//    (FSDP) gathers one at a time; run each block as units_.run(i, [&] { return
//    block->forward(x); }) and expose `Units& units()` (Note [Units]). A module too large to
//    build whole on a rank: construct its Units with a ShardAsBuilt (ddp/shard_as_built.h;
//    its Fill gives each unit its initial weights), and each unit is sharded as it is built
//    (Note [Units sharded as built]).
//  - build_model (models/build_model.h): the CLI's models (mini_resnet, gpt, llama) from
//    ModelOptions (models/model_options.h) and the data's shape; hf_model_options,
//    load_hf_weights and save_hf_folder (checkpoint/hf_models.h): GPT-2 and Llama-family
//    models from and to Hugging Face folders (config.json + safetensors) that transformers
//    loads, as `ddptrain train --init_from_hf` and `ddptrain export --format hf` do.
//  - ScriptModel (models/script_model.h): a TorchScript module (scripted in Python, loaded
//    with torch::jit::load) as a module the Trainer and DDP train: trainable(make_shared<
//    ScriptModel>(torch::jit::load("net.pt"), "net.pt")).
//  - SyncBatchNorm (ddp/sync_batchnorm.h): BatchNorm over the global batch, PyTorch's
//    nn.SyncBatchNorm, for your module's BatchNorm layers; recompute (models/recompute.h):
//    activation checkpointing of a block that DDP's hooks see once per parameter.
//  - Precision (train/precision.h): what Trainer::precision() says the run trains in.
//  - UsageError and OptionError (util/error.h): what a bad option, value or environment
//    throws (the message names the field and the fix); exit 2 for it, as `ddptrain` does:
//    `ddptrain launch` then does not restart the group for it (it would fail again).
// The library sets no thread count, seed, signal handler or allocator: those are the
// program's (install_stop_handlers and stop_signal, train/stop_signal.h, are there to use; so
// are use_deterministic_algorithms, train/deterministic.h, for GPU runs that repeat bitwise,
// and, obs/memory.h, install_cpu_memory_accounting, which counts CPU tensors' bytes for the
// peak memory on CPU (before any tensor), and keep_cpu_heap / lean_cpu_heap, malloc's policy
// that `ddptrain train` sets: Note [CPU heap kept across steps]; and, for CPU runs that repeat
// bitwise, make_first_vector_math_calls, train/vector_math_first_calls.h, once after setting
// the threads and before building the model: Note [The first parallel call of a vector math
// function]).
// What it does touch of the process: DistContext makes its GPU the current CUDA device, a
// resume restores the generators' states the checkpoint saved (CPU and CUDA: a resumed run
// draws what the uninterrupted one would), and the Trainer resets the device's peak-memory
// counter each epoch (its peak memory per epoch; on CPU where the program counts it), and the
// Trainer makes the first calls of MKL's vector math functions if the program has not.
#pragma once

#include <memory>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_models.h"
#include "data/datasets.h"
#include "data/distributed_sampler.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/token_datasets.h"
#include "data/webdataset.h"
#include "ddp/ddp.h"
#include "ddp/shard_as_built.h"
#include "ddp/sync_batchnorm.h"
#include "dist/dist_context.h"
#include "models/build_model.h"
#include "models/recompute.h"
#include "models/script_model.h"
#include "obs/memory.h"
#include "optim/fused_optimizers.h"
#include "train/callbacks.h"
#include "train/deterministic.h"
#include "train/folder_claim.h"
#include "train/precision.h"
#include "train/stop_record.h"
#include "train/stop_signal.h"
#include "train/trainable.h"
#include "train/trainer.h"
#include "train/trainer_options.h"
#include "train/vector_math_first_calls.h"
#include "util/error.h"

namespace ddptrain {

/// Joins the job this process belongs to, from the environment (torchrun's RANK, WORLD_SIZE,
/// MASTER_ADDR, ...; Slurm; Open MPI), or a world of one when nothing is set. Blocks until
/// every rank has joined, or throws after opts.timeout. UsageError naming the variable when
/// the environment is invalid.
inline std::unique_ptr<DistContext> join(const DistOptionsResolved& opts = {}) {
  return std::make_unique<DistContext>(read_env_contract(), opts);
}

}  // namespace ddptrain
