// `ddptrain export --checkpoint DIR --format pt|safetensors --out FILE`: the weights of a
// verified checkpoint (or the newest in a --checkpoint_dir) for other tools. pt: the state_dict that Python's
// torch.load(weights_only=True) reads; safetensors: the Hugging Face format.
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "config/flag_table.h"
#include "serialize/python_pickle.h"
#include "serialize/safetensors.h"
#include "serialize/state_dict_reader.h"
#include "tools/commands.h"
#include "util/error.h"
#include "util/files.h"

namespace ddptrain {

int cmd_export(const std::vector<std::string>& args) {
  const char* usage = "usage: ddptrain export --checkpoint DIR --format pt|safetensors --out FILE";
  std::string checkpoint, format = "pt", out;
  std::vector<Flag> table = {
      bind_flag("checkpoint", &checkpoint, "a checkpoint, or a --checkpoint_dir (its newest)"),
      bind_flag("format", &format, "pt (torch.load, weights_only) or safetensors"),
      bind_flag("out", &out, "file to write (written atomically)"),
  };
  if (wants_help(args)) {
    std::printf("%s", flags_help(table, usage).c_str());
    return 0;
  }
  auto positional = parse_flags(table, args);
  DDP_USAGE_CHECK(positional.empty(), "export takes no positional argument ('",
                  positional.empty() ? "" : positional[0], "'); ", usage);
  DDP_USAGE_CHECK(!checkpoint.empty(), "--checkpoint is required; ", usage);
  DDP_USAGE_CHECK(!out.empty(), "--out is required; ", usage);
  DDP_USAGE_CHECK(!std::filesystem::is_directory(out), "--out='", out,
                  "' is a folder; pass a file path (e.g. ", out, "/model.", format, ")");
  DDP_USAGE_CHECK(format == "pt" || format == "safetensors", "--format='", format,
                  "' must be pt or safetensors");
  checkpoint = resolve_checkpoint(checkpoint);
  verify_checkpoint(checkpoint);  // manifest and checksums: never export damaged weights
  const std::string model_pt = checkpoint + "/model.pt";
  std::string bytes = read_file(model_pt);
  if (format == "safetensors")
    bytes = safetensors_bytes(unpickle_tensors(bytes, model_pt), {{"format", "pt"}, {"source", checkpoint}});
  create_parent_folder(out);
  write_file_atomic(out, bytes);
  std::printf("wrote %s (%s, %zu bytes)\n", out.c_str(), format.c_str(), bytes.size());
  return 0;
}

}  // namespace ddptrain
