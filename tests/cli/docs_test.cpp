// What a newcomer reads works as written: the commands in README.md and bench/README.md,
// run one after another, do not trip over each other (every training run its own --out:
// a directory that holds a run is refused), the scripts they run directly can be run, the
// files they name exist, and checkpoints are named where braid writes them.
// GCC 12 at -O2 with the sanitizers warns inside <regex>'s own std::function moves
// (-Wmaybe-uninitialized, a known false positive) where the templates are instantiated, so
// the warning is off for this whole file (as in tests/comm/no_process_state_test.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::string kRoot = BRAID_SOURCE_DIR;
const char* const kDocs[] = {"README.md", "bench/README.md"};

std::string read(const std::string& path) {
  std::ifstream in(kRoot + "/" + path);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The commands of a document: every line of its shell code blocks (``` or ```sh, lines
// joined at a trailing backslash, "  # comments" dropped) and, with `inline_too`, every
// inline `code` that starts with a script's path.
std::vector<std::string> commands(const std::string& doc, bool inline_too = false) {
  std::vector<std::string> out;
  std::istringstream in(doc);
  std::string line, pending;
  bool in_block = false, shell = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      shell = !in_block && (line == "```" || line == "```sh" || line == "```bash");
      in_block = !in_block;
      continue;
    }
    if (!in_block || !shell) continue;
    if (!line.empty() && line.back() == '\\') {
      pending += line.substr(0, line.size() - 1) + " ";
      continue;
    }
    line = pending + line;
    pending.clear();
    if (const size_t c = line.find("  #"); c != std::string::npos) line.resize(c);
    if (line.find_first_not_of(' ') != std::string::npos && line[0] != '#') out.push_back(line);
  }
  if (!inline_too) return out;
  static const std::regex inline_code("`([^`\n]+)`");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), inline_code);
       it != std::sregex_iterator(); ++it) {
    const std::string code = (*it)[1];
    if ((code.rfind("bench/", 0) == 0 || code.rfind("scripts/", 0) == 0) &&
        code.find(' ') != std::string::npos)
      out.push_back(code);
  }
  return out;
}

std::vector<std::string> words(const std::string& command) {
  std::istringstream in(command);
  return {std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
}

TEST(Docs, EveryTrainingRunInAnExampleHasItsOwnOut) {
  for (const char* doc : kDocs) {
    std::map<std::string, std::string> outs;  // --out -> the command that writes it
    for (const std::string& command : commands(read(doc))) {
      const std::vector<std::string> w = words(command);
      const auto train = std::find(w.begin(), w.end(), "train");
      if (train == w.end() || train == w.begin() || !train[-1].ends_with("braid")) continue;
      if (std::find(train, w.end(), "--resume") != w.end()) continue;  // writes where it was
      if (command.find(" ...") != std::string::npos && command.find("--out") == std::string::npos)
        ADD_FAILURE() << doc << ": an elided training command without --out: " << command;
      const auto out = std::find(train, w.end(), "--out");
      if (out == w.end() || out + 1 == w.end()) {
        ADD_FAILURE() << doc
                      << ": no --out (so runs/latest, which the next run refuses): " << command;
        continue;
      }
      const auto [at, fresh] = outs.emplace(out[1], command);
      EXPECT_TRUE(fresh) << doc << ": two examples write --out " << out[1] << ":\n  " << at->second
                         << "\n  " << command;
    }
    if (std::string(doc) == "README.md") {
      EXPECT_GE(outs.size(), 7u);
    }
  }
}

TEST(Docs, ScriptsTheExamplesRunDirectlyCanBeRun) {
  int checked = 0;
  for (const char* doc : kDocs)
    for (const std::string& command : commands(read(doc), /*inline_too=*/true)) {
      // The program: the first word after VAR=value assignments and sudo.
      for (const std::string& w : words(command)) {
        if (w.find('=') != std::string::npos || w == "sudo") continue;
        if (w.rfind("bench/", 0) == 0 || w.rfind("scripts/", 0) == 0) {
          const std::string path = kRoot + "/" + w;
          ASSERT_TRUE(fs::is_regular_file(path)) << doc << ": " << w << " does not exist";
          EXPECT_EQ(::access(path.c_str(), X_OK), 0) << doc << ": " << w << " is run "
                                                     << "directly but is not executable";
          EXPECT_EQ(read(w).rfind("#!", 0), 0u) << doc << ": " << w << " has no #! line";
          ++checked;
        }
        break;
      }
    }
  EXPECT_GE(checked, 5);
}

// braid writes model.safetensors into the run's checkpoint/ directory.
TEST(Docs, CheckpointFilesAreNamedWhereBraidWritesThem) {
  static const std::regex beside_run(R"(runs/[^/\s"'`]+/(model|optimizer|ema)\.safetensors)");
  for (const char* doc : kDocs) {
    const std::string text = read(doc);
    std::smatch m;
    EXPECT_FALSE(std::regex_search(text, m, beside_run))
        << doc << ": " << m.str() << " (it is under checkpoint/)";
  }
}

TEST(Docs, FilesTheDocsNameExist) {
  static const std::regex path(
      R"((?:^|[\s`(\[])((?:bench|scripts|configs|docs|src|tests)/[\w./-]*\w))");
  int checked = 0;
  for (const char* doc : kDocs) {
    const std::string text = read(doc);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), path);
         it != std::sregex_iterator(); ++it) {
      const std::string p = (*it)[1];
      EXPECT_TRUE(fs::exists(kRoot + "/" + p)) << doc << " names " << p;
      ++checked;
    }
  }
  // bench/README.md's table names the scripts by their file name.
  const std::string bench = read("bench/README.md");
  static const std::regex row(R"(\n\| `([\w.]+\.(?:py|sh))` \|)");
  for (auto it = std::sregex_iterator(bench.begin(), bench.end(), row);
       it != std::sregex_iterator(); ++it) {
    EXPECT_TRUE(fs::exists(kRoot + "/bench/" + std::string((*it)[1]))) << (*it)[1];
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

// The documents the code cites (a header's "see docs/ARCHITECTURE.md") are in the
// repository.
TEST(Docs, DocumentsTheSourcesCiteExist) {
  static const std::regex cited(R"(([\w./-]*[A-Za-z_]\.md)\b)");
  int checked = 0;
  std::vector<fs::path> files = {kRoot + "/CMakeLists.txt"};
  for (const char* dir : {"src", "tests", "scripts", "bench", "docs"})
    for (const auto& e : fs::recursive_directory_iterator(kRoot + "/" + dir))
      if (e.is_regular_file()) files.push_back(e.path());
  for (const fs::path& file : files) {
    std::ifstream in(file);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    for (auto it = std::sregex_iterator(text.begin(), text.end(), cited);
         it != std::sregex_iterator(); ++it) {
      const std::string doc = (*it)[1];
      EXPECT_TRUE(fs::exists(kRoot + "/" + doc) || fs::exists(file.parent_path() / doc))
          << fs::relative(file, kRoot).string() << " cites " << doc
          << ", which is not in the repository";
      ++checked;
    }
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
