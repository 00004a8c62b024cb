// A GetEnv over a fixed set of variables, for tests of what launch/ reads from the
// environment (env.h's functions take the lookup, so tests never touch the real one).
#pragma once

#include <map>
#include <string>

#include "launch/env.h"

namespace braid::testing {

using Vars = std::map<std::string, std::string>;

inline launch::GetEnv fake(const Vars& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace braid::testing
