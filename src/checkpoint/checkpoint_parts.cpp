// The parts a checkpoint is made of (checkpoint.h): a module's state_dict, an optimizer's
// state (or, under ZeRO, its shard files), a user's named tensors.
#include <mutex>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/optimizer_shards.h"
#include "serialize/python_pickle.h"
#include "serialize/state_dict_reader.h"

namespace ddptrain {

CheckpointPart module_part(std::string name, torch::nn::Module& module) {
  return {std::move(name),
          [&module] { return pickle_tensors(state_dict(module)); },
          [&module](const std::string& bytes, const std::string& origin) {
            load_state_dict(module, unpickle_tensors(bytes, origin), origin);
          },
          {},
          {},
          {},
          {}};
}

CheckpointPart optimizer_part(std::string name, torch::optim::Optimizer& optimizer) {
  return {name,
          [&optimizer] {
            std::string bytes;
            torch::serialize::OutputArchive archive;
            optimizer.save(archive);
            archive.save_to([&](const void* d, size_t n) {
              bytes.append(static_cast<const char*>(d), n);
              return n;
            });
            return bytes;
          },
          [&optimizer](const std::string& bytes, const std::string&) {
            // LibTorch reads an archive with its TorchScript loader, which is not documented
            // as thread-safe: ranks that are threads of one process (the in-process tests)
            // read one at a time. Processes are unaffected.
            static std::mutex archive_reading;
            std::lock_guard<std::mutex> lock(archive_reading);
            torch::serialize::InputArchive archive;
            archive.load_from(bytes.data(), bytes.size());
            optimizer.load(archive);
          },
          {},
          {},
          {},
          // A sharded run's checkpoint: the state is in its shard files (Note [Optimizer shard files]).
          [&optimizer, name](const PartFiles& files) {
            load_optimizer_shards(optimizer, name, files, nullptr, files.dir);
          }};
}

CheckpointPart tensors_part(std::string name, NamedTensors& tensors) {
  return {std::move(name),
          [&tensors] { return pickle_tensors(tensors); },
          [&tensors](const std::string& bytes, const std::string& origin) {
            tensors = unpickle_tensors(bytes, origin);
          },
          {},
          {},
          {},
          {}};
}

std::vector<CheckpointPart> training_parts(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  return {module_part("model", model), optimizer_part("optimizer", optimizer)};
}

}  // namespace ddptrain
