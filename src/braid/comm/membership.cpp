#include "comm/membership.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace braid::comm {
namespace {

// How often a process waiting for a place looks whether it should give up.
constexpr std::chrono::milliseconds kGiveUpEvery{100};

// A value no key of this protocol ever holds: compare_set with it reads without writing.
constexpr std::string_view kNeverStored = "\x01never";

std::span<const uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string text_of(const Bytes& b) { return {b.begin(), b.end()}; }

std::string round_key(int64_t round, const char* what) {
  return "elastic/round/" + std::to_string(round) + "/" + what;
}

struct Ask {
  std::string member;
  int64_t step = kNoCommit;
};

std::vector<Ask> parse_asks(const std::string& text) {
  std::vector<Ask> asks;
  std::istringstream in(text);
  std::string item;
  while (in >> item) {
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos) continue;
    Ask a{item.substr(0, colon), std::stoll(item.substr(colon + 1))};
    // A member asks once per round; a repeat (it asked again after a lost reply) counts once.
    if (std::none_of(asks.begin(), asks.end(), [&](const Ask& b) { return b.member == a.member; }))
      asks.push_back(std::move(a));
  }
  return asks;
}

// "members\nsource source_step" or "failed\nreason".
std::string format_round(const std::vector<std::string>& members, int source, int64_t step) {
  std::string s;
  for (const auto& m : members) s += (s.empty() ? "" : " ") + m;
  return s + "\n" + std::to_string(source) + " " + std::to_string(step);
}

int64_t read_int(Store& store, const std::string& key) { return store.add(key, 0); }

}  // namespace

std::string read_now(Store& store, const std::string& key) {
  return text_of(store.compare_set(key, bytes_of(kNeverStored), bytes_of(kNeverStored)));
}

void append(Store& store, const std::string& key, const std::string& item,
            const std::string& separator) {
  std::string seen;
  while (true) {
    const std::string want = seen.empty() ? item : seen + separator + item;
    const std::string now = text_of(store.compare_set(key, bytes_of(seen), bytes_of(want)));
    if (now == want) return;
    seen = now;
  }
}

Round join_round(Store& store, const std::string& member, int64_t number, int64_t commit_step,
                 Deadline deadline, const std::function<bool()>& give_up) {
  BRAID_CHECK(!member.empty() && member.find_first_of(" :\n") == std::string::npos,
              "elastic member id '", member, "' must be nonempty without spaces or colons");
  if (number <= 0) number = read_int(store, "elastic/round") + 1;
  while (true) {
    append(store, round_key(number, "asks"), member + ":" + std::to_string(commit_step));
    std::string text;
    while (true) {
      const bool last = deadline.at() - Clock::now() <= kGiveUpEvery;
      try {
        text = store.get_string(round_key(number, "members"),
                                last ? deadline : Deadline::after(kGiveUpEvery));
        break;
      } catch (const TimeoutError&) {
        if (last) throw;
      }
      if (give_up && give_up())
        BRAID_THROW(Error, "elastic: ", member, " stopped waiting for a place in round ", number,
                    " (asked to stop)");
    }
    const size_t nl = text.find('\n');
    const std::string head = text.substr(0, nl);
    const std::string tail = nl == std::string::npos ? "" : text.substr(nl + 1);
    if (head == "failed") BRAID_THROW(Error, "elastic round ", number, " could not form: ", tail);
    Round r;
    r.number = number;
    if (head == "finished") {
      r.finished = true;
      return r;
    }
    std::istringstream names(head);
    for (std::string m; names >> m;) r.members.push_back(m);
    std::istringstream src(tail);
    src >> r.source >> r.source_step;
    const auto it = std::find(r.members.begin(), r.members.end(), member);
    if (it != r.members.end()) {
      r.rank = static_cast<int>(it - r.members.begin());
      return r;
    }
    log_debug("elastic: round ", number, " closed without ", member, "; asking for the next");
    ++number;
  }
}

int64_t pending_round(Store& store) { return read_int(store, "elastic/pending"); }

void leave_round(Store& store, const std::string& member, int64_t number) {
  append(store, round_key(number, "leaves"), member);
}

void mark_finished(Store& store, int64_t step) {
  store.set("elastic/finished", std::to_string(step));
}

int RoundCoordinator::count_nodes(const std::vector<std::string>& members) const {
  if (!rules_.node_of) return 0;
  std::set<std::string> nodes;
  for (const auto& m : members)
    if (std::string n = rules_.node_of(m); !n.empty()) nodes.insert(std::move(n));
  return static_cast<int>(nodes.size());
}

RoundCoordinator::RoundCoordinator(std::shared_ptr<Store> store, RoundRules rules,
                                   std::vector<std::string> initial)
    : store_(std::move(store)), rules_(rules), members_(std::move(initial)) {}

std::optional<ClosedRound> RoundCoordinator::poll(
    const std::function<Liveness(const std::string&)>& liveness,
    const std::vector<std::string>& arriving) {
  using Clock = std::chrono::steady_clock;
  const int64_t next = round_ + 1;
  const std::vector<Ask> asks = parse_asks(read_now(*store_, round_key(next, "asks")));
  if (asks.empty()) {
    opened_.reset();
    return std::nullopt;
  }
  if (!opened_) opened_ = Clock::now();
  if (!read_now(*store_, "elastic/finished").empty()) {
    // Whoever asks now came too late: the members trained to the end and left.
    store_->set(round_key(next, "members"), "finished\n");
    ClosedRound closed;
    closed.number = next;
    closed.finished = true;
    round_ = next;
    members_.clear();
    opened_.reset();
    return closed;
  }
  // A member that asked and then died (or whose host was lost) would only fail the round's
  // connections: it is left out as if it never asked.
  auto asked = [&](const std::string& m) {
    return std::any_of(asks.begin(), asks.end(), [&](const Ask& a) { return a.member == m; }) &&
           liveness(m) != Liveness::gone;
  };
  // Who must be heard from: the last round's members not known to be gone or leaving.
  std::istringstream leaves_text(read_now(*store_, round_key(next, "leaves")));
  std::vector<std::string> leaving;
  for (std::string m; leaves_text >> m;) leaving.push_back(m);
  auto left = [&](const std::string& m) {
    return std::find(leaving.begin(), leaving.end(), m) != leaving.end();
  };
  std::vector<std::string> waiting_for;
  for (const auto& m : members_)
    if (!asked(m) && !left(m) && liveness(m) != Liveness::gone) waiting_for.push_back(m);
  const bool timed_out = Clock::now() - *opened_ >= rules_.rendezvous_timeout;
  // Too few members without the processes on their way (restarts): wait for them rather
  // than fail, within the rendezvous timeout. A job that needs every rank (a pipeline)
  // then regroups with its restarted ranks.
  const int would_have = static_cast<int>(std::count_if(
      members_.begin(), members_.end(), [&](const std::string& m) { return asked(m); }));
  const int newcomers = static_cast<int>(asks.size()) - would_have;
  const bool short_of_members = would_have + newcomers < rules_.min_members;
  const bool on_their_way = std::any_of(arriving.begin(), arriving.end(),
                                        [&](const std::string& m) { return !asked(m); });
  if (short_of_members && on_their_way && !timed_out) return std::nullopt;
  if (!waiting_for.empty() && !timed_out) {
    // A newcomer asked while the members train: ask them to regroup at their next commit,
    // where there is room for it (a spare waiting for a full job's next loss must not make
    // it regroup at every step).
    const int staying =
        static_cast<int>(std::count_if(members_.begin(), members_.end(), [&](const std::string& m) {
          return !left(m) && liveness(m) != Liveness::gone;
        }));
    if (round_ > 0 && pending_set_ < next && staying < rules_.max_members) {
      store_->add("elastic/pending", next - read_int(*store_, "elastic/pending"));
      pending_set_ = next;
    }
    return std::nullopt;
  }

  ClosedRound closed;
  closed.number = next;
  closed.left_out = waiting_for;
  // The last round's members keep their order, newcomers follow in the order they asked.
  for (const auto& m : members_)
    if (asked(m)) closed.members.push_back(m);
  for (const Ask& a : asks)
    if (std::find(members_.begin(), members_.end(), a.member) == members_.end() &&
        static_cast<int>(closed.members.size()) < rules_.max_members && asked(a.member))
      closed.members.push_back(a.member);
  const int nodes = count_nodes(closed.members);
  if (static_cast<int>(closed.members.size()) < rules_.min_members) {
    closed.failed = detail::concat(closed.members.size(), " member(s) left, fewer than the ",
                                   rules_.min_members, " the job needs (--min-ranks)");
  } else if (nodes < rules_.min_nodes) {
    closed.failed = detail::concat("members on ", nodes, " node(s) left, fewer than the ",
                                   rules_.min_nodes, " the job needs (", rules_.nodes_flag, ")");
  }
  if (!closed.failed.empty()) {
    store_->set(round_key(next, "members"), "failed\n" + closed.failed);
  } else {
    int source = 0;
    int64_t newest = kNoCommit;
    for (size_t i = 0; i < closed.members.size(); ++i)
      for (const Ask& a : asks)
        if (a.member == closed.members[i] && a.step > newest) {
          newest = a.step;
          source = static_cast<int>(i);
        }
    store_->set(round_key(next, "members"), format_round(closed.members, source, newest));
  }
  store_->add("elastic/round", next - read_int(*store_, "elastic/round"));
  round_ = next;
  members_ = closed.members;
  opened_.reset();
  return closed;
}

}  // namespace braid::comm
