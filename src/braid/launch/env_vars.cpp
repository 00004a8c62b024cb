#include "launch/env_vars.h"

#include "core/error.h"

namespace braid::launch {

std::optional<EnvVar> first_set(const GetEnv& getenv, const std::vector<const char*>& names) {
  for (const char* n : names) {
    const char* v = getenv(n);
    if (v != nullptr && *v != '\0') return EnvVar{n, v};
  }
  return std::nullopt;
}

std::optional<int64_t> parse_decimal(const std::string& s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX) return std::nullopt;
  return v;
}

int int_var(const EnvVar& var, int min, const char* what) {
  const std::optional<int64_t> v = parse_decimal(var.value);
  if (!v || *v < min)
    BRAID_THROW(Error, var.name, "='", var.value, "' is not valid: expected ", what,
                " (an integer >= ", min, ")");
  return static_cast<int>(*v);
}

}  // namespace braid::launch
