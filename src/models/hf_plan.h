// Where each tensor of a ddptrain model comes from in a Hugging Face folder, decided from the
// files' headers alone (models/hf_gpt2.h and hf_llama.h make one per family, after checking
// every name, shape and dtype), and the reads that follow it: each tensor straight into the
// model's own parameter where the layout allows, so a load holds no second copy of the model,
// and one unit at a time under ZeRO-3 (Note [Units sharded as built]).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "serialize/tensor_source.h"

namespace ddptrain {

struct HfSource {
  std::string stored;                 // its name in the folder
  at::ScalarType dtype = at::kFloat;  // as stored
  std::vector<int64_t> shape;         // ours (a padded vocabulary's rows not counted)
  bool transpose = false;             // GPT-2's Conv1D weights: stored (in, out), ours (out, in)
  bool vocab_rows = false;            // a (vocab, C) tensor: the model's may have more rows, zero
};

/// A stored tensor that must equal one of ours (a tied output layer a file holds anyway).
struct HfTie {
  std::string ours, stored, message;
};

struct HfPlan {
  std::vector<std::pair<std::string, HfSource>> tensors;  // ours, in the model's order
  std::vector<HfTie> ties;
  std::string origin;  // the folder, for messages

  const HfSource* find(const std::string& ours) const;
};

/// Records that our tensor `ours` is read from `source` (a family's plan builds `got` so);
/// UsageError naming the folder and both stored names where another stored tensor is the same
/// weight ("ln_f.weight" beside "transformer.ln_f.weight": the last one would win).
void plan_once(std::map<std::string, HfSource>& got, const std::string& ours, HfSource source,
               const std::string& origin);

/// Writes our tensor `ours` into dest (a parameter of the model: its dtype, device and layout;
/// rows beyond the stored ones, a padded vocabulary's, become zero), and checks the ties on
/// it. UsageError naming the folder for a dest of another shape, or a tie that does not hold.
void fill_from_hf(const TensorSource& source, const HfPlan& plan, const std::string& ours,
                  const at::Tensor& dest);

/// Every tensor of the plan, read as float32 in the model's order.
NamedTensors read_by_plan(const TensorSource& source, const HfPlan& plan);

}  // namespace ddptrain
