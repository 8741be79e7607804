#include "checkpoint/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#ifdef USE_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/abandoned_mark.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/crc32.h"
#include "checkpoint/durable_files.h"
#include "util/error.h"
#include "util/json_text.h"

namespace ddptrain {
namespace fs = std::filesystem;
namespace {

// The generator of the rank's GPU, when it trains on one (dropout there draws from it; the
// CPU's draws everything else): its state is checkpointed beside the CPU's (cuda_rng_states.bin),
// so that a resumed run draws the masks the uninterrupted one would.
std::optional<at::Generator> gpu_generator(const DistContext& ctx) {
#ifdef USE_CUDA
  if (ctx.device().is_cuda()) return at::cuda::detail::getDefaultCUDAGenerator(ctx.device().index());
#else
  (void)ctx;
#endif
  return std::nullopt;
}

// Every rank's state of `gen`, gathered into one (world, state_bytes) tensor with a sum
// all-reduce in which each rank fills only its own row.
at::Tensor gather_generator_states(const DistContext& ctx, at::Generator gen) {
  at::Tensor mine;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());  // the generator is the process's
    mine = gen.get_state();
  }
  std::vector<at::Tensor> all{at::zeros({ctx.world_size(), mine.numel()}, at::kByte)};
  all[0][ctx.rank()].copy_(mine);
  ctx.all_reduce_sum(all);
  return all[0];
}

// This rank's row of `bytes` (a file of gather_generator_states at `world` ranks) into `gen`; a
// rank the checkpoint did not have keeps the generator the program seeded (Note [Resume at
// another world size]).
void restore_generator_state(at::Generator gen, const std::string& bytes, int world, const DistContext& ctx,
                             const std::string& what) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor mine = gen.get_state();
  const size_t n = static_cast<size_t>(mine.numel());
  DDP_CHECK(bytes.size() == n * static_cast<size_t>(world), what, " does not hold ", world,
            " generator states of ", n, " bytes");
  if (ctx.rank() >= world) return;
  std::memcpy(mine.data_ptr(), bytes.data() + n * static_cast<size_t>(ctx.rank()), n);
  gen.set_state(mine);
}

std::string tensor_bytes(const at::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

}  // namespace

void clean_checkpoint_leftovers(const std::string& root, const Logger& log) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(root, ec)) entries.push_back(e.path());
  for (const auto& path : entries) {
    const std::string n = path.filename().string();
    // A crash between the two renames of a replacement leaves `.old-<name>` (complete) and no
    // `<name>`: put it back rather than lose it.
    if (n.rfind(".old-", 0) == 0 && !fs::exists(fs::path(root) / n.substr(5), ec)) {
      log.warn(str("restoring ", path.string(), " (a save replacing it was interrupted)"));
      fs::rename(path, fs::path(root) / n.substr(5), ec);
      continue;
    }
    if (n.rfind(".tmp-", 0) == 0 || n.rfind(".old-", 0) == 0) {
      log.warn(str("removing the leftover of an interrupted save: ", path.string()));
      fs::remove_all(path, ec);
    }
  }
}

namespace {

// Part names are file names next to the checkpoint's own files: a lower-case word, unique.
void check_part_names(const std::vector<CheckpointPart>& parts) {
  std::set<std::string> seen;
  for (const auto& p : parts) {
    const bool word = !p.name.empty() && std::all_of(p.name.begin(), p.name.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
    DDP_CHECK(word && p.name != "rng_states", "checkpoint part name '", p.name,
              "': use lower-case letters, digits and '_' (and not 'rng_states')");
    DDP_CHECK(seen.insert(p.name).second, "checkpoint part '", p.name, "' is given twice");
  }
}

}  // namespace

std::string save_checkpoint(const DistContext& ctx, const std::string& root, const std::string& name,
                            torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            const CheckpointMeta& meta, const std::string& config_json, SaveOptions opts) {
  return save_checkpoint(ctx, root, name, training_parts(model, optimizer), meta, config_json,
                         std::move(opts));
}

namespace {

// A save in progress. Rank 0's side: the temporary folder and the manifest's entries. Every
// rank's: the events that say rank 0's writing so far is done (PartFiles::sync).
struct SaveInProgress {
  std::string tmp_dir;
  nlohmann::json files = nlohmann::json::object();
  std::function<void(const char*)> stage = [](const char*) {};
  std::string event;  // names this save among the job's (its checkpoint's name and step)
  int syncs = 0;
  void write(const std::string& file, const std::string& bytes) {
    write_file_synced(tmp_dir + "/" + file, bytes);
    files[file] = {{"bytes", bytes.size()}, {"crc32", crc32_of(bytes)}};
    stage(("written:" + file).c_str());
  }
  // Every rank: rank 0's writing so far is done, waited for on the store (up to `wait`).
  void sync(const DistContext& ctx, std::chrono::milliseconds wait) {
    ctx.wait_for_main(str(event, ": files written (", ++syncs, ")"), wait);
  }
};

// Every rank, part by part: its archive (rank 0 writes it) and its further files, each written
// as soon as it is made, so that rank 0 never holds more than one file's bytes. Before the
// collectives of a next part, the others wait for rank 0's writing through the store.
void write_parts(const DistContext& ctx, const std::vector<CheckpointPart>& parts, SaveInProgress& save,
                 std::chrono::milliseconds write_wait) {
  const auto sync = [&] { save.sync(ctx, write_wait); };
  for (const auto& part : parts) {
    if (part.before_save) part.before_save();
    if (ctx.is_main()) save.write(part.name + ".pt", part.save());
    sync();
    if (part.save_more) {
      const std::string prefix = part.name + ".";
      part.save_more(PartFiles{[&](const std::string& file, const std::string& bytes) {
                                 DDP_CHECK(file.rfind(prefix, 0) == 0 && file.find('/') == std::string::npos,
                                           "checkpoint part '", part.name, "' writes '", file,
                                           "': its files are ", prefix, "*");
                                 if (ctx.is_main()) save.write(file, bytes);
                               },
                               {},
                               {},
                               sync});
      sync();
    }
    if (part.after_save) part.after_save();
  }
}

// Rank 0: the manifest last, then the rename into place (Note [Atomic checkpoints]).
void publish(const std::string& root, const std::string& name, SaveInProgress& save,
             const std::function<void(const char*)>& stage) {
  const std::string final_dir = (fs::path(root) / name).string();
  stage("files_written");
  const nlohmann::json manifest = {{"format", kCheckpointFormat}, {"files", save.files}};
  write_file_synced(save.tmp_dir + "/" + kManifest, json_text(manifest, 2) + "\n");
  fsync_folder(save.tmp_dir);
  stage("manifest_written");
  if (fs::exists(final_dir)) {
    // Replacing a checkpoint of the same name: move the old one aside first so that a
    // crash between the two renames still leaves one complete copy.
    const std::string old_dir = (fs::path(root) / (".old-" + name)).string();
    fs::remove_all(old_dir);
    fs::rename(final_dir, old_dir);
    stage("old_moved_aside");
    fs::rename(save.tmp_dir, final_dir);
    fs::remove_all(old_dir);
  } else {
    fs::rename(save.tmp_dir, final_dir);
  }
  stage("renamed");
  fsync_folder(root);
}

// Resume's rule (train/run_identity.h): no flag both identities record differs (one recorded
// by an older version only, or only by a newer one, does not tell runs apart).
bool same_run(const std::map<std::string, std::string>& mine,
              const std::map<std::string, std::string>& theirs) {
  for (const auto& [name, value] : mine) {
    const auto it = theirs.find(name);
    if (it != theirs.end() && it->second != value) return false;
  }
  return true;
}

// Retention: the newest `keep` of this run's complete checkpoints stay. Only those count and
// only those go: a checkpoint that is incomplete (a file missing or cut: what resume's listing
// skips) or of another run (another identity, Note [Run identity]) is never deleted here, as a
// checkpoint we cannot vouch for is never deleted (another run's whose optimizer.pt a user
// removed to save space went with this run's rotation). The new checkpoint is complete and
// published before this: an old one that cannot be listed or deleted (permissions, a file a
// reader holds open on a network filesystem) is a warning, not the end of the run.
void keep_newest(const std::string& root, const std::string& final_dir, int keep,
                 const std::map<std::string, std::string>& run, const Logger& log) {
  std::vector<std::pair<int64_t, fs::path>> complete;
  std::error_code ec;
  // Every file system call here takes an error code: one that throws (a `lost+found` of the
  // volume's root, unreadable to the run's user) would end the run after each save.
  fs::directory_iterator it(root, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& e = *it;
    std::error_code entry_ec;
    if (!e.is_directory(entry_ec) || e.path().filename().string()[0] == '.') continue;
    if (!fs::exists(e.path() / kManifest, entry_ec)) continue;
    try {
      const CheckpointMeta m = check_checkpoint_complete(e.path().string());
      if (same_run(run, m.run)) complete.emplace_back(m.global_step, e.path());
    } catch (const std::exception&) {
      // incomplete or damaged: never delete what we cannot identify
    }
  }
  if (ec) {
    log.warn(str("keep_checkpoints: cannot list ", root, " (", ec.message(), "); nothing rotated"));
    return;
  }
  std::sort(complete.begin(), complete.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < complete.size(); ++i) {
    if (complete[i].second == fs::path(final_dir)) continue;
    // Out of the listing first: a kill in the middle of the removal leaves a leftover the next
    // start removes (clean_checkpoint_leftovers), not a checkpoint with files missing that stays.
    const fs::path doomed = fs::path(root) / (".tmp-rotated-" + complete[i].second.filename().string());
    fs::rename(complete[i].second, doomed, ec);
    if (ec) {
      log.warn(str("keep_checkpoints: cannot delete ", complete[i].second.string(), " (", ec.message(),
                   "); it stays, and the next save tries again"));
      continue;
    }
    fs::remove_all(doomed, ec);
    if (ec)
      log.warn(str("keep_checkpoints: cannot remove all of ", doomed.string(), " (", ec.message(),
                   "; it is out of the listing), and the next start tries again"));
  }
}

}  // namespace

std::string save_checkpoint(const DistContext& ctx, const std::string& root, const std::string& name,
                            const std::vector<CheckpointPart>& parts, const CheckpointMeta& meta,
                            const std::string& config_json, SaveOptions opts) {
  check_part_names(parts);
  const std::string final_dir = (fs::path(root) / name).string();
  // Collectives: every rank, same order (every rank's device is of one type).
  const at::Tensor rng = gather_generator_states(ctx, at::detail::getDefaultCPUGenerator());
  const std::optional<at::Generator> gpu = gpu_generator(ctx);
  const at::Tensor gpu_rng = gpu ? gather_generator_states(ctx, *gpu) : at::Tensor();
  SaveInProgress save;
  // Events are named by what every rank knows alike (a node's folder may be named otherwise).
  save.event = str("checkpoint ", name, " at step ", meta.global_step);
  if (opts.on_stage) save.stage = opts.on_stage;
  if (ctx.is_main()) {  // See Note [Atomic checkpoints].
    save.tmp_dir = (fs::path(root) / (".tmp-" + name)).string();
    fs::remove_all(save.tmp_dir);
    fs::create_directories(save.tmp_dir);
  }
  write_parts(ctx, parts, save, opts.write_wait);
  if (ctx.is_main()) {
    save.write("rng_states.bin", tensor_bytes(rng));
    if (gpu_rng.defined()) save.write("cuda_rng_states.bin", tensor_bytes(gpu_rng));
    save.write("meta.json", meta_json(meta, rng.size(1)));
    save.write("config.json", config_json);
    publish(root, name, save, save.stage);
    if (opts.keep > 0) keep_newest(root, final_dir, opts.keep, meta.run, ctx.log());
  }
  // The others wait for rank 0's writing through the store, up to write_wait, then meet.
  ctx.wait_for_main(save.event + " written", opts.write_wait);
  ctx.barrier("barrier after the checkpoint save");
  return final_dir;
}

CheckpointMeta load_checkpoint(const std::string& dir, const DistContext& ctx, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer) {
  return load_checkpoint(dir, ctx, training_parts(model, optimizer));
}

// Note [Checkpoints read once]: the load is its own verification. The manifest and every file's
// size are checked first (a truncated file fails before any part is restored); then each file
// is read once and its CRC-32 checked before it is used. Choosing a checkpoint reads only
// manifests and meta.json (list_checkpoints); the one resumed is verified before anything is
// written or restored (a damaged checkpoint changes nothing, and auto falls back to the one
// before it with the model untouched), so it is read twice, the second time from the page
// cache; older checkpoints are not read. The second read's cost, measured (AMD EPYC, 2 cores):
// GPT-2 124M's model.pt + optimizer.pt, 990 MB, read and checked in 0.86 s. Reading once would
// need the whole checkpoint held in memory before it is used (its size again in host memory)
// or a restore that a damaged last file leaves half done; neither is worth 0.9 s per GB.
CheckpointMeta load_checkpoint(const std::string& dir, const DistContext& ctx,
                               const std::vector<CheckpointPart>& parts) {
  check_part_names(parts);
  const nlohmann::json manifest = read_manifest(dir);
  check_file_sizes(dir, manifest, listed_files(manifest));
  const auto read = [&dir, &manifest](const std::string& file) { return read_checked(dir, file, manifest); };
  const std::optional<std::string> meta_text = read("meta.json");
  DDP_CHECK(meta_text.has_value(), "checkpoint '", dir, "': its manifest lists no meta.json");
  const CheckpointMeta meta = meta_from_json(*meta_text, dir);
  if (meta.world_size != ctx.world_size() && ctx.is_main())
    ctx.log().info(str("checkpoint '", dir, "' was written at world size ", meta.world_size,
                       "; this job has ", ctx.world_size(), " (Note [Resume at another world size])"));
  for (const auto& part : parts) {
    const std::string file = part.name + ".pt";
    const std::optional<std::string> bytes = read(file);
    DDP_CHECK(bytes.has_value(), "checkpoint '", dir, "' has no part '", part.name, "' (", file,
              "): it was saved with other parts; load it with the parts it was saved with");
    part.load(*bytes, dir + "/" + file);
    if (part.load_more) part.load_more(PartFiles{{}, read, dir});
  }
  const std::optional<std::string> rng = read("rng_states.bin");
  DDP_CHECK(rng.has_value(), "checkpoint '", dir, "': its manifest lists no rng_states.bin");
  restore_generator_state(at::detail::getDefaultCPUGenerator(), *rng, meta.world_size, ctx,
                          str("checkpoint '", dir, "': rng_states.bin"));
  // The GPU's, where both the checkpoint's run and this one train on GPUs (a checkpoint of a CPU
  // run leaves the GPU generator as the program seeded it; a CPU run has none to restore).
  const std::optional<at::Generator> gpu = gpu_generator(ctx);
  const std::optional<std::string> gpu_rng = gpu ? read("cuda_rng_states.bin") : std::nullopt;
  if (gpu_rng)
    restore_generator_state(*gpu, *gpu_rng, meta.world_size, ctx,
                            str("checkpoint '", dir, "': cuda_rng_states.bin"));
  return meta;
}

}  // namespace ddptrain
