#include "launch/node_rendezvous.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <thread>

#include "comm/membership.h"
#include "core/error.h"

namespace braid::launch {
namespace {

constexpr const char* kAsks = "nodes/asks";
constexpr const char* kList = "nodes/list";
// How often the hosting agent looks at who asked.
constexpr std::chrono::milliseconds kLookEvery{20};

struct Entry {
  std::string agent;
  int ranks = 0;
};

std::vector<Entry> parse_entries(const std::string& text) {
  std::vector<Entry> entries;
  std::istringstream in(text);
  for (std::string item; in >> item;) {
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos) continue;
    Entry e{item.substr(0, colon), std::stoi(item.substr(colon + 1))};
    const bool seen = std::any_of(entries.begin(), entries.end(),
                                  [&](const Entry& other) { return other.agent == e.agent; });
    if (!seen) entries.push_back(std::move(e));
  }
  return entries;
}

std::string entry_text(const NodeRendezvousOptions& o) {
  BRAID_CHECK(!o.agent.empty() && o.agent.find_first_of(" :\n") == std::string::npos, "agent id '",
              o.agent, "' must be nonempty without spaces or colons");
  return o.agent + ":" + std::to_string(o.local_ranks);
}

NodePlace place_in(const std::vector<Entry>& list, const std::string& agent) {
  NodePlace place;
  place.node = -1;
  for (size_t i = 0; i < list.size(); ++i) {
    place.local_ranks.push_back(list[i].ranks);
    if (list[i].agent == agent) place.node = static_cast<int>(i);
  }
  return place;
}

}  // namespace

int NodePlace::first_rank() const {
  return std::accumulate(local_ranks.begin(), local_ranks.begin() + node, 0);
}

int NodePlace::world() const { return std::accumulate(local_ranks.begin(), local_ranks.end(), 0); }

NodePlace close_node_round(comm::Store& store, const NodeRendezvousOptions& o) {
  comm::append(store, kAsks, entry_text(o));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::optional<Clock::time_point> enough_at;  // when MIN agents had asked
  std::vector<Entry> asks;
  while (true) {
    asks = parse_entries(comm::read_now(store, kAsks));
    const int n = static_cast<int>(asks.size());
    if (n >= o.min_nodes && !enough_at) enough_at = Clock::now();
    if (n >= o.max_nodes || (enough_at && Clock::now() - *enough_at >= o.last_call)) break;
    if (!enough_at && Clock::now() - start >= o.join_timeout)
      BRAID_THROW(Error, "braid launch: only ", n, " of the ", o.min_nodes, " agents that ",
                  o.nodes_flag, " needs came within ",
                  std::chrono::duration<double>(o.join_timeout).count(),
                  " s (--join-timeout): start `braid launch ", o.nodes_flag,
                  " ...` on the other hosts with the same --rdzv-endpoint and BRAID_SECRET");
    std::this_thread::sleep_for(kLookEvery);
  }
  // This agent first (it holds the store, so round 1's rank 0 runs beside it), then the
  // others in the order they asked, up to MAX.
  std::vector<Entry> list;
  for (const Entry& e : asks)
    if (e.agent == o.agent) list.push_back(e);
  for (const Entry& e : asks)
    if (e.agent != o.agent && static_cast<int>(list.size()) < o.max_nodes) list.push_back(e);
  std::string text;
  for (const Entry& e : list)
    text += (text.empty() ? "" : " ") + e.agent + ":" + std::to_string(e.ranks);
  store.set(kList, text);
  return place_in(list, o.agent);
}

NodePlace join_node_round(comm::Store& store, const NodeRendezvousOptions& o) {
  comm::append(store, kAsks, entry_text(o));
  const std::string text = store.get_string(kList, comm::Deadline::after(o.join_timeout));
  const NodePlace place = place_in(parse_entries(text), o.agent);
  if (place.node < 0)
    BRAID_THROW(Error, "braid launch: the job's nodes were settled without this agent (",
                place.nodes(), " node(s), ", o.nodes_flag,
                "): it came after the last call or past the most nodes; an agent cannot join a "
                "running job yet");
  return place;
}

}  // namespace braid::launch
