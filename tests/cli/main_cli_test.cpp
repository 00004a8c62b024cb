// braid's entry point as a user meets it: --version, a mistyped command, error lines
// without source locations (those only at BRAID_LOG=debug).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct Result {
  int code;
  std::string output;  // stdout and stderr
};

Result run(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + " " + std::string(BRAID_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(MainCli, VersionPrintsTheVersion) {
  const Result r = run("--version");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("braid ", 0), 0u) << r.output;
  EXPECT_TRUE(has(r.output, BRAID_VERSION_STRING)) << r.output;
}

TEST(MainCli, AnUnknownCommandNamesTheCommands) {
  Result r = run("foo");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "unknown command 'foo'")) << r.output;
  for (const char* command : {"train", "eval", "launch", "bench", "store", "comm-check"})
    EXPECT_TRUE(has(r.output, command)) << command << " missing from: " << r.output;
  r = run("");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "train, eval")) << r.output;
}

TEST(MainCli, ErrorsShowNoSourceLocationUnlessDebugging) {
  Result r = run("comm-check --elements -1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "braid: error: comm-check: --elements must be >= 0, got -1"))
      << r.output;
  EXPECT_FALSE(has(r.output, ".cpp:")) << r.output;
  r = run("comm-check --elements -1", "BRAID_LOG=debug");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "raised at comm_check_command.cpp:")) << r.output;
}

}  // namespace
