// What the Hugging Face architectures (models/hf_gpt2, models/hf_llama) share when they read a
// config.json into ModelOptions: a field's value or its fallback, a field ddptrain does not
// compute named as such, and a flag the user set that the config contradicts.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "models/model_options.h"
#include "util/error.h"

namespace ddptrain {

/// config[key] as T; `fallback` when absent or null. UsageError naming the field when its value
/// is of another kind: an integer field takes a whole number within T's range (never a cast that
/// wraps), a flag takes true or false.
template <typename T>
T hf_field(const nlohmann::json& config, const char* key, const std::string& origin, const T& fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  const nlohmann::json& v = config[key];
  const auto wrong = [&] {
    return UsageError(str("'", origin, "': ", key, " is ", v.dump(), ", not the kind of value it should be"));
  };
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    constexpr auto lo = static_cast<double>(std::numeric_limits<T>::lowest()),
                   hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      throw wrong();
    if (v.is_number_integer() && !v.is_number_unsigned()) {
      const auto i = v.get<int64_t>();
      if (static_cast<double>(i) < lo || static_cast<double>(i) > hi) throw wrong();
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!(d == std::floor(d) && d >= lo && d < hi + 1.0)) throw wrong();  // hi + 1: 2^31, 2^63 exactly
      return static_cast<T>(d);
    }
    if (!v.is_number()) throw wrong();
    return v.get<T>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) throw wrong();
    return v.get<bool>();
  } else {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw wrong();
    }
  }
}

/// Whether config.json sets `key` to null (transformers: None), which for some fields means
/// something else than leaving it out (the class's default).
inline bool hf_null(const nlohmann::json& config, const char* key) {
  return config.contains(key) && config[key].is_null();
}

/// UsageError unless ok: "'origin': what, which ddptrain's <model> does not compute".
inline void hf_unsupported(bool ok, const std::string& origin, const std::string& what, const char* model) {
  DDP_USAGE_CHECK(ok, "'", origin, "': ", what, ", which ddptrain's ", model, " does not compute");
}

/// The token id config.json gives for `key` (a list, as Llama 3.1's eos: its first, all ids),
/// `fallback` where it is left out (the config class's default, kept as transformers' config
/// object has it, in the vocabulary or not), -1 where it is null. -1 given for pad_token_id is the
/// vocabulary's last token (transformers' nn.Embedding(padding_idx=-1)). A pad_token_id outside the
/// vocabulary is a UsageError (the embedding needs the row); a bos or eos outside it is kept as given, for
/// the export, as transformers only warns of it (GPT2Config(vocab_size=8000) saves GPT-2's 50256).
inline int hf_token_id(const nlohmann::json& config, const char* key, const std::string& origin, int vocab,
                       int fallback, const char* model) {
  if (!config.contains(key)) return fallback;
  nlohmann::json v = config[key];
  if (v.is_array()) {
    for (const auto& id : v)
      hf_unsupported(id.is_number_integer(), origin, str(key, " ", v.dump(), " (not token ids)"), model);
    v = v.empty() ? nlohmann::json() : v[0];
  }
  int id = hf_field<int>(nlohmann::json{{key, v}}, key, origin, -1);
  const bool pad = std::string(key) == "pad_token_id";
  if (id == -1 && !v.is_null() && pad) id = vocab - 1;
  if (!pad) return id < -1 ? -1 : id;
  hf_unsupported(id == -1 || (id >= 0 && id < vocab), origin,
                 str(key, " ", id, " (not a token of the ", vocab, "-token vocabulary)"), model);
  return id;
}

/// config[key]'s ids, comma-separated, where it lists more than one ("" otherwise): what
/// ModelOptions::eos_token_ids carries to an export.
inline std::string hf_token_id_list(const nlohmann::json& config, const char* key, const std::string& origin,
                                    const char* model) {
  if (!config.contains(key) || !config[key].is_array() || config[key].size() < 2) return "";
  std::string out;
  for (const auto& id : config[key]) {
    hf_unsupported(id.is_number_integer() && !id.is_number_float() && id.get<int64_t>() >= 0 &&
                       id.get<int64_t>() <= std::numeric_limits<int>::max(),
                   origin, str(key, " ", config[key].dump(), " (not token ids)"), model);
    out += (out.empty() ? "" : ",") + std::to_string(id.get<int64_t>());
  }
  return out;
}

/// Sets *field (named `name`) to the config's value of `key`; OptionError naming the field and
/// init_from_hf when the user set it (it differs from `unset`) to another value.
template <typename T>
void hf_set(T* field, const char* name, const T& value, const T& unset, const char* key, ModelOptions& o) {
  if (*field != unset && *field != value)
    throw OptionError(
        {{field, name}, {&o.init_from_hf, "init_from_hf"}},
        str("{0}=", *field, " differs from ", key, " ", value, " in {1}'s config.json: drop {0}"),
        "ModelOptions")
        .within(&o);
  *field = value;
}

}  // namespace ddptrain
