// Errors keep their message for the user and their source location for developers apart.
#include "core/error.h"

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(Error, CheckKeepsTheLocationOutOfTheMessage) {
  try {
    const int got = 3;
    BRAID_CHECK(got == 4, "batch must be 4, got ", got);
    FAIL() << "BRAID_CHECK did not throw";
  } catch (const braid::Error& e) {
    EXPECT_EQ(std::string(e.what()), "batch must be 4, got 3");
    EXPECT_EQ(e.where().rfind("error_test.cpp:", 0), 0u) << e.where();
  }
}

TEST(Error, ThrownErrorsOfEveryTierCarryNoLocation) {
  try {
    BRAID_THROW(braid::IoError, "data.npy: truncated at byte ", 17);
  } catch (const braid::Error& e) {
    EXPECT_EQ(std::string(e.what()), "data.npy: truncated at byte 17");
    EXPECT_TRUE(e.where().empty());
  }
}

}  // namespace
