// Typed reads of environment variables, with errors that name the variable and the value.
// The torchrun contract (RANK, WORLD_SIZE, ...) is read through these in dist/.
#pragma once

#include <optional>
#include <string>

namespace ddptrain::env {

/// The variable's value, or nullopt when unset (an empty value counts as unset).
std::optional<std::string> get(const std::string& name);

/// The variable as an integer in [min, max]; nullopt when unset; UsageError when malformed.
std::optional<long long> get_int(const std::string& name, long long min, long long max);

/// Parses a whole string as a base-10 integer; false when any character is left over.
bool parse_int(const std::string& s, long long* out);

/// Parses a whole string as a finite double; false when malformed.
bool parse_double(const std::string& s, double* out);

}  // namespace ddptrain::env
