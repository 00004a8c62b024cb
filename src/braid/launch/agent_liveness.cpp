#include "launch/agent_liveness.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace braid::launch {
namespace {

bool listed(const std::vector<std::string>& list, const std::string& m) {
  return std::find(list.begin(), list.end(), m) != list.end();
}

std::string seconds(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(d.count()) / 1e9);
  return buf;
}

}  // namespace

std::string format_agent_report(const AgentReport& r) {
  std::string s = "beat " + std::to_string(r.beat) + (r.done ? " done" : "") + "\nlive";
  for (const auto& m : r.live) s += " " + m;
  s += "\ngone";
  for (const auto& m : r.gone) s += " " + m;
  return s;
}

AgentReport parse_agent_report(const std::string& text) {
  AgentReport r;
  std::istringstream in(text);
  std::string line;
  auto malformed = [&] {
    BRAID_THROW(Error,
                "an agent's report is malformed (expected \"beat N\\nlive ...\\ngone ...\"): '",
                text, "'");
  };
  if (!std::getline(in, line)) malformed();
  {
    std::istringstream head(line);
    std::string word, done;
    if (!(head >> word >> r.beat) || word != "beat") malformed();
    if (head >> done) {
      if (done != "done") malformed();
      r.done = true;
    }
  }
  for (auto* list : {&r.live, &r.gone}) {
    if (!std::getline(in, line)) malformed();
    std::istringstream items(line);
    std::string word;
    items >> word;
    if (word != (list == &r.live ? "live" : "gone")) malformed();
    for (std::string m; items >> m;) list->push_back(m);
  }
  return r;
}

std::string agent_report_key(int node) {
  return "elastic/agents/" + std::to_string(node) + "/report";
}
std::string agent_orders_key(int node) {
  return "elastic/agents/" + std::to_string(node) + "/orders";
}

std::string node_of_member(const std::string& member) {
  // Exactly two dots, digits between: "node.slot.incarnation".
  if (std::count(member.begin(), member.end(), '.') != 2) return "";
  if (member.find_first_not_of("0123456789.") != std::string::npos) return "";
  return member.substr(0, member.find('.'));
}

AgentLiveness::AgentLiveness(std::chrono::milliseconds silence_limit)
    : silence_limit_(silence_limit) {}

void AgentLiveness::expect(int node, AgentClock::time_point now) {
  agents_[std::to_string(node)].heard = now;
}

void AgentLiveness::observe(int node, const std::optional<AgentReport>& report,
                            AgentClock::time_point now) {
  const auto it = agents_.find(std::to_string(node));
  if (it == agents_.end() || !report) return;
  Agent& a = it->second;
  if (a.lost) return;  // lost for good: a late word changes nothing
  if (report->beat != a.beat) {
    a.beat = report->beat;
    a.heard = now;
  }
  a.done = report->done;
  a.live = report->live;
  a.gone = report->gone;
}

void AgentLiveness::read_reports(comm::Store& store, AgentClock::time_point now) {
  for (const auto& [node, agent] : agents_) {
    if (agent.lost || agent.done) continue;
    const std::string text = comm::read_now(store, agent_report_key(std::stoi(node)));
    if (!text.empty()) observe(std::stoi(node), parse_agent_report(text), now);
  }
}

std::vector<std::pair<int, std::string>> AgentLiveness::newly_lost(AgentClock::time_point now) {
  std::vector<std::pair<int, std::string>> lost;
  for (auto& [node, a] : agents_) {
    if (a.lost || a.done || now - a.heard < silence_limit_) continue;
    a.lost = true;
    lost.emplace_back(std::stoi(node), "no report from its agent for " + seconds(now - a.heard) +
                                           " s (the host died, its link was cut, or the agent "
                                           "hangs)");
  }
  return lost;
}

comm::Liveness AgentLiveness::of(const std::string& member) const {
  const auto it = agents_.find(node_of_member(member));
  if (it == agents_.end()) return comm::Liveness::unknown;
  const Agent& a = it->second;
  if (a.lost || a.done || listed(a.gone, member)) return comm::Liveness::gone;
  if (listed(a.live, member)) return comm::Liveness::alive;
  return comm::Liveness::unknown;
}

bool AgentLiveness::all_ended() const { return running() == 0; }

bool AgentLiveness::any_done() const {
  for (const auto& [node, a] : agents_)
    if (a.done && !a.lost) return true;
  return false;
}

int AgentLiveness::running() const {
  int n = 0;
  for (const auto& [node, a] : agents_) n += a.lost || a.done ? 0 : 1;
  return n;
}

}  // namespace braid::launch
