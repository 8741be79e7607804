// The ATen ops a callable runs on this thread, counted by name through a RecordFunction
// callback: for tests of which ops a model's forward uses (Note [Linear through ATen], Note
// [LayerNorm into the autocast dtype]).
#pragma once

#include <functional>
#include <map>
#include <string>

#include <ATen/record_function.h>

namespace ddptrain::testing_ops {

inline std::map<std::string, int> aten_ops_during(const std::function<void()>& run) {
  static thread_local std::map<std::string, int>* counts = nullptr;
  std::map<std::string, int> seen;
  struct Counting {  // the callback is removed however `run` ends
    at::CallbackHandle handle;
    ~Counting() {
      at::removeCallback(handle);
      counts = nullptr;
    }
  };
  counts = &seen;
  const Counting counting{at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        ++(*counts)[fn.name()];
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION}))};
  run();
  return seen;
}

}  // namespace ddptrain::testing_ops
