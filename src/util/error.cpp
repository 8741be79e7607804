#include "util/error.h"

#include <cctype>

namespace ddptrain {
namespace {

// `text` with {i} and {i:V} replaced by name(fields[i], V or null), and {{ by {. A brace that
// opens neither stays as it is.
std::string spell(const std::vector<OptionField>& fields, const std::string& text,
                  const OptionError::Speller& name) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "{{") == 0) {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = text[i] == '{' ? text.find('}', i) : std::string::npos;
    size_t end = i + 1;
    while (close != std::string::npos && end < close && end < i + 4 &&
           std::isdigit(static_cast<unsigned char>(text[end])))
      ++end;
    const bool placeholder = close != std::string::npos && end > i + 1 && (end == close || text[end] == ':');
    const size_t index = placeholder ? std::stoul(text.substr(i + 1, end - i - 1)) : 0;
    if (!placeholder || index >= fields.size()) {
      out += text[i];
      continue;
    }
    const std::string value = end == close ? "" : text.substr(end + 1, close - end - 1);
    out += name(fields[index], end == close ? nullptr : &value);
    i = close;
  }
  return out;
}

}  // namespace

OptionError::OptionError(std::vector<OptionField> fields, std::string text, std::string owner)
    : UsageError(spell(fields, text,
                       [&owner](const OptionField& f, const std::string* v) {
                         return qualified(owner, f) + (v ? " = " + *v : "");
                       })),
      fields_(std::move(fields)),
      text_(std::move(text)),
      owner_(std::move(owner)) {}

std::string OptionError::spelled(const Speller& name) const { return spell(fields_, text_, name); }

std::string OptionError::literal(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '{' ? "{{" : std::string(1, c);
  return out;
}

}  // namespace ddptrain

namespace ddptrain::detail {

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  throw Error(concat("internal error (a ddptrain bug, please report): ", cond, " failed at ", file, ":", line,
                     msg.empty() ? "" : ": ", msg));
}

}  // namespace ddptrain::detail
