// comm/ reads no environment variables and keeps no process-wide mutable state: launch/
// reads the environment and passes values in as options (launch/comm_env.h), so two
// groups or two jobs in one process never share a setting by accident. A scan of every
// source file under src/braid/comm/ (comments removed) keeps it that way.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
// GCC 12 at -O2 with the sanitizers warns inside <regex>'s own std::function moves
// (-Wmaybe-uninitialized, a known false positive) where the templates are instantiated,
// so the warning is off for this whole file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// A read of the environment.
const char* const kEnvRead = R"(\b(getenv|secure_getenv|environ)\b)";
// A static variable that is not const: a counter, a cache, a table read once. A per-thread
// scratch buffer (thread_local) is not shared and is allowed.
const char* const kMutableStatic =
    R"(^\s*(inline\s+)?static\s+(?!const\b|constexpr\b|thread_local\b)([\w:]+(<[^;(]*>)?[\s*&]+)+\w+\s*(=[^;]*|\{[^;]*\}|\[[^\]]*\])?\s*;)";

// Code without // and /* */ comments, line breaks kept so line numbers still hold. String
// literals are not parsed: comm/ has none that hold "//" or "/*".
std::string without_comments(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "//") == 0) {
      while (i < text.size() && text[i] != '\n') ++i;
      if (i < text.size()) out += '\n';
    } else if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      for (size_t j = i; j < std::min(end, text.size()); ++j)
        if (text[j] == '\n') out += '\n';
      i = end == std::string::npos ? text.size() : end + 1;
    } else {
      out += text[i];
    }
  }
  return out;
}

// "file:line: text" for every line of a comm source that matches `pattern`.
std::vector<std::string> offending_lines(const std::regex& pattern) {
  const fs::path root = fs::path(BRAID_SOURCE_DIR) / "src" / "braid" / "comm";
  std::vector<std::string> found;
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
    ++files;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    std::istringstream code(without_comments(text.str()));
    std::string line;
    for (int number = 1; std::getline(code, line); ++number)
      if (std::regex_search(line, pattern))
        found.push_back(fs::relative(entry.path(), root).string() + ":" + std::to_string(number) +
                        ": " + line);
  }
  EXPECT_GT(files, 20u) << "no comm sources under " << root;
  return found;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n  " + l;
  return s;
}

TEST(CommSources, ReadNoEnvironmentVariables) {
  const auto found = offending_lines(std::regex(kEnvRead));
  EXPECT_TRUE(found.empty()) << "comm/ must take settings as options that launch/ reads from the "
                                "environment (launch/comm_env.h); found:"
                             << joined(found);
}

TEST(CommSources, KeepNoMutableStatics) {
  const auto found = offending_lines(std::regex(kMutableStatic));
  EXPECT_TRUE(found.empty()) << "comm/ keeps no process-wide mutable state (pass it in, or make "
                                "it part of a Group or Transport); found:"
                             << joined(found);
}

// The scans must see what they look for, or they prove nothing.
TEST(CommSources, TheScansFindWhatTheyLookFor) {
  const std::regex env(kEnvRead);
  EXPECT_TRUE(std::regex_search("  if (const char* v = std::getenv(\"X\"))", env));
  EXPECT_FALSE(std::regex_search("reads no environment", env));
  EXPECT_EQ(without_comments("a // getenv\nb /* getenv\n */ c"), "a \nb \n c");
  const std::regex statics(kMutableStatic);
  EXPECT_TRUE(std::regex_search("  static std::atomic<uint64_t> counter{0};", statics));
  EXPECT_TRUE(std::regex_search("  static int calls = 0;", statics));
  EXPECT_FALSE(std::regex_search("  static const SelectionTable table = f();", statics));
  EXPECT_FALSE(std::regex_search("  static constexpr int kN = 4;", statics));
  EXPECT_FALSE(std::regex_search("  static Secret generate();", statics));
  EXPECT_FALSE(std::regex_search("  static thread_local std::string last;", statics));
}

}  // namespace
