#include "ddp/fully_sharded.h"

#include <algorithm>
#include <unordered_map>

#include <torch/csrc/autograd/engine.h>

#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

// The storage under t, emptied in place: every tensor on it (views autograd saved included)
// stays valid as metadata and sees the values again once allocate_storage refills it.
void release_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocate_storage(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  DDP_ASSERT(s->allocator(), "a unit's flat buffer has no allocator");
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

size_t flat_nbytes(const at::Tensor& flat) { return static_cast<size_t>(flat.numel()) * flat.element_size(); }

}  // namespace

BuiltShard shard_bucket(const std::vector<at::Tensor>& params, c10::Device device, const DistContext& ctx,
                        bool broadcast) {
  DDP_ASSERT(!params.empty());
  torch::NoGradGuard no_grad;
  const at::Tensor& first = params[0];
  std::vector<int64_t> numels;
  std::vector<size_t> all;
  for (const auto& p : params) {
    DDP_USAGE_CHECK(
        p.is_non_overlapping_and_dense() && p.scalar_type() == first.scalar_type() &&
            p.device() == first.device(),
        "zero_stage 3 needs dense parameters of one dtype and device per unit (a parameter of shape ",
        p.sizes(), " is ", p.scalar_type(), " on ", p.device(), ", the unit's first ", first.scalar_type(),
        " on ", first.device(), ")");
    all.push_back(numels.size());
    numels.push_back(p.numel());
  }
  if (broadcast && ctx.communicates())
    for (const auto& p : params) {  // rank 0's values, in place, before anything is cut
      std::vector<at::Tensor> one{p};
      ctx.broadcast(one, 0, "zero_stage 3: rank 0's weights of a unit built");
    }
  const BucketShards layout = shard_buckets(numels, {all}, ctx.world_size())[0];
  const at::TensorOptions options = first.options().device(device);
  BuiltShard out;
  // This rank's shard, cut from the parameters' memory order (ddp/shard_layout.h's pieces).
  out.shard = at::zeros({layout.shard_numel}, options);
  for (const ShardPiece& piece : layout.by_rank[static_cast<size_t>(ctx.rank())]) {
    const at::Tensor& p = params[piece.param];
    const at::Tensor memory_order = p.as_strided({p.numel()}, {1}, p.storage_offset());
    out.shard.narrow(0, piece.shard_offset, piece.length)
        .copy_(memory_order.narrow(0, piece.param_offset, piece.length));
  }
  // The flat buffer is only a storage of the right size that holds no memory (its bytes come
  // with each gather): the parameters become views into it, so their own memory is freed and
  // no full copy of the bucket ever exists here.
  out.flat = at::empty({0}, options);
  const auto nbytes = static_cast<size_t>(layout.shard_numel * ctx.world_size()) * first.element_size();
  out.flat.storage().unsafeGetStorageImpl()->set_nbytes(nbytes);
  out.flat.unsafeGetTensorImpl()->set_sizes_contiguous({layout.shard_numel * ctx.world_size()});
  int64_t off = 0;
  for (const auto& p : params) {
    at::Tensor(p).set_data(out.flat.as_strided(p.sizes(), p.strides(), off));
    off += p.numel();
    out.params.push_back(p);
  }
  release_storage(out.flat);
  return out;
}

std::vector<std::vector<size_t>> unit_buckets(const std::vector<at::Tensor>& params, const Units* units) {
  std::unordered_map<const void*, size_t> index_of;
  for (size_t i = 0; i < params.size(); ++i) index_of[params[i].unsafeGetTensorImpl()] = i;
  const size_t n_units = units ? units->size() : 0;
  std::vector<int> unit_of(params.size(), -1);
  for (size_t u = 0; u < n_units; ++u)
    for (const auto& p : units->modules()[u]->parameters()) {
      auto it = index_of.find(p.unsafeGetTensorImpl());
      if (it == index_of.end()) continue;  // frozen: not DDP's
      DDP_USAGE_CHECK(unit_of[it->second] < 0 || unit_of[it->second] == static_cast<int>(u),
                      "a parameter (shape ", p.sizes(), ") is in units ", unit_of[it->second], " and ", u,
                      "; under zero_stage 3 a parameter belongs to one unit (Note [Units])");
      unit_of[it->second] = static_cast<int>(u);
    }
  std::vector<std::vector<size_t>> buckets;
  for (int u = static_cast<int>(n_units) - 1; u >= -1; --u) {  // the last unit first, the root (-1) last
    std::vector<size_t> b;
    for (size_t i = params.size(); i-- > 0;)  // reverse order, as gradients arrive
      if (unit_of[i] == u) b.push_back(i);
    if (!b.empty()) buckets.push_back(std::move(b));
  }
  return buckets;
}

void check_unit_parameters_stay_in_their_units(const torch::nn::Module& model, const Units& units) {
  // LibTorch lists a tensor once per name it is registered under. Trainable ones only: a frozen
  // parameter is never sharded nor freed (not DDP's). One in two units is unit_buckets' to name.
  std::unordered_map<const void*, std::vector<std::string>> names_in_model;
  for (const auto& p : model.named_parameters())
    if (p.value().requires_grad()) names_in_model[p.value().unsafeGetTensorImpl()].push_back(p.key());
  std::unordered_map<const void*, size_t> in_units;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& p : units.modules()[u]->parameters())
      if (p.requires_grad()) ++in_units[p.unsafeGetTensorImpl()];
  for (size_t u = 0; u < units.size(); ++u)  // in order: every rank names the same one
    for (const auto& p : units.modules()[u]->parameters()) {
      const auto it = names_in_model.find(p.unsafeGetTensorImpl());
      if (it == names_in_model.end() || it->second.size() <= in_units[p.unsafeGetTensorImpl()]) continue;
      std::string names;
      for (const auto& name : it->second) names += str(names.empty() ? "" : ", ", "'", name, "'");
      throw UsageError(
          str("under zero_stage 3 a parameter of unit ", u, " ('", units.name(u),
              "') is registered outside it too (", names, "): the unit frees it after its ",
              "forward and the other place would read freed memory. A weight used in two ",
              "places (tied) belongs to the root: leave its module out of the units (Note [Units])"));
    }
}

FullyShardedParams::FullyShardedParams(std::vector<at::Tensor> params,
                                       std::vector<std::vector<size_t>> buckets, Units* units,
                                       const DistContext& ctx)
    : params_(std::move(params)), buckets_(std::move(buckets)), units_(units), ctx_(ctx) {
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel());
  layout_ = shard_buckets(numels, buckets_, ctx_.world_size());
  std::vector<int> bucket_of(params_.size(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b]) bucket_of[i] = static_cast<int>(b);
  std::unordered_map<const void*, size_t> index_of;
  for (size_t i = 0; i < params_.size(); ++i) index_of[params_[i].unsafeGetTensorImpl()] = i;
  std::vector<char> in_unit(buckets_.size(), 0);
  for (size_t u = 0; units_ && u < units_->size(); ++u) {
    int b = -1;
    for (const auto& p : units_->modules()[u]->parameters()) {
      auto it = index_of.find(p.unsafeGetTensorImpl());
      if (it != index_of.end()) b = bucket_of[it->second];
    }
    bucket_of_unit_.push_back(b);
    if (b >= 0) in_unit[static_cast<size_t>(b)] = 1;
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!in_unit[b]) root_ = static_cast<int>(b);

  std::vector<int> unit_of_bucket(buckets_.size(), -1);
  for (size_t u = 0; u < bucket_of_unit_.size(); ++u)
    if (bucket_of_unit_[u] >= 0)
      unit_of_bucket[static_cast<size_t>(bucket_of_unit_[u])] = static_cast<int>(u);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<at::Tensor> ps;
    for (size_t i : buckets_[b]) ps.push_back(params_[i]);
    const BuiltShard* built = units_ && unit_of_bucket[b] >= 0
                                  ? units_->built_shard(static_cast<size_t>(unit_of_bucket[b]))
                                  : nullptr;
    const BuiltShard s = built ? *built : shard_bucket(ps, ps[0].device(), ctx_, false);
    DDP_ASSERT(s.params.size() == ps.size() &&
                   std::equal(ps.begin(), ps.end(), s.params.begin(),
                              [](const at::Tensor& a, const at::Tensor& c) { return a.is_same(c); }) &&
                   s.shard.numel() == layout_[b].shard_numel,
               "unit ", unit_of_bucket[b], " was sharded as built in another layout than its bucket's");
    shard_.push_back(s.shard);
    flat_.push_back(s.flat);
  }
  if (units_) units_->clear_built_shards();
  gathered_.assign(buckets_.size(), 0);
  in_flight_.resize(buckets_.size());
  if (units_) units_->set_hooks(this);
}

FullyShardedParams::~FullyShardedParams() {
  if (units_) units_->set_hooks(nullptr);
  for (auto& w : in_flight_)
    if (w) try {
        w->wait();
      } catch (...) {  // an error path: the job is ending anyway
      }
}

int FullyShardedParams::bucket_of_unit(size_t unit) const {
  return unit < bucket_of_unit_.size() ? bucket_of_unit_[unit] : -1;
}

void FullyShardedParams::gather(size_t b, bool wait) {
  if (!gathered_[b]) {
    allocate_storage(flat_[b], flat_nbytes(flat_[b]));
    std::vector<at::Tensor> per_rank = flat_[b].chunk(ctx_.world_size());
    in_flight_[b] = ctx_.all_gather_async(shard_[b], per_rank, str("zero_stage 3 parameters of bucket ", b));
    gathered_[b] = 1;
    ++gathers_issued_;
    peak_ = std::max(peak_, held_bytes());
  }
  if (wait) settle(b);
}

void FullyShardedParams::settle(size_t b) {
  if (!in_flight_[b]) return;
  ctx_.wait(in_flight_[b], "zero_stage 3: all_gather of a unit's parameters");
  in_flight_[b].reset();
}

void FullyShardedParams::gather_ahead(int unit, int direction) {
  for (int u = unit; u >= 0 && u < static_cast<int>(bucket_of_unit_.size()); u += direction)
    if (const int b = bucket_of_unit(static_cast<size_t>(u));
        b >= 0 && (direction > 0 || backward_reads_parameters(static_cast<size_t>(u)))) {
      gather(static_cast<size_t>(b), false);
      return;
    }
}

void FullyShardedParams::release(size_t b) {
  if (!gathered_[b]) return;
  settle(b);  // never free memory a collective is writing
  release_storage(flat_[b]);
  gathered_[b] = 0;
}

at::Tensor FullyShardedParams::forward(const std::function<at::Tensor(const at::Tensor&)>& fn,
                                       const at::Tensor& x) {
  armed_ = false;
  if (root_ >= 0) ensure(static_cast<size_t>(root_));
  gather_ahead(0, +1);  // the first unit
  at::Tensor out = fn(x);
  if (at::GradMode::is_enabled() && out.requires_grad())
    out.register_hook([this](const at::Tensor&) { arm_final_release(); });
  else
    release_all();  // evaluation: nothing is kept
  return out;
}

void FullyShardedParams::before_forward(size_t unit) {
  const int b = bucket_of_unit(unit);
  if (b < 0) return;
  ensure(static_cast<size_t>(b));
  gather_ahead(static_cast<int>(unit) + 1, +1);  // overlap the next unit's gather with this one
}

void FullyShardedParams::after_forward(size_t unit, const std::vector<at::Tensor>& outputs) {
  const int b = bucket_of_unit(unit);
  if (b < 0) return;
  // Whichever output's gradient comes first gathers the unit; the other's finds it gathered.
  for (const at::Tensor& output : outputs)
    if (at::GradMode::is_enabled() && output.defined() && output.requires_grad())
      output.register_hook([this, unit](const at::Tensor&) { pre_backward(unit); });
  release(static_cast<size_t>(b));
}

bool FullyShardedParams::backward_reads_parameters(size_t unit) const {
  return !units_ || units_->backward_reads_parameters(unit);
}

void FullyShardedParams::pre_backward(size_t unit) {
  arm_final_release();
  if (backward_reads_parameters(unit)) ensure(static_cast<size_t>(bucket_of_unit(unit)));
  gather_ahead(static_cast<int>(unit) - 1, -1);  // the unit before runs its backward next
}

void FullyShardedParams::arm_final_release() {
  if (armed_) return;
  armed_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] {
    release_all();
    armed_ = false;
  });
}

void FullyShardedParams::gather_all() {
  for (size_t b = 0; b < buckets_.size(); ++b) gather(b, false);
  for (size_t b = 0; b < buckets_.size(); ++b) ensure(b);
}

void FullyShardedParams::release_all() {
  for (size_t b = 0; b < buckets_.size(); ++b) release(b);
}

void FullyShardedParams::refresh_shards() {
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    DDP_ASSERT(gathered_[b] && !in_flight_[b], "refresh_shards needs every unit gathered");
    const int64_t n = shard_[b].numel();
    shard_[b].copy_(flat_[b].narrow(0, ctx_.rank() * n, n));
  }
}

int64_t FullyShardedParams::held_bytes() const {
  int64_t n = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    n += static_cast<int64_t>(shard_[b].nbytes());
    if (gathered_[b]) n += static_cast<int64_t>(flat_nbytes(flat_[b]));
  }
  return n;
}

}  // namespace ddptrain
