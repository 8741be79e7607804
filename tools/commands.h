// The subcommands of the ddptrain binary. Each returns the process exit code and may throw
// UsageError (exit 2) or other errors (exit 1); main() maps them.
#pragma once

#include <string>
#include <vector>

namespace ddptrain {

struct TrainConfig;
class DistContext;

int cmd_train(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
int cmd_plot(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_launch(const std::vector<std::string>& args, const std::string& self_exe);

/// --checkpoint of eval and export: a checkpoint, or a folder of them (a --checkpoint_dir),
/// meaning its newest; UsageError naming the path and the fix for anything else.
std::string resolve_checkpoint(const std::string& path);

/// The train flags a checkpoint's config.json records, less where the run read its initial
/// weights and wrote its outputs (eval and export build the model from them).
std::vector<std::string> checkpoint_train_flags(const std::string& checkpoint);

/// Intra-op threads (process-wide, so the program's, for train and eval): --threads, or the
/// cores shared among the local ranks; warns where the ranks' threads outnumber the cores.
void set_intra_op_threads(const TrainConfig& cfg, const DistContext& ctx);

}  // namespace ddptrain
