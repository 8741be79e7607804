#include "dist/bounded_store.h"

#include <future>
#include <memory>
#include <thread>

#include "util/error.h"

namespace ddptrain {

BoundedStore::BoundedStore(c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds answer)
    : store_(std::move(store)), answer_(answer) {}

template <typename R>
R BoundedStore::request(const char* what, std::function<R(c10d::Store&)> op) const {
  const auto seconds = [&] { return answer_.count() / 1000.0; };
  if (unanswered_)
    throw Error(str("the store's ", what, " was not sent: an earlier request had no answer within ",
                    seconds(), " s (rank 0, which serves the store, is stopped or its host is gone)"));
  // The thread holds what it uses: where no answer comes, it is left blocked until the process ends.
  auto task =
      std::make_shared<std::packaged_task<R()>>([store = store_, op = std::move(op)] { return op(*store); });
  std::future<R> answered = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (answered.wait_for(answer_) == std::future_status::timeout) {
    // The store is kept for good: a thread that wakes during the process's exit (rank 0 came
    // back, or went) must not end it while static objects are torn down.
    if (!unanswered_.exchange(true)) c10::intrusive_ptr<c10d::Store>(store_).release();
    throw Error(str("the store's ", what, " had no answer within ", seconds(),
                    " s (rank 0, which serves the store, is stopped or its host is gone)"));
  }
  return answered.get();  // or the store's own error
}

bool BoundedStore::check(const std::vector<std::string>& keys) const {
  return request<bool>("check", [keys](c10d::Store& s) { return s.check(keys); });
}

std::vector<uint8_t> BoundedStore::get(const std::string& key) const {
  return request<std::vector<uint8_t>>("get", [key](c10d::Store& s) { return s.get(key); });
}

void BoundedStore::set(const std::string& key, const std::vector<uint8_t>& value) const {
  request<bool>("set", [key, value](c10d::Store& s) {
    s.set(key, value);
    return true;
  });
}

std::vector<uint8_t> BoundedStore::compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                               const std::vector<uint8_t>& desired) const {
  return request<std::vector<uint8_t>>("compare-set", [key, expected, desired](c10d::Store& s) {
    return s.compareSet(key, expected, desired);
  });
}

}  // namespace ddptrain
