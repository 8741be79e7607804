#include "config/hf_init_flags.h"

#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/hf_folder.h"
#include "models/hf_model.h"
#include "util/error.h"

namespace ddptrain {
// --init_from_hf DIR: the model (gpt or llama) and its sizes from DIR/config.json (recorded in
// the run's config.json as plain sizes), its initial weights from DIR (the Trainer's init_from).
// A flag the command line or its --config file gives must agree with the config: one at its
// default value (say --rope_theta 10000 beside a config's 500000) gave way to the config
// without a word, as ModelOptions cannot tell a default from a value given.
void from_hugging_face(TrainConfig& c, const std::vector<Flag>& table, const std::vector<std::string>& args) {
  const std::set<std::string> given = flags_given(args);
  std::string& dir = c.model.init_from_hf;
  dir = std::filesystem::absolute(dir).lexically_normal().string();
  const std::filesystem::path root(dir);
  DDP_USAGE_CHECK(std::filesystem::is_regular_file(root / kHfConfig), "--init_from_hf='", dir, "' holds no ",
                  kHfConfig, ": pass a folder written by transformers' save_pretrained");
  DDP_USAGE_CHECK(
      is_hf_folder(dir), "--init_from_hf='", dir, "' holds neither ", kHfSingle, " nor ", kHfIndex,
      " (weights in another format, such as pytorch_model.bin, are not read): save the model with ",
      "save_pretrained(..., safe_serialization=True)");
  const std::string& init = c.trainer.checkpoint.init_from;
  DDP_USAGE_CHECK(init.empty() || std::filesystem::absolute(init).lexically_normal().string() == dir,
                  "--init_from and --init_from_hf both give initial weights: drop --init_from");
  std::map<std::string, std::string> before;
  for (const Flag& f : table)
    if (given.count(f.name) && f.name != "init_from_hf" && f.name != "init_from") before[f.name] = f.get();
  try {
    apply_hf_config(read_hf_config(dir), dir + "/config.json", c.model);
  } catch (const OptionError& e) {
    throw UsageError(in_flag_words(e, table));
  }
  for (const auto& [name, value] : before) {
    const std::string now = find_flag(table, name)->get();
    DDP_USAGE_CHECK(now == value, "--", name, "=", value, " differs from the ", now, " of --init_from_hf's ",
                    kHfConfig, " (", dir, "): drop --", name, " (the folder's config decides the model)");
  }
  c.trainer.checkpoint.init_from = dir;
}

}  // namespace ddptrain
