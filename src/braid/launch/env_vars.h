// Reading a launcher's variables, as env.cpp and cluster_spec.cpp both do: a variable set
// to the empty string counts as unset (`export RANK=` in a script), and integers are plain
// decimal digits (no sign, no spaces, at most INT32_MAX), so "2 " or "+1" is an error that
// names the variable rather than a silent misreading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch/env.h"

namespace braid::launch {

struct EnvVar {
  const char* name = nullptr;
  std::string value;
};

// The first of `names` that is set (non-empty), in that order.
std::optional<EnvVar> first_set(const GetEnv& getenv, const std::vector<const char*>& names);
// Decimal digits only, at most INT32_MAX; nullopt otherwise.
std::optional<int64_t> parse_decimal(const std::string& s);
// The variable as an integer >= min; braid::Error naming it, its value and `what` otherwise.
int int_var(const EnvVar& var, int min, const char* what);

}  // namespace braid::launch
