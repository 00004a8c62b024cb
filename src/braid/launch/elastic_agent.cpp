#include "launch/elastic_agent.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace braid::launch {
namespace {

// How often the coordinator reads the remote agents' reports (it looks at the open round
// every few milliseconds; a report costs one store call per agent).
constexpr std::chrono::milliseconds kReadReportsEvery{20};

std::string ranks_word(size_t n) { return n == 1 ? "1 rank" : std::to_string(n) + " ranks"; }

std::string seconds(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(d.count()) / 1e9);
  return buf;
}

}  // namespace

std::chrono::milliseconds heartbeat_period(std::chrono::milliseconds silence_limit) {
  return std::min<std::chrono::milliseconds>(std::chrono::milliseconds(100), silence_limit / 4);
}

ElasticAgent::ElasticAgent(const ElasticOptions& options, AgentPlace place,
                           std::shared_ptr<comm::Store> coordinator_store,
                           std::unique_ptr<AgentHeartbeat> heartbeat, std::string store_address)
    : options_(options),
      place_(std::move(place)),
      store_address_(std::move(store_address)),
      store_(std::move(coordinator_store)),
      heartbeat_(std::move(heartbeat)) {
  if (!store_) return;
  // Round 1 is every agent's ranks, in node order.
  std::vector<std::string> initial;
  const std::vector<int> node_ranks =
      place_.node < 0 ? std::vector<int>{place_.local_ranks} : place_.node_ranks;
  for (size_t n = 0; n < node_ranks.size(); ++n)
    for (int slot = 0; slot < node_ranks[n]; ++slot)
      initial.push_back(place_.node < 0 ? member_id(slot, 0)
                                        : std::to_string(n) + "." + std::to_string(slot) + ".0");
  comm::RoundRules rules;
  rules.min_members = options_.min_ranks;
  rules.max_members = options_.max_ranks > 0 ? options_.max_ranks : place_.world;
  rules.rendezvous_timeout = options_.rendezvous_timeout;
  if (place_.node >= 0) {
    rules.node_of = node_of_member;
    rules.min_nodes = place_.min_nodes;
    rules.nodes_flag = place_.nodes_flag;
    remote_.emplace(options_.rendezvous_timeout);
    const auto now = AgentClock::now();
    for (size_t n = 0; n < node_ranks.size(); ++n)
      if (static_cast<int>(n) != place_.node) remote_->expect(static_cast<int>(n), now);
  }
  coordinator_ = std::make_unique<comm::RoundCoordinator>(store_, rules, std::move(initial));
}

std::string ElasticAgent::member_id(int slot, int incarnation) const {
  const std::string id = std::to_string(slot) + "." + std::to_string(incarnation);
  return place_.node < 0 ? id : std::to_string(place_.node) + "." + id;
}

bool ElasticAgent::restart_after_kill(const std::string& name, const std::string& how,
                                      std::string& line) {
  line = "braid launch: " + name + " " + how;
  const std::string per = place_.node < 0 ? "" : " on this host";
  if (restarts_used_ < options_.max_restarts) {
    ++restarts_used_;
    line += "; restarting it (restart " + std::to_string(restarts_used_) + " of " +
            std::to_string(options_.max_restarts) + per + "); the others go on";
    return true;
  }
  line += "; no restarts left (--max-restarts " + std::to_string(options_.max_restarts) + per +
          "): the others go on without it";
  return false;
}

AgentActions ElasticAgent::tick(const std::vector<std::string>& live,
                                const std::vector<std::string>& gone,
                                const std::function<comm::Liveness(const std::string&)>& local) {
  if (heartbeat_) {
    heartbeat_->set_members(live, gone);
    return follow();
  }
  return coordinate(live, local);
}

// The agent hosting the store: the remote agents' reports, then the open round.
AgentActions ElasticAgent::coordinate(
    const std::vector<std::string>& live,
    const std::function<comm::Liveness(const std::string&)>& local) {
  AgentActions actions;
  if (!coordinator_) return actions;
  try {
    const auto now = AgentClock::now();
    if (remote_ && now >= next_read_) {
      remote_->read_reports(*store_, now);
      next_read_ = now + kReadReportsEvery;
      for (const auto& [node, why] : remote_->newly_lost(now)) {
        actions.lines.push_back("braid launch: node " + std::to_string(node) + " is lost: " + why +
                                "; its members are gone from the job");
        comm::append(*store_, agent_orders_key(node), "lost " + why, "\n");
      }
    }
    // This agent's restarted members not yet in a round: a round short of members waits
    // for them (a pipeline needs every rank back).
    std::vector<std::string> arriving;
    const std::vector<std::string>& members = coordinator_->members();
    for (const std::string& m : live)
      if (m.substr(m.rfind('.') + 1) != "0" &&
          std::find(members.begin(), members.end(), m) == members.end())
        arriving.push_back(m);
    const std::optional<comm::ClosedRound> closed = coordinator_->poll(
        [&](const std::string& member) {
          const comm::Liveness l = local(member);
          return l != comm::Liveness::unknown || !remote_ ? l : remote_->of(member);
        },
        arriving);
    if (!closed) return actions;
    for (const std::string& m : closed->left_out) {
      if (local(m) != comm::Liveness::unknown) {
        actions.kill.push_back(m);
      } else if (const std::string node = node_of_member(m); !node.empty()) {
        comm::append(*store_, agent_orders_key(std::stoi(node)), "kill " + m, "\n");
      }
    }
    if (closed->number > 1 || !closed->failed.empty()) actions.lines.push_back(close_line(*closed));
  } catch (const std::exception& e) {
    // No round can close any more: failing now beats every member waiting out its timeout
    // (and the other hosts' agents, which wait for this one, would wait for ever).
    actions.fail = std::string("braid launch: the elastic coordinator failed: ") + e.what() +
                   "; no membership round can close, so the job stops";
    coordinator_.reset();
  }
  return actions;
}

std::string ElasticAgent::close_line(const comm::ClosedRound& closed) const {
  std::string line = "braid launch: elastic round " + std::to_string(closed.number) + ": ";
  if (closed.finished) return line + "the job had finished; the late ranks exit";
  if (!closed.failed.empty()) return line + "cannot continue: " + closed.failed;
  line += ranks_word(closed.members.size());
  if (!closed.left_out.empty())
    line += " (" + std::to_string(closed.left_out.size()) +
            " silent past the rendezvous timeout: killed)";
  return line;
}

// Any other agent: the coordinator's orders, and whether the store still answers.
AgentActions ElasticAgent::follow() {
  AgentActions actions;
  actions.kill = heartbeat_->take_kill_orders();
  const auto silent = heartbeat_->unreachable_for(AgentClock::now());
  if (const std::string lost = heartbeat_->lost_reason(); !lost.empty()) {
    actions.fail = "braid launch: the job's coordinator (at " + store_address_ +
                   ") counted this host's agent lost (" + lost +
                   "); killed this host's ranks: the job goes on without them";
  } else if (silent >= options_.rendezvous_timeout) {
    const std::string error = heartbeat_->last_error();
    actions.fail = "braid launch: the job's store at " + store_address_ + " was unreachable for " +
                   seconds(silent) + " s (--rendezvous-timeout " +
                   seconds(options_.rendezvous_timeout) +
                   "): this host's link is cut, or the agent hosting the store is gone; killed "
                   "this host's ranks, which the job goes on without" +
                   (error.empty() ? "" : ". The last error: " + error);
  }
  return actions;
}

bool ElasticAgent::others_running() const { return remote_ && remote_->running() > 0; }
bool ElasticAgent::others_finished() const { return remote_ && remote_->any_done(); }

void ElasticAgent::finish() {
  if (heartbeat_) heartbeat_->finish(std::chrono::seconds(1));
}

}  // namespace braid::launch
