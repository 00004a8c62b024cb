// The collective algorithms braid implements, and the table that picks one by call, byte
// size and group size. `braid bench allreduce --write-table` regenerates the table from
// measurements on the machine at hand; the built-in default comes from this repository's
// measurements (comm/algorithm.cpp says where).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/message.h"

namespace braid::comm {

enum class Algorithm : uint8_t {
  automatic = 0,
  ring,              // reduce-scatter then all-gather around a ring, chunk-pipelined
  halving_doubling,  // recursive halving then doubling (Rabenseifner); powers of two
  binary_blocks,     // halving-doubling on power-of-two blocks for any size (Rabenseifner/Traeff)
  tree,              // binomial tree reduce + broadcast, for small messages
  direct,            // every rank exchanges with every rank; tiny messages, small groups
};
std::string_view algorithm_name(Algorithm a);
// Throws braid::Error listing the accepted names.
Algorithm parse_algorithm(std::string_view name);

// One row: for `call` with group size in [min_ranks, max_ranks] and message bytes in
// [min_bytes, max_bytes], use `algorithm`. The first matching row wins.
struct SelectionRule {
  CallKind call = CallKind::allreduce;
  int min_ranks = 1, max_ranks = 1 << 30;
  size_t min_bytes = 0, max_bytes = SIZE_MAX;
  Algorithm algorithm = Algorithm::ring;
};

class SelectionTable {
 public:
  static const SelectionTable& builtin();
  // The table in a JSON file (launch/ reads the one BRAID_ALGORITHM_TABLE names into
  // GroupOptions::algorithm_table); errors name the file and the row.
  static SelectionTable from_json_file(const std::string& path);
  explicit SelectionTable(std::vector<SelectionRule> rules) : rules_(std::move(rules)) {}

  Algorithm choose(CallKind call, int ranks, size_t bytes) const;
  const std::vector<SelectionRule>& rules() const { return rules_; }
  std::string to_json() const;

 private:
  std::vector<SelectionRule> rules_;
};

}  // namespace braid::comm
