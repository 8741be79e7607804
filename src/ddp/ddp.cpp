#include "ddp/ddp.h"

#include <sstream>
#include <unordered_set>

#include "ddp/sync_batchnorm.h"
#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

bool has_sync_batchnorm(const torch::nn::Module& module) {
  for (const auto& m : module.modules())
    if (dynamic_cast<const SyncBatchNormImpl*>(m.get())) return true;
  return false;
}

}  // namespace

// Note [Unused parameters and collectives in backward]: with find_unused_parameters a bucket
// holding a parameter this rank's forward left out is launched only when backward ends, and
// which parameters those are may differ between the ranks. Where backward runs collectives of
// its own (zero_stage 3's gathers of each unit, SyncBatchNorm's all-reduces), ranks whose
// buckets launch at other points would issue them in other orders: Gloo aborts on the sizes,
// NCCL waits (or mixes equal sizes). So there every bucket launches after backward: the same
// order on every rank, for the whole unsharded gradient held once at the end of backward (a
// warning says how much: at stage 3 that is what sharding saves).
void DistributedDataParallel::launch_buckets_after_backward_if_needed() {
  const char* why = opts_.backward_has_collectives ? "zero_stage 3 gathers units during backward"
                    : has_sync_batchnorm(*module_) ? "SyncBatchNorm all-reduces during backward"
                                                   : nullptr;
  if (why == nullptr) return;
  opts_.reducer.overlap = false;
  int64_t bytes = 0;
  for (const auto& p : params_) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  ctx_.log().warn(str("find_unused_parameters: gradient buckets are reduced after backward, not during it (",
                      why, "): the whole gradient, ", bytes >> 20,
                      " MiB, is held once at backward's end; leave the flag off where every rank uses every "
                      "parameter (Note [Unused parameters and collectives in backward])"));
}

void DistributedDataParallel::check_still_frozen() const {
  if (!ctx_.communicates()) return;  // nothing is reduced: the optimizer steps what it holds
  for (size_t i = 0; i < frozen_.size(); ++i)
    DDP_USAGE_CHECK(!frozen_[i].requires_grad(), "parameter '", frozen_names_[i],
                    "' was frozen (requires_grad false) when DistributedDataParallel (the Trainer) was built "
                    "and requires a gradient now: its gradient is not reduced, so each rank would step it "
                    "with its own and the replicas would part; set requires_grad before building the "
                    "Trainer and its optimizer (a later unfreezing is another run: TrainerOptions::init_from "
                    "from this one's checkpoint)");
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 const DistContext& ctx, DdpSetup opts)
    : module_(std::move(module)), ctx_(ctx), opts_(opts) {
  std::vector<std::string> names;
  std::unordered_set<const void*> seen;
  for (auto& p : module_->named_parameters()) {
    // LibTorch lists a tensor registered under two names twice (a submodule registered twice,
    // a TorchScript model's tied weights mirrored from two submodules); PyTorch's
    // named_parameters, and so its DDP, once: the first name holds it.
    if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
    if (p.value().requires_grad()) {
      names.push_back(p.key());
      params_.push_back(p.value());
    } else {
      frozen_names_.push_back(p.key());
      frozen_.push_back(p.value());
    }
  }
  for (auto& b : module_->buffers()) buffers_.push_back(b);
  // The module on this rank's device (a GPU's when there is one: DistContext picks it), else
  // the first step fails inside LibTorch or a collective; the same on every rank, before any.
  for (auto& p : module_->named_parameters())
    DDP_USAGE_CHECK(p.value().device() == ctx_.device(), "the module's parameter '", p.key(), "' is on ",
                    p.value().device(), " and this rank's device is ", ctx_.device(),
                    ": move the module there (module->to(ctx.device())) before building its optimizer, ",
                    "DistributedDataParallel or the Trainer");
  if (!ctx_.communicates()) return;

  verify_replicas(names);
  // Every rank starts from rank 0's weights, whatever its own initialisation did: the frozen
  // ones too (a frozen projection drawn after a seed per rank differed for the whole run).
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> state = params_;
  state.insert(state.end(), frozen_.begin(), frozen_.end());
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  for (auto& t : state) {
    // A unit sharded as built holds no memory here: it had rank 0's weights then (Note [Units
    // sharded as built]).
    if (t.numel() > 0 && t.storage().nbytes() == 0) continue;
    std::vector<at::Tensor> one{t};
    ctx_.broadcast(one, 0, "DDP start-up broadcast of rank 0's weights");
  }
  if (opts_.reducer.find_unused_parameters && opts_.reducer.overlap)
    launch_buckets_after_backward_if_needed();
  reducer_ = std::make_unique<Reducer>(params_, names, ctx_, opts_.reducer);
}

// Rank 0's description of its parameters goes to every rank (length, then bytes); each rank
// compares it with its own, and one all-reduce tells every rank whether any rank differs, so
// all of them fail together instead of hanging in a mismatched collective.
void DistributedDataParallel::verify_replicas(const std::vector<std::string>& names) {
  // Given buckets (ZeRO stage 3's, one per unit: Note [Units]) and whether a parameter was
  // sharded as built (no start-up broadcast) are compared too: ranks whose units differ would
  // gather different shards in their first forward, a hang till the timeout.
  std::vector<int64_t> bucket_of(params_.size(), -1);
  for (size_t b = 0; b < opts_.reducer.buckets.size(); ++b)
    for (const size_t i : opts_.reducer.buckets[b])
      if (i < bucket_of.size()) bucket_of[i] = static_cast<int64_t>(b);
  std::ostringstream os;
  for (size_t i = 0; i < params_.size(); ++i) {
    os << names[i] << ' ' << params_[i].sizes() << ' ' << c10::toString(params_[i].scalar_type());
    if (bucket_of[i] >= 0) os << " bucket " << bucket_of[i];
    if (params_[i].numel() > 0 && params_[i].storage().nbytes() == 0) os << " sharded as built";
    os << '\n';
  }
  for (size_t i = 0; i < frozen_.size(); ++i)
    os << frozen_names_[i] << ' ' << frozen_[i].sizes() << ' ' << c10::toString(frozen_[i].scalar_type())
       << " frozen\n";
  const std::string mine = os.str();
  std::vector<at::Tensor> len{at::tensor({static_cast<int64_t>(mine.size())}, at::kLong)};
  ctx_.broadcast(len, 0, "DDP replica check");
  std::vector<at::Tensor> bytes{at::zeros({len[0].item<int64_t>()}, at::kByte)};
  if (ctx_.is_main()) std::memcpy(bytes[0].data_ptr(), mine.data(), mine.size());
  ctx_.broadcast(bytes, 0, "DDP replica check");
  const std::string theirs(static_cast<const char*>(bytes[0].data_ptr()),
                           static_cast<size_t>(bytes[0].numel()));

  // Per rank: 1 when it differs from rank 0.
  std::vector<at::Tensor> differs{at::zeros({ctx_.world_size()}, at::kLong)};
  differs[0][ctx_.rank()] = static_cast<int64_t>(mine != theirs);
  ctx_.all_reduce_sum(differs);
  if (differs[0].sum().item<int64_t>() == 0) return;

  std::string detail;
  if (mine != theirs) {
    std::istringstream a(theirs), b(mine);
    std::string la, lb;
    size_t line = 0;
    while (true) {
      bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
      if (!ga || !gb || la != lb) {
        detail = str(": parameter #", line, " is '", ga ? la : "<none>", "' on rank 0 but '",
                     gb ? lb : "<none>", "' here");
        break;
      }
      ++line;
    }
  } else {
    for (int r = 0; r < ctx_.world_size(); ++r)
      if (differs[0][r].item<int64_t>() != 0) {
        detail = str(": rank ", r, "'s model differs from rank 0's (its log names the parameter)");
        break;
      }
  }
  throw Error(str("[rank ", ctx_.rank(), "/", ctx_.world_size(),
                  "] DDP: the ranks do not build the same model", detail,
                  "; every rank must construct the model with the same flags (and, under zero_stage 3, ",
                  "name the same Units: Note [Units])"));
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : reducer_(ddp.reducer_.get()), previous_(reducer_ ? reducer_->sync() : true) {
  if (reducer_) reducer_->set_sync(false);
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  if (reducer_) reducer_->set_sync(previous_);
}

ReducerStats DistributedDataParallel::take_stats() {
  return reducer_ ? reducer_->take_stats() : ReducerStats{};
}

void DistributedDataParallel::sync_buffers() {
  if (!opts_.broadcast_buffers || !ctx_.communicates() || buffers_.empty()) return;
  torch::NoGradGuard no_grad;
  // One broadcast for all buffers whatever their dtypes: their bytes, packed. Each broadcast
  // is a synchronisation point of all ranks, so one instead of one per dtype matters.
  std::vector<at::Tensor> bytes;
  for (auto& b : buffers_) bytes.push_back(b.contiguous().reshape(-1).view(at::kByte));
  std::vector<at::Tensor> flat{at::cat(bytes)};
  ctx_.broadcast(flat, 0, "buffer broadcast before forward (broadcast_buffers)");
  int64_t off = 0;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const int64_t n = bytes[i].numel();
    buffers_[i].view(-1).view(at::kByte).copy_(flat[0].narrow(0, off, n));  // 0-dim counters: view(-1) first
    off += n;
  }
}

}  // namespace ddptrain
