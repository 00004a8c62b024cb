// What a newcomer reads is true: the documents the sources cite are in the repository.
#include <gtest/gtest.h>

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
