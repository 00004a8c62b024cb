#include "launch/rank_process.h"

#include <cstdio>
#include <fstream>
#include <iterator>

namespace braid::launch {

bool starts_with_any(const std::string& entry, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (entry.size() > n.size() && entry.compare(0, n.size(), n) == 0 && entry[n.size()] == '=')
      return true;
  return false;
}

std::string format_seconds(std::chrono::nanoseconds ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns.count()) / 1e9);
  return buf;
}

char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : 0;
}

std::string ranks_word(int n) { return n == 1 ? "1 rank" : std::to_string(n) + " ranks"; }

std::string rank_list(const std::vector<int>& ranks) {
  constexpr size_t kShown = 8;
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i)
    s += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  if (ranks.size() > kShown) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return s;
}

}  // namespace braid::launch
