// Note [Choices are enums]
// A flag whose value is one of a few words (--dataset, --model, --optimizer, ...) is an enum
// in the options, declared beside the layer that owns it (DatasetKind in data/, CommHook in
// ddp/, ...), and each enum has one table of its words (Choices) next to it. From that table
// come the parsing and its error (naming the words; config/ parses, no other layer reads
// text), the words in --help, and the word wherever a value is shown or saved (logs, metrics,
// config.json, a checkpoint's run identity); the code that acts on a choice switches on the
// enum, so a misspelt word cannot reach it. No LibTorch here: the config (ddpbase) and the
// library (ddpcore) share these.
#pragma once

#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace ddptrain {

template <typename E>
struct Choice {
  const char* word;
  E value;
};

template <typename E>
class Choices {
 public:
  Choices(std::initializer_list<Choice<E>> choices) : choices_(choices) {}
  const char* word(E value) const {
    for (const auto& c : choices_)
      if (c.value == value) return c.word;
    return "?";
  }
  std::optional<E> parse(const std::string& word) const {
    for (const auto& c : choices_)
      if (word == c.word) return c.value;
    return std::nullopt;
  }
  /// "sgd | adamw"
  std::string list(const char* separator = " | ") const {
    std::string out;
    for (const auto& c : choices_) out += (out.empty() ? "" : separator) + std::string(c.word);
    return out;
  }

 private:
  std::vector<Choice<E>> choices_;
};

/// A choice streams as its word (each owner declares `word(E)` beside its table), so messages
/// built with str() show "adamw".
template <typename E, typename = decltype(word(std::declval<E>()))>
std::ostream& operator<<(std::ostream& os, E value) {
  return os << word(value);
}

}  // namespace ddptrain
