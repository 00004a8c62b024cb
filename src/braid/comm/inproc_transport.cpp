// The in-process transport (comm/inproc_transport.h). One mutex guards the hub; data is
// copied outside it. Life of a message:
//   posted    -> the sender's buffer, in the destination's incoming queue or claimed by
//                a receive; once claimed, whichever of the two ranks waits first copies
//                (or reduces) it into the receive's buffer and marks both done;
//   buffering -> the sender, waiting, copies it into the hub (unclaimed for the grace
//                period) and then it is
//   buffered  -> complete for the sender; delivered from the hub's copy by the receiver;
//   done / failed.
// A pair being copied (`copying`) changes state only through the copying thread, and
// close() waits until no thread copies from or into the closing rank's buffers.
#include "comm/inproc_transport.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "comm/algorithm.h"
#include "comm/blame.h"
#include "comm/wait_loop.h"
#include "core/error.h"

namespace braid::comm {

namespace inproc_detail {

struct Receive;

struct Message {
  int src = 0, dst = 0;
  Tag tag;
  CallSignature sig;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  enum class State { posted, buffering, buffered, done, failed } state = State::posted;
  bool claimed = false;               // attached to a receive, out of the incoming queue
  bool copying = false;               // a thread reads `data` outside the lock
  std::shared_ptr<Receive> receiver;  // while claimed and not yet copied
  std::unique_ptr<uint8_t[]> copy;
  std::string error;
  Clock::time_point posted_at;
  uint64_t arrival = 0;  // the hub's send number: any-rank receives take the lowest
};

struct Receive {
  int src = 0, dst = 0;  // src: kAnyRank while an any-rank receive is unmatched
  Tag tag;
  CallSignature sig;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  std::optional<Reduction> reduce;
  enum class State { posted, matched, done, failed } state = State::posted;
  std::shared_ptr<Message> msg;
  std::string error;
  int* source = nullptr;  // where the sender is written when an any-rank receive matches
  uint64_t order = 0;     // the hub's receive number: a send takes the lowest that wants it
};

}  // namespace inproc_detail

using inproc_detail::Message;
using inproc_detail::Receive;
using MsgState = Message::State;
using RecvState = Receive::State;

struct InprocTransport::Request {
  std::shared_ptr<Message> send;
  std::shared_ptr<Receive> recv;
};

namespace {

// How long a waiting sender leaves its message for the receive to claim before copying
// it into the hub. Only performance depends on it: long enough that a receiver a little
// behind in the same algorithm step copies straight from the sender's buffer.
constexpr auto kBufferGrace = std::chrono::microseconds(200);

std::string describe(const CallSignature& sig, const Tag& tag) {
  if (sig.call == CallKind::p2p) return "send/recv with " + describe_step(sig, tag);
  std::string s = describe_call(sig, tag.seq);
  if (sig.algorithm != 0)
    s += detail::concat(" via ", algorithm_name(static_cast<Algorithm>(sig.algorithm)));
  return s;
}

bool same_call(const Tag& a, const Tag& b) { return a.channel == b.channel && a.seq == b.seq; }

std::string from_text(int src) {
  return src == kAnyRank ? std::string("any rank") : detail::concat("rank ", src);
}

}  // namespace

class InprocHub {
 public:
  struct Rank {
    std::condition_variable cv;  // the rank's thread waits here; notified on any change
    std::vector<std::deque<std::shared_ptr<Message>>> incoming;  // [src], unmatched, in order
    std::vector<std::deque<std::shared_ptr<Receive>>> posted;    // [src], unmatched, in order
    std::deque<std::shared_ptr<Receive>> posted_any;             // from any rank, in order
    std::vector<std::shared_ptr<Receive>> matched;               // matched receives not yet copied
    std::vector<std::shared_ptr<Receive>> work;                  // reused scratch of the copy phase
    std::vector<size_t> buffered_from;                           // [src], bytes held in the hub
    std::map<int, std::string> mismatch;                         // peer -> why this pair disagrees
    int copying_from = 0;  // threads now reading this rank's send buffers
    int copying_into = 0;  // threads now writing this rank's receive buffers
    bool dead = false;
    std::string death;
  };

  InprocHub(int size, size_t max_buffered)
      : ranks(static_cast<size_t>(size)), max_buffered(max_buffered) {
    for (auto& r : ranks) {
      r.incoming.resize(static_cast<size_t>(size));
      r.posted.resize(static_cast<size_t>(size));
      r.buffered_from.assign(static_cast<size_t>(size), 0);
    }
  }

  int size() const { return static_cast<int>(ranks.size()); }

  // Both ranks of a disagreeing pair learn it: each one's waits involving the other
  // throw CollectiveMismatch with `text`.
  void record_mismatch(int a, int b, const std::string& text) {
    ranks[static_cast<size_t>(a)].mismatch.emplace(b, text);
    ranks[static_cast<size_t>(b)].mismatch.emplace(a, text);
    ranks[static_cast<size_t>(a)].cv.notify_all();
    ranks[static_cast<size_t>(b)].cv.notify_all();
  }

  static std::string call_text(int rank, const CallSignature& sig, const Tag& tag) {
    return detail::concat("rank ", rank, " is in ", describe(sig, tag));
  }
  static std::string advice() {
    return "; every rank must make the same calls in the same order with the same count, "
           "dtype, op and root";
  }
  static std::string mismatch_text(const Receive& r, const Message& m) {
    if (r.tag == m.tag && r.bytes != m.bytes)
      return detail::concat(
          "ranks disagree about the call they are in: ", call_text(r.dst, r.sig, r.tag),
          " and expects ", r.bytes, " bytes (", describe_step(r.sig, r.tag), ") from ",
          from_text(r.src), ", but ", call_text(m.src, m.sig, m.tag), " and sent ", m.bytes,
          " bytes", advice());
    return detail::concat(
        "ranks disagree about the call they are in: ", call_text(r.dst, r.sig, r.tag), ", ",
        call_text(m.src, m.sig, m.tag), advice());
  }

  // Collective calls with the same (channel, seq) must agree on the whole signature;
  // point-to-point messages match by tag alone.
  static bool conflicts(const Tag& ta, const CallSignature& a, const Tag& tb,
                        const CallSignature& b) {
    return same_call(ta, tb) && a.call != CallKind::p2p && b.call != CallKind::p2p && !(a == b);
  }
  static bool conflicts(const Receive& r, const Message& m) {
    return conflicts(r.tag, r.sig, m.tag, m.sig);
  }

  // Rank `me` starts an operation with `peer` in call (tag, sig): compare with what the
  // peer already does towards `me` in the same call (its receives from `me`, its messages
  // to `me`), so two ranks that only wait for each other still learn they disagree.
  bool check_peer(int me, int peer, const Tag& tag, const CallSignature& sig) {
    for (const auto& r : ranks[static_cast<size_t>(peer)].posted[static_cast<size_t>(me)])
      if (conflicts(tag, sig, r->tag, r->sig)) {
        record_mismatch(
            me, peer,
            detail::concat("ranks disagree about the call they are in: ", call_text(me, sig, tag),
                           ", ", call_text(peer, r->sig, r->tag), advice()));
        return false;
      }
    for (const auto& m : ranks[static_cast<size_t>(me)].incoming[static_cast<size_t>(peer)])
      if (conflicts(tag, sig, m->tag, m->sig)) {
        record_mismatch(
            me, peer,
            detail::concat("ranks disagree about the call they are in: ", call_text(me, sig, tag),
                           ", ", call_text(peer, m->sig, m->tag), advice()));
        return false;
      }
    return true;
  }

  void match(const std::shared_ptr<Receive>& r, const std::shared_ptr<Message>& m) {
    if (r->src == kAnyRank) {
      r->src = m->src;
      if (r->source != nullptr) *r->source = m->src;
    }
    m->claimed = true;
    m->receiver = r;
    r->msg = m;
    r->state = RecvState::matched;
    auto& dst = ranks[static_cast<size_t>(r->dst)];
    dst.matched.push_back(r);
    dst.cv.notify_all();
  }

  void post_send(const std::shared_ptr<Message>& m) {
    m->arrival = ++sends_made;
    auto& dst = ranks[static_cast<size_t>(m->dst)];
    if (dst.dead) {
      m->state = MsgState::failed;
      m->error = detail::concat("peer rank ", m->dst, " is gone (", dst.death, ")");
      return;
    }
    if (!check_peer(m->src, m->dst, m->tag, m->sig)) return;
    // The destination's receives from the sender and from any rank, together in post order.
    auto& own = dst.posted[static_cast<size_t>(m->src)];
    auto& any = dst.posted_any;
    auto i = own.begin(), j = any.begin();
    while (i != own.end() || j != any.end()) {
      const bool from_any = i == own.end() || (j != any.end() && (*j)->order < (*i)->order);
      auto& it = from_any ? j : i;
      const Receive& r = **it;
      if (conflicts(r, *m) || (r.tag == m->tag && r.bytes != m->bytes))
        return record_mismatch(m->src, m->dst, mismatch_text(r, *m));
      if (r.tag == m->tag) {
        auto taken = *it;
        (from_any ? any : own).erase(it);
        return match(taken, m);
      }
      ++it;
    }
    dst.incoming[static_cast<size_t>(m->src)].push_back(m);
  }

  void post_recv(const std::shared_ptr<Receive>& r) {
    r->order = ++receives_made;
    auto& me = ranks[static_cast<size_t>(r->dst)];
    if (r->src == kAnyRank) return post_any_recv(r);
    if (!check_peer(r->dst, r->src, r->tag, r->sig)) return;
    auto& incoming = me.incoming[static_cast<size_t>(r->src)];
    for (auto it = incoming.begin(); it != incoming.end(); ++it) {
      if (conflicts(*r, **it) || ((*it)->tag == r->tag && (*it)->bytes != r->bytes))
        return record_mismatch(r->src, r->dst, mismatch_text(*r, **it));
      if ((*it)->tag == r->tag) {
        auto m = *it;
        incoming.erase(it);
        return match(r, m);
      }
    }
    me.posted[static_cast<size_t>(r->src)].push_back(r);
  }

  // An any-rank receive takes, of every sender's first unmatched message that wants it (its
  // tag, or a conflicting signature), the one sent first.
  void post_any_recv(const std::shared_ptr<Receive>& r) {
    auto& me = ranks[static_cast<size_t>(r->dst)];
    std::deque<std::shared_ptr<Message>>* queue = nullptr;
    std::deque<std::shared_ptr<Message>>::iterator found;
    for (auto& incoming : me.incoming)
      for (auto it = incoming.begin(); it != incoming.end(); ++it) {
        if (!conflicts(*r, **it) && !((*it)->tag == r->tag)) continue;
        if (!queue || (*it)->arrival < (*found)->arrival) {
          queue = &incoming;
          found = it;
        }
        break;
      }
    if (!queue) return me.posted_any.push_back(r);
    const Message& m = **found;
    if (conflicts(*r, m) || m.bytes != r->bytes)
      return record_mismatch(m.src, r->dst, mismatch_text(*r, m));
    auto taken = *found;
    queue->erase(found);
    match(r, taken);
  }

  // Marks a matched pair as being copied by the calling thread and queues it in `work`.
  void take(const std::shared_ptr<Receive>& r, std::vector<std::shared_ptr<Receive>>& work) {
    Message& m = *r->msg;
    m.copying = true;
    if (m.state == MsgState::posted) ++ranks[static_cast<size_t>(m.src)].copying_from;
    ++ranks[static_cast<size_t>(r->dst)].copying_into;
    work.push_back(r);
  }

  // Takes every matched receive of `rank` whose data is ready.
  void take_receives(int rank, std::vector<std::shared_ptr<Receive>>& work) {
    std::erase_if(ranks[static_cast<size_t>(rank)].matched, [&](const std::shared_ptr<Receive>& r) {
      Message& m = *r->msg;
      if (m.state == MsgState::failed) {
        r->state = RecvState::failed;
        r->error = m.error;
        m.receiver.reset();
        return true;
      }
      if (m.state != MsgState::posted && m.state != MsgState::buffered) return false;
      take(r, work);
      return true;
    });
  }

  // Takes the copy of a send that a receive has claimed but not started on, so a sender
  // need not wait for the receiving thread to come around.
  void take_send(Message& m, std::vector<std::shared_ptr<Receive>>& work) {
    if (!m.claimed || m.copying || m.state != MsgState::posted || !m.receiver) return;
    auto r = m.receiver;
    auto& matched = ranks[static_cast<size_t>(r->dst)].matched;
    const auto it = std::find(matched.begin(), matched.end(), r);
    if (it == matched.end()) return;
    matched.erase(it);
    take(r, work);
  }

  // Copies (or reduces) the taken pairs outside the lock and completes both sides.
  void copy_work(std::vector<std::shared_ptr<Receive>>& work, std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    for (const auto& r : work) {
      const Message& m = *r->msg;  // stable while `copying`
      if (m.bytes == 0) continue;
      if (r->reduce)
        reduce_into(r->reduce->dtype, r->reduce->op, r->data, m.data,
                    m.bytes / dtype_size(r->reduce->dtype));
      else
        std::memcpy(r->data, m.data, m.bytes);
    }
    lock.lock();
    for (const auto& r : work) {
      Message& m = *r->msg;
      auto& src = ranks[static_cast<size_t>(m.src)];
      auto& dst = ranks[static_cast<size_t>(r->dst)];
      m.copying = false;
      if (m.state == MsgState::buffered) {
        if (!dst.dead) dst.buffered_from[static_cast<size_t>(m.src)] -= m.bytes;  // else reset
        m.copy.reset();
      } else {
        --src.copying_from;
      }
      --dst.copying_into;
      m.state = MsgState::done;
      m.receiver.reset();
      r->state = RecvState::done;
      r->msg.reset();
      src.cv.notify_all();
      dst.cv.notify_all();
    }
    work.clear();
  }

  void fail(int rank, const std::string& reason, std::unique_lock<std::mutex>& lock) {
    auto& me = ranks[static_cast<size_t>(rank)];
    if (!me.dead) {
      me.dead = true;
      me.death = reason;
      const std::string gone = detail::concat("peer rank ", rank, " is gone (", reason, ")");
      for (auto& other : ranks) {
        // This rank's sends that nobody has started copying can no longer be read.
        std::erase_if(other.incoming[static_cast<size_t>(rank)], [&](const auto& m) {
          if (m->state != MsgState::posted) return false;
          m->state = MsgState::failed;
          m->error = gone;
          return true;
        });
        for (const auto& r : other.matched) {
          Message& m = *r->msg;
          if (m.src == rank && m.state == MsgState::posted && !m.copying) {
            m.state = MsgState::failed;
            m.error = gone;
          }
        }
        other.cv.notify_all();
      }
      for (auto& q : me.incoming) q.clear();
      for (auto& q : me.posted) q.clear();
      me.posted_any.clear();
      for (const auto& r : me.matched) r->msg->receiver.reset();
      me.matched.clear();
      std::fill(me.buffered_from.begin(), me.buffered_from.end(), 0);
    }
    me.cv.wait(lock, [&] { return me.copying_from == 0 && me.copying_into == 0; });
  }

  std::mutex mutex;
  std::vector<Rank> ranks;
  const size_t max_buffered;
  uint64_t sends_made = 0;     // numbers sends (Message::arrival)
  uint64_t receives_made = 0;  // numbers receives (Receive::order)
};

InprocTransport::InprocTransport(std::shared_ptr<InprocHub> hub, int rank)
    : hub_(std::move(hub)), rank_(rank) {}

InprocTransport::~InprocTransport() { close("its transport was destroyed"); }

int InprocTransport::size() const { return hub_->size(); }

void InprocTransport::close(const std::string& reason) {
  std::unique_lock lock(hub_->mutex);
  hub_->fail(rank_, reason, lock);
}

std::string InprocTransport::peer_gone(int peer) {
  std::lock_guard lock(hub_->mutex);
  const auto& me = hub_->ranks[static_cast<size_t>(rank_)];
  if (me.dead) return detail::concat("rank ", rank_, " is closed (", me.death, ")");
  if (peer < 0 || peer >= size()) return {};
  const auto& p = hub_->ranks[static_cast<size_t>(peer)];
  return p.dead ? detail::concat("rank ", peer, " failed (", p.death, ")") : std::string();
}

RequestId InprocTransport::isend(int peer, const Tag& tag, const CallSignature& sig,
                                 const void* data, size_t bytes) {
  BRAID_CHECK(peer >= 0 && peer < size(), "inproc isend: peer ", peer, " is not a rank of ",
              size());
  BRAID_CHECK(data != nullptr || bytes == 0, "inproc isend: null buffer for ", bytes, " bytes");
  auto m = std::make_shared<Message>();
  m->src = rank_;
  m->dst = peer;
  m->tag = tag;
  m->sig = sig;
  m->data = static_cast<const uint8_t*>(data);
  m->bytes = bytes;
  m->posted_at = Clock::now();
  {
    std::lock_guard lock(hub_->mutex);
    hub_->post_send(m);
  }
  const RequestId id = next_id_++;
  requests_.emplace(id, std::make_shared<Request>(Request{std::move(m), nullptr}));
  return id;
}

RequestId InprocTransport::irecv(int peer, const Tag& tag, const CallSignature& sig, void* data,
                                 size_t bytes, std::optional<Reduction> reduce, int* source) {
  BRAID_CHECK(peer == kAnyRank || (peer >= 0 && peer < size()), "inproc irecv: peer ", peer,
              " is not a rank of ", size(), " (nor kAnyRank)");
  BRAID_CHECK(data != nullptr || bytes == 0, "inproc irecv: null buffer for ", bytes, " bytes");
  BRAID_CHECK(!reduce || bytes % dtype_size(reduce->dtype) == 0, "inproc irecv: ", bytes,
              " bytes is not a whole number of ", dtype_name(reduce->dtype), " elements");
  auto r = std::make_shared<Receive>();
  r->src = peer;
  r->dst = rank_;
  r->tag = tag;
  r->sig = sig;
  r->data = static_cast<uint8_t*>(data);
  r->bytes = bytes;
  r->reduce = reduce;
  if (peer == kAnyRank)
    r->source = source;
  else if (source != nullptr)
    *source = peer;
  {
    std::lock_guard lock(hub_->mutex);
    hub_->post_recv(r);
  }
  const RequestId id = next_id_++;
  requests_.emplace(id, std::make_shared<Request>(Request{nullptr, std::move(r)}));
  return id;
}

namespace {

bool complete(const InprocTransport::Request& q) {
  if (q.send) return q.send->state == MsgState::buffered || q.send->state == MsgState::done;
  return q.recv->state == RecvState::done;
}

int peer_of(const InprocTransport::Request& q) { return q.send ? q.send->dst : q.recv->src; }

std::string describe_request(const InprocTransport::Request& q) {
  if (q.send)
    return detail::concat("sending ", q.send->bytes, " bytes (",
                          describe_step(q.send->sig, q.send->tag), ") to rank ", q.send->dst,
                          " in ", describe(q.send->sig, q.send->tag));
  return detail::concat("receiving ", q.recv->bytes, " bytes (",
                        describe_step(q.recv->sig, q.recv->tag), ") from ", from_text(q.recv->src),
                        " in ", describe(q.recv->sig, q.recv->tag));
}

// An unmatched any-rank receive: one no single peer is to blame for.
bool waits_for_any(const InprocTransport::Request& q) { return q.recv && q.recv->src == kAnyRank; }

}  // namespace

// Holds the hub's lock from the first pass to the end (idle() waits on the rank's
// condition variable, which lets it go meanwhile).
class InprocTransport::Steps final : public WaitSteps {
 public:
  Steps(InprocTransport& t, std::span<const RequestId> ids, const Deadline& deadline)
      : t_(t), hub_(*t.hub_), ids_(ids), deadline_(deadline), lock_(hub_.mutex) {}

  // Copies whatever is matched and buffers what waited too long for its receive, until
  // nothing more moves; then knows whether every request is done.
  bool progress() override {
    auto& me = hub_.ranks[static_cast<size_t>(t_.rank_)];
    bool moved = false;
    for (;;) {
      if (me.dead) BRAID_THROW(PeerError, "rank ", t_.rank_, " is closed (", me.death, ")");
      // This rank's receives, and its waited sends whose receive is posted (the receiving
      // thread may be busy elsewhere).
      auto& work = me.work;
      hub_.take_receives(t_.rank_, work);
      for (RequestId id : ids_)
        if (auto it = t_.requests_.find(id); it != t_.requests_.end() && it->second->send)
          hub_.take_send(*it->second->send, work);
      if (!work.empty()) {
        hub_.copy_work(work, lock_);
        moved = true;
        continue;
      }
      const std::shared_ptr<Message> to_buffer = scan();
      if (all_done_ || !to_buffer) return moved;
      buffer(to_buffer);
      moved = true;
    }
  }
  bool done() override { return all_done_; }
  std::string pending() override { return describe_request(first_pending()); }
  [[noreturn]] void timeout() override {
    const Request& q = first_pending();
    if (waits_for_any(q))
      BRAID_THROW(TimeoutError, "rank ", t_.rank_, ": timed out: no message with tag (channel ",
                  q.recv->tag.channel, ", seq ", q.recv->tag.seq, ", ",
                  describe_step(q.recv->sig, q.recv->tag), ") from any rank within ",
                  deadline_.waited_seconds(), " s while ", describe_request(q),
                  "; check that a live rank sends it, or raise the timeout");
    BRAID_THROW(TimeoutError, "rank ", t_.rank_, ": timed out after ", deadline_.waited_seconds(),
                " s ", describe_request(q), "; rank ", peer_of(q),
                " is stuck, slower, or not making this call (raise the timeout if it is "
                "only slow) (",
                no_progress_from(peer_of(q)), ")");
  }
  void idle(Clock::time_point, Clock::duration, Clock::time_point wake) override {
    auto& me = hub_.ranks[static_cast<size_t>(t_.rank_)];
    wake = std::min(wake, next_buffer_);
    if (wake == Clock::time_point::max())
      me.cv.wait(lock_);
    else
      me.cv.wait_until(lock_, wake);
  }
  void release() override {
    lock_.unlock();
    for (RequestId id : ids_) t_.requests_.erase(id);
  }
  // The rank fails with its wait, so peers waiting on it fail too instead of timing out.
  void fail() override {
    if (lock_.owns_lock()) lock_.unlock();
    for (RequestId id : ids_) t_.requests_.erase(id);
    try {
      throw;
    } catch (const std::exception& e) {
      t_.close(detail::concat("it failed: ", e.what()));
    } catch (...) {
    }
  }

 private:
  // Throws the first failure among the requests; sets all_done_ and next_buffer_; returns
  // a waited send that has waited long enough for its receive to be buffered, if any.
  std::shared_ptr<Message> scan() {
    const auto& me = hub_.ranks[static_cast<size_t>(t_.rank_)];
    const auto now = Clock::now();
    all_done_ = true;
    next_buffer_ = Clock::time_point::max();
    std::shared_ptr<Message> to_buffer;
    for (RequestId id : ids_) {
      auto it = t_.requests_.find(id);
      BRAID_CHECK(it != t_.requests_.end(), "inproc wait: unknown or released request ", id);
      const Request& q = *it->second;
      if (complete(q)) continue;
      all_done_ = false;
      const int peer = peer_of(q);
      // After a mismatch this rank's call is broken whichever peer it now waits for.
      if (!me.mismatch.empty())
        BRAID_THROW(CollectiveMismatch, "rank ", t_.rank_, ": ", me.mismatch.begin()->second);
      if (q.send && q.send->state == MsgState::failed)
        BRAID_THROW(PeerError, "rank ", t_.rank_, ": ", q.send->error, " while ",
                    describe_request(q));
      if (q.recv && q.recv->state == RecvState::failed)
        BRAID_THROW(PeerError, "rank ", t_.rank_, ": ", q.recv->error, " while ",
                    describe_request(q));
      if (waits_for_any(q)) {  // any live peer may still send it
        if (const std::string gone = every_other_gone(); !gone.empty())
          BRAID_THROW(PeerError, "rank ", t_.rank_, ": every other rank is gone (", gone,
                      ") while ", describe_request(q));
        continue;
      }
      const auto& other = hub_.ranks[static_cast<size_t>(peer)];
      // A dead peer's buffered messages stay deliverable; nothing else involving it can
      // complete.
      if (other.dead && (q.send || q.recv->state == RecvState::posted))
        BRAID_THROW(PeerError, "rank ", t_.rank_, ": peer rank ", peer, " is gone (", other.death,
                    ") while ", describe_request(q));
      if (q.send && !q.send->claimed && q.send->state == MsgState::posted) {
        // Nobody else can post the receive of a message to oneself while we wait.
        const auto when =
            q.send->dst == t_.rank_ ? q.send->posted_at : q.send->posted_at + kBufferGrace;
        if (now >= when) {
          if (!to_buffer) to_buffer = q.send;
        } else {
          next_buffer_ = std::min(next_buffer_, when);
        }
      }
    }
    return all_done_ ? nullptr : to_buffer;
  }

  // Copies the message into the hub (outside the lock), so its send completes.
  void buffer(const std::shared_ptr<Message>& message) {
    Message& m = *message;
    auto& dst = hub_.ranks[static_cast<size_t>(m.dst)];
    size_t& held = dst.buffered_from[static_cast<size_t>(t_.rank_)];
    if (held + m.bytes > hub_.max_buffered)
      BRAID_THROW(IoError, "rank ", t_.rank_, ": ", held + m.bytes, " bytes sent to rank ", m.dst,
                  " would wait for receives it has not posted, over the limit of ",
                  hub_.max_buffered, " bytes (max_buffered_bytes); rank ", m.dst,
                  " is far behind or never receives them (",
                  describe_request(Request{message, nullptr}), ")");
    held += m.bytes;
    m.state = MsgState::buffering;
    lock_.unlock();
    auto copy = std::make_unique<uint8_t[]>(std::max<size_t>(m.bytes, 1));
    if (m.bytes) std::memcpy(copy.get(), m.data, m.bytes);
    lock_.lock();
    m.copy = std::move(copy);
    m.data = m.copy.get();
    m.state = MsgState::buffered;
    if (m.claimed) dst.cv.notify_all();
  }

  // "rank 1: <why>; rank 2: <why>" when every rank but this one is dead, else "".
  std::string every_other_gone() const {
    std::string gone;
    for (int p = 0; p < hub_.size(); ++p) {
      if (p == t_.rank_) continue;
      const auto& other = hub_.ranks[static_cast<size_t>(p)];
      if (!other.dead) return {};
      gone += detail::concat(gone.empty() ? "" : "; ", "rank ", p, ": ", other.death);
    }
    return gone.empty() ? std::string("this is the only rank") : gone;
  }

  const Request& first_pending() const {
    for (RequestId id : ids_)
      if (auto it = t_.requests_.find(id); it != t_.requests_.end() && !complete(*it->second))
        return *it->second;
    BRAID_THROW(Error, "inproc wait: no pending request (internal error)");
  }

  InprocTransport& t_;
  InprocHub& hub_;
  std::span<const RequestId> ids_;
  Deadline deadline_;
  std::unique_lock<std::mutex> lock_;
  bool all_done_ = false;
  Clock::time_point next_buffer_ = Clock::time_point::max();
};

void InprocTransport::wait(std::span<const RequestId> ids, Deadline deadline) {
  Steps steps(*this, ids, deadline);
  run_wait(steps, rank_, deadline);
}

bool InprocTransport::test(RequestId id) {
  Steps steps(*this, std::span<const RequestId>(&id, 1), Deadline::never());
  return run_test(steps);
}

std::vector<std::shared_ptr<Transport>> make_inproc_transports(int size,
                                                               size_t max_buffered_bytes) {
  BRAID_CHECK(size >= 1, "make_inproc_transports: size must be >= 1, got ", size);
  auto hub = std::make_shared<InprocHub>(size, max_buffered_bytes);
  std::vector<std::shared_ptr<Transport>> out;
  out.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<InprocTransport>(hub, r));
  return out;
}

}  // namespace braid::comm
