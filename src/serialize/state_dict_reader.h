// Reads state_dict files: ours (model.pt) and Python's torch.save(model.state_dict(), path)
// from PyTorch 1.x and 2.x (the zip format).
// Note [Reading torch.save files]: a torch.save file is a zip whose data.pkl is a pickle
// program. Running arbitrary pickles runs arbitrary code, and LibTorch's own unpickler
// rejects the OrderedDict + _metadata that state_dict() pickles. So we interpret the pickle
// ourselves, as torch.load(weights_only=True) does: a small stack machine that knows the
// opcodes of protocols 2-4, builds only dicts, lists, tuples, scalars and strings, resolves
// storages from the archive's data/<key> records, and calls only three callables
// (collections.OrderedDict, torch._utils._rebuild_tensor_v2 and _rebuild_parameter). Any
// other global is refused with the file and the name; nothing in the file is executed.
#pragma once

#include <string>

#include "serialize/python_pickle.h"

namespace ddptrain {

/// What a weights file must hold, and how to write one: the hint of unpickle_tensors' error.
inline constexpr const char* kStateDictHint =
    "a state_dict ({name: tensor}); save one with torch.save(model.state_dict(), path)";

/// The {name: tensor} dict of a torch.save file (or the one under "state_dict"/"model" in
/// a training checkpoint dict), in the file's order. Error naming origin and the reason;
/// `expected` says what the file must hold and how to write it, when it holds something else.
NamedTensors unpickle_tensors(const std::string& bytes, const std::string& origin,
                              const char* expected = kStateDictHint);

}  // namespace ddptrain
