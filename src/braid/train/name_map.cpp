#include "train/name_map.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace braid::train {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void add_rule(NameMap& map, std::string from, std::string to, const std::string& where) {
  BRAID_CHECK(!from.empty(), where, ": a rename's FROM is empty; write FROM=TO, e.g. 'fc1.=1.'");
  for (const RenameRule& r : map)
    BRAID_CHECK(r.from != from, where, ": '", from, "' is renamed twice (to '", r.to, "' and '", to,
                "')");
  map.push_back({std::move(from), std::move(to)});
}

}  // namespace

NameMap parse_name_map(const std::vector<std::string>& args) {
  NameMap map;
  for (const std::string& arg : args) {
    if (ends_with(arg, ".json")) {
      std::ifstream in(arg);
      BRAID_CHECK(in.good(), "--rename '", arg, "': cannot read the file");
      nlohmann::json j;
      try {
        in >> j;
      } catch (const nlohmann::json::exception& e) {
        BRAID_THROW(Error, "--rename '", arg, "': not JSON: ", e.what());
      }
      BRAID_CHECK(j.is_object(), "--rename '", arg,
                  "': expected an object of names, {\"FROM\": \"TO\", ...}");
      for (const auto& [from, to] : j.items()) {
        BRAID_CHECK(to.is_string(), "--rename '", arg, "': '", from, "' maps to ", to.dump(),
                    ", not a string");
        add_rule(map, from, to.get<std::string>(), "--rename '" + arg + "'");
      }
      continue;
    }
    const size_t eq = arg.find('=');
    BRAID_CHECK(eq != std::string::npos, "--rename '", arg,
                "': expected FROM=TO (a name prefix in the file and what it becomes, e.g. "
                "'fc1.=1.') or a .json file of them");
    add_rule(map, arg.substr(0, eq), arg.substr(eq + 1), "--rename '" + arg + "'");
  }
  return map;
}

std::vector<NamedTensor> rename_tensors(std::vector<NamedTensor> tensors, const NameMap& map,
                                        const std::string& source) {
  if (map.empty()) return tensors;
  std::string first_names;  // the file's, for an error
  for (size_t i = 0; i < tensors.size() && i < 3; ++i)
    first_names += detail::concat(i > 0 ? ", " : "", "'", tensors[i].name, "'");
  if (tensors.size() > 3) first_names += ", ...";
  std::vector<bool> used(map.size(), false);
  std::map<std::string, std::string> renamed_from;  // new name -> the file's name
  for (NamedTensor& t : tensors) {
    size_t best = map.size();
    for (size_t i = 0; i < map.size(); ++i)
      if (t.name.compare(0, map[i].from.size(), map[i].from) == 0 &&
          (best == map.size() || map[i].from.size() > map[best].from.size()))
        best = i;
    const std::string original = t.name;
    if (best < map.size()) {
      used[best] = true;
      t.name = map[best].to + t.name.substr(map[best].from.size());
    }
    const auto [it, fresh] = renamed_from.emplace(t.name, original);
    BRAID_CHECK(fresh, source, ": tensors '", it->second, "' and '", original,
                "' are both renamed to '", t.name, "'; make the renames tell them apart");
  }
  for (size_t i = 0; i < map.size(); ++i)
    BRAID_CHECK(used[i], source, ": no tensor's name starts with '", map[i].from, "' (--rename '",
                map[i].from, "=", map[i].to, "'); its tensors are ",
                tensors.empty() ? std::string("none") : first_names);
  return tensors;
}

}  // namespace braid::train
