// braid's entry point as a user meets it: --version, a mistyped command, error lines
// without source locations (those only at BRAID_LOG=debug).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "run_braid.h"

namespace {

using Result = braid::testing::BraidResult;
using braid::testing::run_braid;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(MainCli, VersionPrintsTheVersion) {
  const Result r = run_braid("--version");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("braid ", 0), 0u) << r.output;
  EXPECT_TRUE(has(r.output, BRAID_VERSION_STRING)) << r.output;
}

TEST(MainCli, AnUnknownCommandNamesTheCommands) {
  Result r = run_braid("foo");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "unknown command 'foo'")) << r.output;
  for (const char* command : {"train", "eval", "launch", "bench", "store", "comm-check"})
    EXPECT_TRUE(has(r.output, command)) << command << " missing from: " << r.output;
  r = run_braid("");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "train, eval")) << r.output;
}

TEST(MainCli, ErrorsShowNoSourceLocationUnlessDebugging) {
  Result r = run_braid("comm-check --elements -1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "braid: error: comm-check: --elements must be >= 0, got -1"))
      << r.output;
  EXPECT_FALSE(has(r.output, ".cpp:")) << r.output;
  r = run_braid("comm-check --elements -1", "BRAID_LOG=debug");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "raised at comm_check_command.cpp:")) << r.output;
}

}  // namespace
