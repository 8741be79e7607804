#include "checkpoint/hf_folder.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "serialize/safetensors.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndex = kHfIndex;
constexpr const char* kSingle = kHfSingle;

// A user's file, read and parsed: its errors are the user's (exit 2), naming it.
template <typename Parse>
auto parse_users_file(const std::string& path, Parse parse) {
  DDP_USAGE_CHECK(fs::is_regular_file(path), "'", path, "' is missing");
  try {
    return parse(read_file(path));
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(str("'", path, "' is not readable: ", e.what()));
  }
}

// A shard's header, opened: the user's file, so its errors are exit 2 naming it.
std::unique_ptr<SafetensorsFile> open_shard(const std::string& path) {
  DDP_USAGE_CHECK(fs::is_regular_file(path), "'", path, "' is missing");
  try {
    return std::make_unique<SafetensorsFile>(path);
  } catch (const std::bad_alloc&) {
    throw;  // the machine's limit, not the file's fault
  } catch (const std::exception& e) {
    throw UsageError(str("'", path, "' is not readable: ", e.what()));
  }
}

}  // namespace

nlohmann::json read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  nlohmann::json config =
      parse_users_file(path, [](const std::string& b) { return nlohmann::json::parse(b); });
  DDP_USAGE_CHECK(config.is_object(), "'", path, "' is not a JSON object");
  return config;
}

HfFolderTensors::HfFolderTensors(const std::string& dir) {
  const fs::path root(dir);
  const auto add = [&](std::unique_ptr<SafetensorsFile> file) {
    for (const SafetensorsEntry& e : file->entries()) {
      where_[e.name] = {file.get(), &e};
      headers_.push_back({e.name, e.dtype, e.shape});
    }
    files_.push_back(std::move(file));
  };
  if (fs::is_regular_file(root / kSingle)) {
    add(open_shard((root / kSingle).string()));
  } else {
    const std::string index_path = (root / kIndex).string();
    DDP_USAGE_CHECK(
        fs::is_regular_file(index_path), "'", dir, "' has neither ", kSingle, " nor ", kIndex,
        ": a Hugging Face checkpoint saved with safetensors (save_pretrained's default) holds one");
    const nlohmann::json index =
        parse_users_file(index_path, [](const std::string& b) { return nlohmann::json::parse(b); });
    DDP_USAGE_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), "'",
                    index_path, "' has no weight_map object");
    std::map<std::string, std::set<std::string>> by_shard;  // shard -> the tensors the index puts there
    for (const auto& [name, shard] : index["weight_map"].items()) {
      DDP_USAGE_CHECK(shard.is_string(), "'", index_path, "': tensor '", name, "' maps to ", shard.dump(),
                      ", not a file name");
      by_shard[shard.get<std::string>()].insert(name);
    }
    for (const auto& [shard, names] : by_shard) {
      const std::string path = (root / shard).string();
      DDP_USAGE_CHECK(fs::is_regular_file(path), "'", path, "' is missing: ", index_path, " puts ",
                      names.size(), " tensors there (e.g. '", *names.begin(), "')");
      std::unique_ptr<SafetensorsFile> file = open_shard(path);
      std::set<std::string> found;
      for (const SafetensorsEntry& e : file->entries()) {
        DDP_USAGE_CHECK(names.count(e.name) != 0, "'", path, "' holds tensor '", e.name, "', which ",
                        index_path, " does not place there");
        found.insert(e.name);
      }
      for (const auto& name : names)
        DDP_USAGE_CHECK(found.count(name) != 0, "'", path, "' lacks tensor '", name, "', which ", index_path,
                        " places there");
      add(std::move(file));
    }
  }
  std::sort(headers_.begin(), headers_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
}

HfFolderTensors::~HfFolderTensors() = default;

std::pair<const SafetensorsFile*, const SafetensorsEntry*> HfFolderTensors::find(
    const std::string& name) const {
  const auto it = where_.find(name);
  DDP_CHECK(it != where_.end(), "no tensor '", name, "' in the folder");
  return it->second;
}

// A read that fails after the header was checked (the file shrank, a disk error): the user's file.
template <typename Read>
auto users_read(Read read) {
  try {
    return read();
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(e.what());  // SafetensorsFile's message names the file and the tensor
  }
}

at::Tensor HfFolderTensors::read(const std::string& name) const {
  const auto [file, entry] = find(name);
  return users_read([&, file = file, entry = entry] { return file->read(*entry); });
}

void HfFolderTensors::read_into(const std::string& name, const at::Tensor& dest) const {
  const auto [file, entry] = find(name);
  users_read([&, file = file, entry = entry] {
    file->read_into(*entry, dest);
    return 0;
  });
}

namespace {

// The files of an export written as ".export-<name>" in dir; their names, in the order they go
// into place (the weights, config.json, the index last).
std::vector<std::string> stage_hf_files(const std::string& dir, const std::string& config_json,
                                        const NamedTensors& tensors, at::ScalarType dtype,
                                        int64_t max_shard_bytes) {
  NamedTensors converted;
  int64_t total = 0;
  for (const auto& [name, t] : tensors) {
    converted.emplace_back(name, t.detach().to(at::kCPU, t.is_floating_point() ? dtype : t.scalar_type()));
    total += static_cast<int64_t>(converted.back().second.nbytes());
  }
  std::sort(converted.begin(), converted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  std::vector<std::string> written;
  const auto stage = [&](const std::string& name, const std::string& bytes) {
    write_file_atomic((fs::path(dir) / (".export-" + name)).string(), bytes);
    written.push_back(name);
  };
  if (total <= max_shard_bytes) {
    stage(kSingle, safetensors_bytes(converted, meta));
    stage(kHfConfig, config_json);
    return written;
  }
  std::vector<NamedTensors> shards(1);
  int64_t in_shard = 0;
  for (auto& nt : converted) {
    const auto bytes = static_cast<int64_t>(nt.second.nbytes());
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += bytes;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    stage(name, safetensors_bytes(shards[i], meta));
    for (const auto& nt : shards[i]) weight_map[nt.first] = name;
  }
  stage(kHfConfig, config_json);
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  stage(kIndex, json_text(index, 2) + "\n");
  return written;
}

}  // namespace

NamedTensors read_hf_tensors(const std::string& dir) {
  const HfFolderTensors folder(dir);
  NamedTensors all;
  for (const StoredTensor& t : folder.tensors()) all.emplace_back(t.name, folder.read(t.name));
  return all;
}

// Every file is written aside first (".export-<name>"): a failure (a full disk, a dtype
// safetensors lacks) leaves an earlier export in the folder whole, where it deleted that
// export's weights before writing any, and removes what it wrote. Then renamed into place, the
// index last, and only then the earlier export's other weight files removed (they would be
// read instead of, or beside, the new ones). The folder's other files (a tokenizer's) stay.
void write_hf_folder(const std::string& dir, const std::string& config_json, const NamedTensors& tensors,
                     at::ScalarType dtype, int64_t max_shard_bytes) {
  fs::create_directories(dir);
  const auto remove_staged = [&] {  // an earlier failure's, or this one's
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind(".export-", 0) == 0) fs::remove(e.path(), ec);
  };
  remove_staged();
  std::vector<std::string> written;  // in the order they go into place
  try {
    written = stage_hf_files(dir, config_json, tensors, dtype, max_shard_bytes);
  } catch (...) {
    remove_staged();
    throw;
  }
  for (const std::string& name : written)
    fs::rename(fs::path(dir) / (".export-" + name), fs::path(dir) / name);
  const std::set<std::string> now(written.begin(), written.end());
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool weights = name == kSingle || name == kIndex ||
                         (name.rfind("model-", 0) == 0 && ends_with(name, ".safetensors"));
    if (weights && now.count(name) == 0) fs::remove(e.path());
  }
  fsync_folder(dir);
}

}  // namespace ddptrain
