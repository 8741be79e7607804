#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "checkpoint/python_pickle.h"
#include "util/error.h"

namespace ddptrain {
namespace fs = std::filesystem;
namespace {

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  DDP_CHECK(fd >= 0, "cannot open '", path, "' to fsync: ", std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  DDP_CHECK(rc == 0, "fsync of '", path, "' failed: ", std::strerror(errno));
}

void write_file_synced(const std::string& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  DDP_CHECK(fd >= 0, "cannot create '", path, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      throw Error(detail::concat("writing '", path, "' failed: ", std::strerror(e), " (disk full?)"));
    }
    done += static_cast<size_t>(n);
  }
  int rc = ::fsync(fd);
  ::close(fd);
  DDP_CHECK(rc == 0, "fsync of '", path, "' failed: ", std::strerror(errno));
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDP_CHECK(in.good(), "cannot read '", path, "': missing or unreadable");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp";
  write_file_synced(tmp, bytes);
  fs::rename(tmp, path);
  fsync_path(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string(),
             O_RDONLY | O_DIRECTORY);
}

std::string save_checkpoint(const DistContext& ctx, const std::string& root, const std::string& name,
                            const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            const CheckpointMeta& meta, const std::string& config_json) {
  const std::string final_dir = (fs::path(root) / name).string();
  if (ctx.is_main()) {
    // See Note [Atomic checkpoints].
    const std::string tmp_dir = (fs::path(root) / (".tmp-" + name)).string();
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
    write_file_synced(tmp_dir + "/model.pt", pickle_tensors(state_dict(model)));
    std::string opt_bytes;
    {
      torch::serialize::OutputArchive archive;
      optimizer.save(archive);
      archive.save_to([&](const void* d, size_t n) {
        opt_bytes.append(static_cast<const char*>(d), n);
        return n;
      });
    }
    write_file_synced(tmp_dir + "/optimizer.pt", opt_bytes);
    nlohmann::json m = {{"epoch", meta.epoch}, {"global_step", meta.global_step},
                        {"world_size", meta.world_size}, {"format", 1}};
    write_file_synced(tmp_dir + "/meta.json", m.dump(2) + "\n");
    write_file_synced(tmp_dir + "/config.json", config_json);
    fsync_path(tmp_dir, O_RDONLY | O_DIRECTORY);
    if (fs::exists(final_dir)) {
      // Replacing a checkpoint of the same name: move the old one aside first so that a
      // crash between the two renames still leaves one complete copy.
      const std::string old_dir = (fs::path(root) / (".old-" + name)).string();
      fs::remove_all(old_dir);
      fs::rename(final_dir, old_dir);
      fs::rename(tmp_dir, final_dir);
      fs::remove_all(old_dir);
    } else {
      fs::rename(tmp_dir, final_dir);
    }
    fsync_path(root, O_RDONLY | O_DIRECTORY);
  }
  ctx.barrier();
  return final_dir;
}

CheckpointMeta load_checkpoint(const std::string& dir, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer) {
  for (const char* f : {"model.pt", "optimizer.pt", "meta.json"})
    DDP_USAGE_CHECK(fs::is_regular_file(fs::path(dir) / f), "--resume_from='", dir, "' has no ", f,
                    "; pass a complete checkpoint directory written by ddptrain");
  load_state_dict(model, unpickle_tensors(read_file(dir + "/model.pt"), dir + "/model.pt"), dir + "/model.pt");
  std::string opt_bytes = read_file(dir + "/optimizer.pt");
  torch::serialize::InputArchive archive;
  archive.load_from(opt_bytes.data(), opt_bytes.size());
  optimizer.load(archive);
  auto m = nlohmann::json::parse(read_file(dir + "/meta.json"));
  CheckpointMeta meta;
  meta.epoch = m.at("epoch").get<int>();
  meta.global_step = m.at("global_step").get<int64_t>();
  meta.world_size = m.at("world_size").get<int>();
  return meta;
}

}  // namespace ddptrain
