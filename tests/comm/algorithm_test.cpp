// Algorithm names and the selection table: parsing, the built-in choices, JSON round trip
// and the errors a bad table file gives (file, row, key).
#include "comm/algorithm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace braid::comm {
namespace {

std::string write_temp(const std::string& text) {
  static int n = 0;
  const auto path =
      std::filesystem::temp_directory_path() /
      ("braid_algorithm_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

std::string error_of(const std::string& text) {
  const std::string path = write_temp(text);
  try {
    SelectionTable::from_json_file(path);
  } catch (const Error& e) {
    std::filesystem::remove(path);
    return e.what();
  }
  std::filesystem::remove(path);
  return "";
}

TEST(Algorithm, NamesRoundTrip) {
  for (Algorithm a : {Algorithm::automatic, Algorithm::ring, Algorithm::halving_doubling,
                      Algorithm::binary_blocks, Algorithm::tree, Algorithm::direct})
    EXPECT_EQ(parse_algorithm(algorithm_name(a)), a);
  try {
    parse_algorithm("bcube");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bcube'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("halving_doubling"), std::string::npos);
  }
}

TEST(Algorithm, BuiltinTableChoices) {
  const auto& t = SelectionTable::builtin();
  // Small messages take few rounds; large ones the bandwidth-optimal ring.
  EXPECT_NE(t.choose(CallKind::allreduce, 8, 64), Algorithm::ring);
  EXPECT_EQ(t.choose(CallKind::allreduce, 8, size_t{64} << 20), Algorithm::ring);
  EXPECT_EQ(t.choose(CallKind::broadcast, 8, 64), Algorithm::tree);
  EXPECT_EQ(t.choose(CallKind::broadcast, 8, size_t{64} << 20), Algorithm::ring);
  EXPECT_EQ(t.choose(CallKind::gather, 8, 64), Algorithm::direct);  // no row: the default
  EXPECT_EQ(t.choose(CallKind::alltoall, 3, 1 << 20), Algorithm::direct);
}

TEST(Algorithm, JsonRoundTrip) {
  const auto& builtin = SelectionTable::builtin();
  const std::string path = write_temp(builtin.to_json());
  const auto back = SelectionTable::from_json_file(path);
  std::filesystem::remove(path);
  ASSERT_EQ(back.rules().size(), builtin.rules().size());
  for (size_t i = 0; i < back.rules().size(); ++i) {
    const auto &a = back.rules()[i], &b = builtin.rules()[i];
    EXPECT_EQ(a.call, b.call);
    EXPECT_EQ(a.algorithm, b.algorithm);
    EXPECT_EQ(a.min_ranks, b.min_ranks);
    EXPECT_EQ(a.max_ranks, b.max_ranks);
    EXPECT_EQ(a.min_bytes, b.min_bytes);
    EXPECT_EQ(a.max_bytes, b.max_bytes);
  }
  EXPECT_EQ(back.to_json(), builtin.to_json());
}

TEST(Algorithm, TableFromFile) {
  const std::string path = write_temp(R"({"description": "test", "rules": [
      {"call": "allreduce", "max_bytes": 100, "algorithm": "direct"},
      {"call": "allreduce", "min_ranks": 4, "algorithm": "binary_blocks"},
      {"call": "reduce", "algorithm": "ring"}]})");
  const auto t = SelectionTable::from_json_file(path);
  std::filesystem::remove(path);
  EXPECT_EQ(t.choose(CallKind::allreduce, 2, 100), Algorithm::direct);
  EXPECT_EQ(t.choose(CallKind::allreduce, 2, 101), Algorithm::ring);  // no row: the default
  EXPECT_EQ(t.choose(CallKind::allreduce, 5, 101), Algorithm::binary_blocks);
  EXPECT_EQ(t.choose(CallKind::reduce, 5, 1), Algorithm::ring);
}

TEST(Algorithm, BadTablesNameTheProblem) {
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("\"rules\" array"), std::string::npos);
  EXPECT_NE(error_of(R"({"rules": [], "extra": 1})").find("unknown key 'extra'"),
            std::string::npos);
  const std::string unknown_key = error_of(R"({"rules": [{"call": "allreduce", "algorithm": "ring"},
      {"call": "allreduce", "algo": "ring"}]})");
  EXPECT_NE(unknown_key.find("rule 1: unknown key 'algo'"), std::string::npos) << unknown_key;
  EXPECT_NE(error_of(R"({"rules": [{"call": "allsum", "algorithm": "ring"}]})")
                .find("unknown call 'allsum'"),
            std::string::npos);
  const std::string unsupported =
      error_of(R"({"rules": [{"call": "broadcast", "algorithm": "direct"}]})");
  EXPECT_NE(unsupported.find("broadcast has no algorithm 'direct'; it has ring, tree"),
            std::string::npos)
      << unsupported;
  EXPECT_NE(error_of(R"({"rules": [{"call": "allreduce", "algorithm": "auto"}]})")
                .find("no algorithm 'auto'"),
            std::string::npos);
  // An allreduce ring rule with extra fields.
  auto ring_rule = [](const std::string& fields) {
    return R"({"rules": [{"call": "allreduce", "algorithm": "ring", )" + fields + "}]}";
  };
  EXPECT_NE(
      error_of(ring_rule(R"("min_bytes": -1)")).find("'min_bytes' must be a non-negative integer"),
      std::string::npos);
  EXPECT_NE(error_of(ring_rule(R"("min_ranks": 5, "max_ranks": 2)")).find("min_ranks <= max_ranks"),
            std::string::npos);
  EXPECT_NE(
      error_of(ring_rule(R"("min_bytes": 5, "max_bytes": 2)")).find("min_bytes 5 > max_bytes 2"),
      std::string::npos);
  EXPECT_THROW(SelectionTable::from_json_file("/nonexistent/table.json"), IoError);
}

}  // namespace
}  // namespace braid::comm
