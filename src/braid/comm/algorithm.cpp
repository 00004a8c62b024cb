// Algorithm names, which calls each implements, and the selection table: the built-in
// default and the JSON form `braid bench allreduce --write-table` writes (launch/ reads the
// file BRAID_ALGORITHM_TABLE names into the world group's options).
//
// Byte sizes in the table are count * dtype size of the call: the whole buffer for
// allreduce, broadcast and reduce, one rank's block for reduce_scatter, allgather,
// gather, scatter and alltoall.
#include "comm/algorithm.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/algorithms.h"
#include "core/error.h"

namespace braid::comm {

namespace {

constexpr Algorithm kNamed[] = {
    Algorithm::automatic,     Algorithm::ring, Algorithm::halving_doubling,
    Algorithm::binary_blocks, Algorithm::tree, Algorithm::direct};

constexpr CallKind kTableCalls[] = {
    CallKind::allreduce, CallKind::reduce_scatter, CallKind::allgather, CallKind::broadcast,
    CallKind::reduce,    CallKind::gather,         CallKind::scatter,   CallKind::alltoall};

constexpr int kAnyRanks = 1 << 30;

CallKind parse_call(std::string_view name, const std::string& where) {
  for (CallKind c : kTableCalls)
    if (name == call_kind_name(c)) return c;
  std::string names;
  for (CallKind c : kTableCalls)
    names += detail::concat(names.empty() ? "" : ", ", call_kind_name(c));
  BRAID_THROW(Error, where, ": unknown call '", name, "'; a table row names one of: ", names);
}

}  // namespace

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::automatic:
      return "auto";
    case Algorithm::ring:
      return "ring";
    case Algorithm::halving_doubling:
      return "halving_doubling";
    case Algorithm::binary_blocks:
      return "binary_blocks";
    case Algorithm::tree:
      return "tree";
    case Algorithm::direct:
      return "direct";
  }
  return "unknown";
}

Algorithm parse_algorithm(std::string_view name) {
  for (Algorithm a : kNamed)
    if (name == algorithm_name(a)) return a;
  if (name == "automatic") return Algorithm::automatic;
  std::string names;
  for (Algorithm a : kNamed) names += detail::concat(names.empty() ? "" : ", ", algorithm_name(a));
  BRAID_THROW(Error, "unknown collective algorithm '", name, "'; use one of: ", names);
}

bool algorithm_supported(CallKind call, Algorithm a) {
  switch (call) {
    case CallKind::allreduce:
      return a == Algorithm::ring || a == Algorithm::halving_doubling ||
             a == Algorithm::binary_blocks || a == Algorithm::tree || a == Algorithm::direct;
    case CallKind::reduce_scatter:
    case CallKind::allgather:
      return a == Algorithm::ring || a == Algorithm::direct;
    case CallKind::broadcast:
    case CallKind::reduce:
      return a == Algorithm::tree || a == Algorithm::ring;
    case CallKind::gather:
    case CallKind::scatter:
    case CallKind::alltoall:
      return a == Algorithm::direct;
    case CallKind::split:
      return a == Algorithm::ring;
    case CallKind::p2p:
    case CallKind::barrier:
      return false;
  }
  return false;
}

Algorithm default_algorithm(CallKind call) {
  switch (call) {
    case CallKind::allreduce:
    case CallKind::reduce_scatter:
    case CallKind::allgather:
    case CallKind::split:
      return Algorithm::ring;
    case CallKind::broadcast:
    case CallKind::reduce:
      return Algorithm::tree;
    case CallKind::gather:
    case CallKind::scatter:
    case CallKind::alltoall:
      return Algorithm::direct;
    case CallKind::p2p:
    case CallKind::barrier:
      return Algorithm::automatic;
  }
  return Algorithm::automatic;
}

std::string supported_algorithm_names(CallKind call) {
  std::string s;
  for (Algorithm a : kNamed)
    if (algorithm_supported(call, a)) s += detail::concat(s.empty() ? "" : ", ", algorithm_name(a));
  return s.empty() ? "none (it has a single algorithm; pass auto)" : s;
}

// Allreduce rows for 2 and 4 ranks: `braid bench allreduce -n N --algorithm all
// --write-table` over shared memory (separate processes) on the 2-core development machine,
// rounded to powers of four: with 2 ranks the direct exchange wins up to 16 KiB and the
// pipelined ring from 64 KiB; with 4 ranks on 2 cores the tree's few rounds win up to
// 256 KiB. Rows for 5 or more ranks are the textbook choice (few rounds, then halved
// volume, then the ring) until measured on real hardware: regenerate with --write-table.
const SelectionTable& SelectionTable::builtin() {
  static const SelectionTable table(std::vector<SelectionRule>{
      {CallKind::allreduce, 1, 2, 0, 16 << 10, Algorithm::direct},
      {CallKind::allreduce, 3, 4, 0, 256 << 10, Algorithm::tree},
      {CallKind::allreduce, 5, kAnyRanks, 0, 16 << 10, Algorithm::tree},
      {CallKind::allreduce, 5, kAnyRanks, 0, 1 << 20, Algorithm::halving_doubling},
      {CallKind::allreduce, 1, kAnyRanks, 0, SIZE_MAX, Algorithm::ring},
      {CallKind::reduce_scatter, 1, 8, 0, 4 << 10, Algorithm::direct},
      {CallKind::reduce_scatter, 1, kAnyRanks, 0, SIZE_MAX, Algorithm::ring},
      {CallKind::allgather, 1, 8, 0, 4 << 10, Algorithm::direct},
      {CallKind::allgather, 1, kAnyRanks, 0, SIZE_MAX, Algorithm::ring},
      {CallKind::broadcast, 1, kAnyRanks, 0, 256 << 10, Algorithm::tree},
      {CallKind::broadcast, 1, kAnyRanks, 0, SIZE_MAX, Algorithm::ring},
      {CallKind::reduce, 1, kAnyRanks, 0, 256 << 10, Algorithm::tree},
      {CallKind::reduce, 1, kAnyRanks, 0, SIZE_MAX, Algorithm::ring},
  });
  return table;
}

Algorithm SelectionTable::choose(CallKind call, int ranks, size_t bytes) const {
  for (const auto& rule : rules_)
    if (rule.call == call && ranks >= rule.min_ranks && ranks <= rule.max_ranks &&
        bytes >= rule.min_bytes && bytes <= rule.max_bytes)
      return rule.algorithm;
  return default_algorithm(call);
}

SelectionTable SelectionTable::from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    BRAID_THROW(IoError, "cannot read the algorithm table '", path, "': ", std::strerror(errno));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    BRAID_THROW(Error, path, ": not valid JSON: ", e.what());
  }
  if (!doc.is_object() || !doc.contains("rules") || !doc["rules"].is_array())
    BRAID_THROW(Error, path, ": an algorithm table is an object with a \"rules\" array");
  for (const auto& [key, value] : doc.items())
    if (key != "rules" && key != "description")
      BRAID_THROW(Error, path, ": unknown key '", key, "' (expected \"rules\", \"description\")");

  std::vector<SelectionRule> rules;
  int row = 0;
  for (const auto& item : doc["rules"]) {
    const std::string where = detail::concat(path, ": rule ", row++);
    if (!item.is_object()) BRAID_THROW(Error, where, ": a rule is a JSON object");
    for (const auto& [key, value] : item.items())
      if (key != "call" && key != "algorithm" && key != "min_ranks" && key != "max_ranks" &&
          key != "min_bytes" && key != "max_bytes")
        BRAID_THROW(Error, where, ": unknown key '", key,
                    "' (expected call, algorithm, min_ranks, max_ranks, min_bytes, max_bytes)");
    auto text = [&](const char* key) {
      if (!item.contains(key) || !item[key].is_string())
        BRAID_THROW(Error, where, ": '", key, "' is required and must be a string");
      return item[key].get<std::string>();
    };
    auto number = [&](const char* key, uint64_t fallback) -> uint64_t {
      if (!item.contains(key)) return fallback;
      if (!item[key].is_number_unsigned())
        BRAID_THROW(Error, where, ": '", key, "' must be a non-negative integer, got ",
                    item[key].dump());
      return item[key].get<uint64_t>();
    };
    SelectionRule rule;
    rule.call = parse_call(text("call"), where);
    try {
      rule.algorithm = parse_algorithm(text("algorithm"));
    } catch (const Error& e) {
      BRAID_THROW(Error, where, ": ", e.what());
    }
    if (!algorithm_supported(rule.call, rule.algorithm))
      BRAID_THROW(Error, where, ": ", call_kind_name(rule.call), " has no algorithm '",
                  algorithm_name(rule.algorithm), "'; it has ",
                  supported_algorithm_names(rule.call));
    const uint64_t min_ranks = number("min_ranks", 1), max_ranks = number("max_ranks", kAnyRanks);
    if (min_ranks < 1 || min_ranks > max_ranks || max_ranks > static_cast<uint64_t>(kAnyRanks))
      BRAID_THROW(Error, where, ": ranks must satisfy 1 <= min_ranks <= max_ranks <= ", kAnyRanks,
                  ", got ", min_ranks, " .. ", max_ranks);
    rule.min_ranks = static_cast<int>(min_ranks);
    rule.max_ranks = static_cast<int>(max_ranks);
    rule.min_bytes = number("min_bytes", 0);
    rule.max_bytes = number("max_bytes", SIZE_MAX);
    if (rule.min_bytes > rule.max_bytes)
      BRAID_THROW(Error, where, ": min_bytes ", rule.min_bytes, " > max_bytes ", rule.max_bytes);
    rules.push_back(rule);
  }
  return SelectionTable(std::move(rules));
}

std::string SelectionTable::to_json() const {
  nlohmann::json rules = nlohmann::json::array();
  for (const auto& rule : rules_) {
    nlohmann::json j = {{"call", call_kind_name(rule.call)},
                        {"algorithm", std::string(algorithm_name(rule.algorithm))},
                        {"min_ranks", rule.min_ranks},
                        {"min_bytes", rule.min_bytes}};
    if (rule.max_ranks != kAnyRanks) j["max_ranks"] = rule.max_ranks;
    if (rule.max_bytes != SIZE_MAX) j["max_bytes"] = rule.max_bytes;
    rules.push_back(std::move(j));
  }
  return nlohmann::json{{"rules", std::move(rules)}}.dump(2) + "\n";
}

}  // namespace braid::comm
