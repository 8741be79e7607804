#include "checkpoint/optimizer_shards.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "ddp/optimizer_state.h"
#include "serialize/python_pickle.h"
#include "serialize/state_dict_reader.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/torch_compat.h"

namespace ddptrain {
namespace {

constexpr int kShardsFormat = 1;

std::string shard_file(const std::string& name, int rank) {
  return name + ".shard" + std::to_string(rank) + ".pt";
}
std::string layout_file(const std::string& name) { return name + ".shards.json"; }

// Rank 0: the layout (Note [Optimizer shard files]).
std::string layout_json(const torch::optim::Optimizer& full, int fields, int64_t numel,
                        const std::vector<int64_t>& steps,
                        const std::vector<std::vector<ShardFilePiece>>& by_rank) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& g : full.param_groups())
    for (const auto& p : g.params())
      params.push_back(
          {{"shape", p.sizes().vec()}, {"memory_order", memory_order(p)}, {"step", steps.at(params.size())}});
  nlohmann::json pieces = nlohmann::json::array();
  for (const auto& rank : by_rank) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& pc : rank) list.push_back({pc.key, pc.param_offset, pc.offset, pc.length});
    pieces.push_back(std::move(list));
  }
  const nlohmann::json j = {
      {"format", kShardsFormat},
      {"optimizer", optimizer_kind_name(optimizer_kind(full))},
      {"fields", fields},
      {"world", by_rank.size()},
      {"numel", numel},
      {"step", *std::max_element(steps.begin(), steps.end())},  // read before steps per parameter
      {"params", params},
      {"pieces", pieces}};
  return json_text(j) + "\n";
}

// The shard file's [fields, numel] rows, checked.
at::Tensor read_rows(const PartFiles& files, const std::string& file, int fields, int64_t numel,
                     const std::string& origin) {
  const auto bytes = files.read(file);
  DDP_CHECK(bytes.has_value(), "checkpoint '", origin, "' lacks ", file,
            " (its layout names it): incomplete");
  for (auto& [key, t] : unpickle_tensors(*bytes, origin + "/" + file))
    if (key == "state") {
      DDP_CHECK(t.dim() == 2 && t.size(0) == fields && t.size(1) == numel, "checkpoint '", origin,
                "': ", file, " holds ", t.sizes(), ", its layout says [", fields, ", ", numel, "]");
      return t;
    }
  throw Error(detail::concat("checkpoint '", origin, "': ", file, " has no \"state\" tensor"));
}

// A parameter's state assembled from the pieces: one flat buffer per field, in the memory order
// the checkpoint's run had.
struct Assembled {
  std::vector<at::Tensor> flat;
  int64_t covered = 0;
};

// The assembled elements in the checkpoint's memory order -> a tensor laid out like `param`.
at::Tensor to_param_layout(const at::Tensor& flat, const nlohmann::json& info, const at::Tensor& param) {
  const auto shape = info.at("shape").get<std::vector<int64_t>>();
  const auto order = info.at("memory_order").get<std::vector<int64_t>>();
  std::vector<int64_t> permuted, inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    permuted.push_back(shape[static_cast<size_t>(order[i])]);
    inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  }
  at::Tensor logical = flat.view(permuted).permute(inverse);
  // In the parameter's dtype, as the optimizer made its state: a shard file of a model with
  // parameters of several dtypes holds its rows in the widest (at::cat promotes), exactly.
  return at::empty_like(param).copy_(logical);
}

}  // namespace

void save_optimizer_shards(const DistContext& ctx, const torch::optim::Optimizer& full,
                           const std::string& name, const at::Tensor& mine,
                           const std::vector<std::vector<ShardFilePiece>>& by_rank,
                           const std::vector<int64_t>& steps, const PartFiles& files) {
  const int fields = static_cast<int>(mine.size(0));
  for (int r = 0; r < ctx.world_size(); ++r) {
    std::vector<at::Tensor> t{r == ctx.rank() ? mine : at::empty_like(mine)};
    ctx.broadcast(t, r, "ZeRO optimizer shard for a checkpoint");  // Note [Optimizer shard files]
    if (ctx.is_main()) files.write(shard_file(name, r), pickle_tensors({{"state", t[0].cpu()}}));
    if (files.sync && r + 1 < ctx.world_size()) files.sync();  // the next broadcast waits for the write
  }
  if (ctx.is_main()) files.write(layout_file(name), layout_json(full, fields, mine.size(1), steps, by_rank));
}

bool load_optimizer_shards(torch::optim::Optimizer& full, const std::string& name, const PartFiles& files,
                           const std::set<const void*>* wanted, const std::string& origin,
                           std::set<const void*>* with_state) {
  const auto text = files.read(layout_file(name));
  if (!text) return false;
  const nlohmann::json j = nlohmann::json::parse(*text);
  const int fields = j.at("fields").get<int>();
  const std::string kind = j.at("optimizer").get<std::string>();
  DDP_CHECK(kind == optimizer_kind_name(optimizer_kind(full)) && fields == state_fields(full), "checkpoint '",
            origin, "' holds the state of ", kind, " (", fields,
            " tensors per parameter); this run's optimizer is ", optimizer_kind_name(optimizer_kind(full)),
            " (", state_fields(full),
            "): resume with the same optimizer (with AMSGrad, the same groups using it; shard files "
            "before 2026-12-06 left out the maximum of a group that set amsgrad where the defaults did not)");
  std::vector<at::Tensor> params;
  std::vector<size_t> group;
  for (size_t g = 0; g < full.param_groups().size(); ++g)
    for (const auto& p : full.param_groups()[g].params()) params.push_back(p), group.push_back(g);
  DDP_CHECK(j.at("params").size() == params.size(), "checkpoint '", origin, "': its optimizer had ",
            j.at("params").size(), " parameters, this one has ", params.size(), ": another model");
  // Every parameter's shape, on every rank: a rank that checked only the ones it needs would
  // stop alone, the others waiting in the next collective.
  for (size_t key = 0; key < params.size(); ++key)
    DDP_CHECK(j.at("params")[key].at("shape").get<std::vector<int64_t>>() == params[key].sizes().vec(),
              "checkpoint '", origin, "': optimizer parameter ", key, " had shape ",
              j.at("params")[key].at("shape").dump(), ", here ", params[key].sizes(), ": another model");
  // A parameter's own step count; -1: it had no state (no step used it yet), as it would have
  // none at stage 0. Checkpoints of an older ddptrain hold one count for all.
  const auto step_of = [&j](size_t key) {
    const nlohmann::json& info = j.at("params")[key];
    return info.contains("step") ? info.at("step").get<int64_t>() : j.at("step").get<int64_t>();
  };
  if (with_state)  // files of an older ddptrain hold no count per parameter: none is named
    for (size_t key = 0; key < params.size(); ++key)
      if (j.at("params")[key].contains("step") && step_of(key) >= 0)
        with_state->insert(params[key].unsafeGetTensorImpl());
  auto needed = [&](int64_t key) {
    return !wanted || wanted->count(params[static_cast<size_t>(key)].unsafeGetTensorImpl()) > 0;
  };
  std::map<int64_t, Assembled> state;
  const int64_t numel = j.at("numel").get<int64_t>();
  for (size_t r = 0; r < j.at("pieces").size(); ++r) {
    const nlohmann::json& pieces = j.at("pieces")[r];
    if (std::none_of(pieces.begin(), pieces.end(),
                     [&](const auto& pc) { return needed(pc[0].template get<int64_t>()); }))
      continue;  // this rank's shard holds nothing this rank needs: not read
    const at::Tensor rows = read_rows(files, shard_file(name, static_cast<int>(r)), fields, numel, origin);
    for (const auto& pc : pieces) {
      const auto [key, param_offset, offset, length] = pc.get<std::array<int64_t, 4>>();
      if (!needed(key)) continue;
      const at::Tensor& p = params[static_cast<size_t>(key)];
      Assembled& a = state[key];
      if (a.flat.empty())
        for (int f = 0; f < fields; ++f) a.flat.push_back(at::zeros({p.numel()}, rows.options()));
      for (int f = 0; f < fields; ++f)
        a.flat[static_cast<size_t>(f)]
            .narrow(0, param_offset, length)
            .copy_(rows[f].narrow(0, offset, length));
      a.covered += length;
    }
  }
  for (auto& [key, a] : state) {
    const at::Tensor& p = params[static_cast<size_t>(key)];
    DDP_CHECK(a.covered == p.numel(), "checkpoint '", origin, "': its shard files hold ", a.covered,
              " of the ", p.numel(), " elements of optimizer parameter ", key, ": incomplete");
    const int64_t step = step_of(static_cast<size_t>(key));
    if (step < 0 || !group_has_state(full, group[static_cast<size_t>(key)])) continue;
    std::vector<at::Tensor> tensors;
    for (const auto& flat : a.flat)
      tensors.push_back(to_param_layout(flat, j.at("params")[static_cast<size_t>(key)], p));
    tensors.resize(static_cast<size_t>(group_state_fields(full, group[static_cast<size_t>(key)])));
    full.state()[compat::optimizer_state_key(p)] = make_state(full, tensors, step);
  }
  return true;
}

void save_sharded_optimizer(const ShardedOptimizer& sharded, const std::string& name,
                            const PartFiles& files) {
  const std::optional<StateShards> shards = sharded.state_shards();
  if (shards)
    save_optimizer_shards(sharded.context(), sharded.full(), name, shards->mine, shards->by_rank,
                          shards->steps, files);
}

void load_sharded_optimizer(ShardedOptimizer& sharded, const std::string& name, const PartFiles& files,
                            const std::string& origin) {
  const std::set<const void*> wanted = sharded.owned_parameters();
  std::set<const void*> with_state;
  const bool loaded = load_optimizer_shards(sharded.full(), name, files, &wanted, origin, &with_state);
  sharded.say_dropped_state(with_state);
  sharded.adopt_loaded_state(loaded);
}

}  // namespace ddptrain
