// A check the parallel tests share: `call` throws a braid::Error whose message names `key`
// (a config key, a worker), and fails the test when it does not throw at all.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace braid::parallel {

inline void expect_error_naming(const auto& call, const std::string& key) {
  try {
    call();
    ADD_FAILURE() << key << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

}  // namespace braid::parallel
