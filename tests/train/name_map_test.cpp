// --rename's name map (train/name_map.h): prefixes, the longest match, and the errors that
// keep a typo from passing unseen.
#include "train/name_map.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "temp_dir.h"

namespace braid::train {
namespace {

using braid::testing::TempDir;

std::vector<NamedTensor> named(const std::vector<std::string>& names) {
  std::vector<NamedTensor> out;
  for (const std::string& n : names) out.push_back({n, Tensor::empty(Shape{2})});
  return out;
}

std::vector<std::string> names_of(const std::vector<NamedTensor>& tensors) {
  std::vector<std::string> out;
  for (const NamedTensor& t : tensors) out.push_back(t.name);
  return out;
}

TEST(NameMap, RenamesByPrefixAndKeepsTheRest) {
  const NameMap map = parse_name_map({"fc1.=1.", "fc2.=3."});
  const auto out = rename_tensors(
      named({"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "scale"}), map, "test");
  EXPECT_EQ(names_of(out),
            (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias", "scale"}));
}

// "layer1.0." and "layer1." both match "layer1.0.conv.weight": the longer one applies,
// whichever comes first.
TEST(NameMap, TheLongestMatchingPrefixApplies) {
  for (const auto& rules : {std::vector<std::string>{"layer1.=a.", "layer1.0.=b."},
                            std::vector<std::string>{"layer1.0.=b.", "layer1.=a."}}) {
    const auto out = rename_tensors(named({"layer1.0.conv.weight", "layer1.1.conv.weight"}),
                                    parse_name_map(rules), "test");
    EXPECT_EQ(names_of(out), (std::vector<std::string>{"b.conv.weight", "a.1.conv.weight"}));
  }
}

TEST(NameMap, AJsonFileGivesTheSameRules) {
  const TempDir tmp;
  std::ofstream(tmp.file("map.json")) << R"({"fc1.": "1.", "fc2.": "3."})";
  const auto out = rename_tensors(named({"fc1.weight", "fc2.bias"}),
                                  parse_name_map({tmp.file("map.json")}), "test");
  EXPECT_EQ(names_of(out), (std::vector<std::string>{"1.weight", "3.bias"}));
}

TEST(NameMap, ARuleThatMatchesNothingIsAnErrorListingTheFilesNames) {
  try {
    rename_tensors(named({"fc1.weight", "fc1.bias"}), parse_name_map({"fc1.=1.", "fcc2.=3."}),
                   "safetensors file 'x'");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("safetensors file 'x'"), std::string::npos) << what;
    EXPECT_NE(what.find("no tensor's name starts with 'fcc2.'"), std::string::npos) << what;
    EXPECT_NE(what.find("'fc1.weight', 'fc1.bias'"), std::string::npos) << what;
  }
}

TEST(NameMap, TwoTensorsRenamedToOneNameAreAnError) {
  EXPECT_THROW(
      rename_tensors(named({"a.weight", "b.weight"}), parse_name_map({"a.=c.", "b.=c."}), "test"),
      Error);
  // Renamed onto a name the file has already.
  EXPECT_THROW(rename_tensors(named({"a.weight", "c.weight"}), parse_name_map({"a.=c."}), "test"),
               Error);
}

TEST(NameMap, MalformedRulesAreErrors) {
  EXPECT_THROW(parse_name_map({"fc1."}), Error);                // no '='
  EXPECT_THROW(parse_name_map({"=1."}), Error);                 // empty FROM
  EXPECT_THROW(parse_name_map({"fc1.=1.", "fc1.=2."}), Error);  // FROM twice
  EXPECT_THROW(parse_name_map({"/nonexistent/map.json"}), Error);
  const TempDir tmp;
  std::ofstream(tmp.file("bad.json")) << R"({"fc1.": 1})";
  EXPECT_THROW(parse_name_map({tmp.file("bad.json")}), Error);
  EXPECT_TRUE(parse_name_map({}).empty());
}

}  // namespace
}  // namespace braid::train
