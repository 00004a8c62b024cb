// ReceiveMatcher: matching by (peer, whole Tag) in post and stream order, receives from
// any rank by arrival order, early messages in recycled blocks, and the error messages
// that name both sides of a disagreement.
#include "comm/receive_matcher.h"

#include <algorithm>
#include <cstring>

#include "comm/blame.h"
#include "core/error.h"
#include "core/reduce.h"

namespace braid::comm {

namespace {

// A block for an early message starts at most this big and doubles as bytes arrive, so a
// frame that claims a large payload and never sends it costs little.
constexpr uint64_t kFirstBlockBytes = uint64_t{1} << 20;
// Freed blocks kept for reuse (a peer running one step ahead recycles the same few).
constexpr uint64_t kMaxSpareBytes = uint64_t{64} << 20;

std::unique_ptr<uint8_t[]> allocate(size_t bytes) {
  return std::unique_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(bytes, 1)]);
}

}  // namespace

ReceiveMatcher::ReceiveMatcher(int rank, int size, uint64_t max_buffered_bytes)
    : rank_(rank), size_(size), max_buffered_(max_buffered_bytes), peers_(size) {
  slots_.reserve(64);
  any_posted_.reserve(16);
}

uint32_t ReceiveMatcher::new_slot() {
  uint32_t s;
  if (!free_slots_.empty()) {
    s = free_slots_.back();
    free_slots_.pop_back();
  } else {
    s = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[s] = Request{};
  slots_[s].serial = next_serial_++;
  if (next_serial_ == 0) next_serial_ = 1;
  return s;
}

uint32_t ReceiveMatcher::slot_of(RequestId id) const {
  const auto s = static_cast<uint32_t>(id & 0xffffffffu);
  BRAID_CHECK(valid(id), "request ", id,
              " is unknown or was already released (a request is released by the wait() or "
              "test() that completes it)");
  return s;
}

bool ReceiveMatcher::valid(RequestId id) const {
  const auto s = static_cast<uint32_t>(id & 0xffffffffu);
  const auto serial = static_cast<uint32_t>(id >> 32);
  return serial != 0 && s < slots_.size() && slots_[s].serial == serial;
}

RequestId ReceiveMatcher::add_send(int peer, const Tag& tag, const CallSignature& sig,
                                   const void* data, size_t bytes) {
  BRAID_CHECK(peer >= 0 && peer < size_, "send to rank ", peer, " of a job of ", size_, " ranks");
  BRAID_CHECK(data != nullptr || bytes == 0, "send of ", bytes, " bytes from a null buffer");
  const uint32_t s = new_slot();
  Request& r = slots_[s];
  r.is_send = true;
  r.peer = peer;
  r.tag = tag;
  r.sig = sig;
  r.data = static_cast<uint8_t*>(const_cast<void*>(data));
  r.bytes = bytes;
  if (peer != rank_) return id_of(s);

  // To itself: the rank's own stream, one whole message at a time.
  FrameHeader h;
  h.tag = tag;
  h.sig = sig;
  h.bytes = bytes;
  Peer& p = peers_[rank_];
  try {
    if (!begin_matched(rank_, h)) begin_early(rank_, h);
    if (p.in_message) deliver(rank_, r.data, bytes);
  } catch (const PeerError&) {
    fail(slots_[s], std::current_exception());
    return id_of(s);
  }
  Request& done = slots_[s];  // slots_ may have grown
  done.done = bytes;
  complete(done);
  return id_of(s);
}

RequestId ReceiveMatcher::add_recv(int peer, const Tag& tag, const CallSignature& sig, void* data,
                                   size_t bytes, std::optional<Reduction> reduce, int* source) {
  BRAID_CHECK(peer == kAnyRank || (peer >= 0 && peer < size_), "receive from rank ", peer,
              " of a job of ", size_, " ranks (kAnyRank, ", kAnyRank, ", receives from any)");
  BRAID_CHECK(data != nullptr || bytes == 0, "receive of ", bytes, " bytes into a null buffer");
  if (reduce) {
    const size_t esize = dtype_size(reduce->dtype);
    BRAID_CHECK(bytes % esize == 0, "a reducing receive of ", bytes,
                " bytes is not a whole number of ", dtype_name(reduce->dtype), " elements");
  }
  const uint32_t s = new_slot();
  Request& r = slots_[s];
  r.peer = peer;
  r.tag = tag;
  r.sig = sig;
  r.data = static_cast<uint8_t*>(data);
  r.bytes = bytes;
  r.reduce = reduce;
  r.source = source;
  r.order = ++posts_;
  if (peer != kAnyRank && source != nullptr) *source = peer;

  // The buffered message it takes: the first of its peer's with its tag (or a conflicting
  // signature); from any rank, the one of those that arrived first.
  int from = -1;
  std::deque<Early>::iterator found;
  const int first = peer == kAnyRank ? 0 : peer;
  const int last = peer == kAnyRank ? size_ - 1 : peer;
  for (int q = first; q <= last; ++q) {
    std::deque<Early>& early = peers_[q].early;
    for (auto it = early.begin(); it != early.end(); ++it) {
      if (!signatures_conflict(r, it->tag, it->sig) && !(it->tag == tag)) continue;
      if (from < 0 || it->arrival < found->arrival) {
        from = q;
        found = it;
      }
      break;
    }
  }
  if (from >= 0)
    take_early(s, from, found);
  else
    (peer == kAnyRank ? any_posted_ : peers_[peer].posted).push_back(s);
  return id_of(s);
}

void ReceiveMatcher::take_early(uint32_t s, int peer, std::deque<Early>::iterator it) {
  Request& r = slots_[s];
  Peer& p = peers_[peer];
  if (signatures_conflict(r, it->tag, it->sig) || it->bytes != r.bytes) {
    fail(r, mismatch(r, peer, it->tag, it->sig, it->bytes, "sent"));
    if (!(it->tag == r.tag)) return;  // the message stays for the receive it belongs to
  } else {
    bind(r, peer);
    apply_early(r, *it);
  }
  // The message is this receive's: drop it, and point the stream at the receive when the
  // rest is still to come.
  const bool incomplete = it->received < it->bytes;
  if (incomplete) {
    p.sink = r.complete ? Sink::discard : Sink::request;
    p.target = s;
  }
  p.early_bytes -= it->bytes;
  give_block(std::move(it->block));
  p.early.erase(it);
  if (!incomplete && !r.complete) complete(r);
}

void ReceiveMatcher::bind(Request& r, int peer) {
  r.peer = peer;
  if (r.source != nullptr) *r.source = peer;
}

void ReceiveMatcher::apply_early(Request& r, Early& e) {
  Peer& p = peers_[r.peer];
  p.carry_len = 0;
  if (!r.reduce) {
    if (e.received > 0) std::memcpy(r.data, e.block.data.get(), e.received);
    r.done = e.received;
    return;
  }
  r.done = 0;
  apply(p, r, e.block.data.get(), e.received);
}

void ReceiveMatcher::release(RequestId id) {
  const uint32_t s = slot_of(id);
  Request& r = slots_[s];
  if (!r.is_send && !r.complete && r.peer == kAnyRank) {
    std::erase(any_posted_, s);
  } else if (!r.is_send && !r.complete) {
    Peer& p = peers_[r.peer];
    std::erase(p.posted, s);
    if (p.in_message && p.sink == Sink::request && p.target == s) p.sink = Sink::discard;
  }
  r = Request{};
  free_slots_.push_back(s);
}

bool ReceiveMatcher::finished(std::span<const RequestId> ids, const Deadline& deadline) {
  bool all = true;
  for (const RequestId id : ids) {
    const Request& r = get(id);
    if (r.complete) {
      if (r.error) std::rethrow_exception(r.error);
      continue;
    }
    all = false;
    if (r.peer == kAnyRank) {  // any peer may still send, until none is left
      if (failed_peers_ >= size_ - 1)
        BRAID_THROW(PeerError, "every other rank is gone (", failures(), "); rank ", rank_,
                    " was waiting for ", describe(r), " for ", deadline.waited_seconds(), " s");
      continue;
    }
    if (peer_failed(r.peer))
      BRAID_THROW(PeerError, peers_[r.peer].failure, "; rank ", rank_, " was waiting for ",
                  describe(r), " (", r.done, " of ", r.bytes, " bytes done) for ",
                  deadline.waited_seconds(), " s");
  }
  return all;
}

std::string ReceiveMatcher::pending(std::span<const RequestId> ids) {
  for (const RequestId id : ids) {
    const Request& r = get(id);
    if (!r.complete)
      return detail::concat(describe(r), " (", r.done, " of ", r.bytes, " bytes done)");
  }
  return "requests that just completed";
}

void ReceiveMatcher::throw_timeout(std::span<const RequestId> ids, const Deadline& deadline,
                                   const std::string& hint) {
  for (const RequestId id : ids) {
    const Request& r = get(id);
    if (r.complete) continue;
    if (r.peer == kAnyRank)
      BRAID_THROW(TimeoutError, "rank ", rank_, " timed out: no message with tag (channel ",
                  r.tag.channel, ", seq ", r.tag.seq, ", ", describe_step(r.sig, r.tag),
                  ") from any rank within ", deadline.waited_seconds(), " s, for ", describe(r),
                  "; ", size_ - 1 - failed_peers_,
                  " other ranks are still connected; check that one of them sends it, or "
                  "raise the timeout (BRAID_TIMEOUT_S)");
    BRAID_THROW(TimeoutError, "rank ", rank_, " timed out after ", deadline.waited_seconds(),
                " s waiting for ", describe(r), " (", r.done, " of ", r.bytes, " bytes done)",
                hint.empty() ? "" : "; ", hint,
                "; check that every rank makes the same calls, or raise the timeout "
                "(BRAID_TIMEOUT_S) (",
                no_progress_from(r.peer), ")");
  }
  BRAID_THROW(TimeoutError, "rank ", rank_, " timed out after ", deadline.waited_seconds(), " s");
}

uint64_t ReceiveMatcher::remaining(int peer) const {
  const Peer& p = peers_[peer];
  return p.in_message ? p.bytes - p.offset : 0;
}

bool ReceiveMatcher::begin_matched(int peer, const FrameHeader& h) {
  Peer& p = peers_[peer];
  // The candidates are the peer's own posted receives and the any-rank ones, taken
  // together in post order: the first posted that wants the message gets it.
  size_t i = 0, j = 0;
  for (;;) {
    const bool own = i < p.posted.size();
    const bool any = j < any_posted_.size();
    if (!own && !any) return false;
    const bool from_any = !own || (any && slots_[any_posted_[j]].order < slots_[p.posted[i]].order);
    std::vector<uint32_t>& list = from_any ? any_posted_ : p.posted;
    size_t& at = from_any ? j : i;
    const uint32_t s = list[at];
    Request& r = slots_[s];
    const bool conflict = signatures_conflict(r, h.tag, h.sig);
    if (!conflict && !(r.tag == h.tag)) {
      ++at;
      continue;
    }
    list.erase(list.begin() + static_cast<ptrdiff_t>(at));
    if (conflict || r.bytes != h.bytes) {
      fail(r, mismatch(r, peer, h.tag, h.sig, h.bytes, "sent"));
      if (!(r.tag == h.tag)) continue;  // the message is someone else's
      p.sink = Sink::discard;
    } else {
      bind(r, peer);
      p.sink = Sink::request;
      p.target = s;
    }
    p.in_message = true;
    p.bytes = h.bytes;
    p.offset = 0;
    p.carry_len = 0;
    if (h.bytes == 0) end_message(p);
    return true;
  }
}

void ReceiveMatcher::begin_early(int peer, const FrameHeader& h) {
  Peer& p = peers_[peer];
  if (p.early_bytes + h.bytes > max_buffered_) {
    const std::string reason = detail::concat(
        "rank ", peer, " sent ", p.early_bytes + h.bytes,
        " bytes ahead of the receives that match them (the last for ",
        describe_call(h.sig, h.tag.seq), " ", describe_step(h.sig, h.tag), "), past the bound of ",
        max_buffered_,
        " bytes (TransportOptions::max_buffered_bytes): every send needs a matching receive "
        "on rank ",
        rank_, "; raise the bound if the program really runs that far ahead");
    fail_peer(peer, reason);
    BRAID_THROW(PeerError, reason);
  }
  Early e;
  e.tag = h.tag;
  e.sig = h.sig;
  e.bytes = h.bytes;
  e.arrival = ++arrivals_;
  e.block = take_block(h.bytes);
  p.early_bytes += h.bytes;
  p.early.push_back(std::move(e));
  p.in_message = true;
  p.sink = Sink::early;
  p.bytes = h.bytes;
  p.offset = 0;
  p.carry_len = 0;
  if (h.bytes == 0) end_message(p);
}

std::span<uint8_t> ReceiveMatcher::direct(int peer, size_t max) {
  Peer& p = peers_[peer];
  const size_t n = static_cast<size_t>(std::min<uint64_t>(max, p.bytes - p.offset));
  switch (p.sink) {
    case Sink::request: {
      Request& r = slots_[p.target];
      if (r.reduce) return {};
      return {r.data + p.offset, n};
    }
    case Sink::early: {
      Early& e = p.early.back();
      grow(e, p.offset + n);
      return {e.block.data.get() + p.offset, n};
    }
    case Sink::discard:
      return {};
  }
  return {};
}

void ReceiveMatcher::advance(int peer, size_t n) {
  Peer& p = peers_[peer];
  if (p.sink == Sink::request) slots_[p.target].done += n;
  if (p.sink == Sink::early) p.early.back().received += n;
  p.offset += n;
  if (p.offset == p.bytes) end_message(p);
}

void ReceiveMatcher::deliver(int peer, const uint8_t* src, size_t n) {
  Peer& p = peers_[peer];
  switch (p.sink) {
    case Sink::request:
      apply(p, slots_[p.target], src, n);
      break;
    case Sink::early: {
      Early& e = p.early.back();
      grow(e, p.offset + n);
      if (n > 0) std::memcpy(e.block.data.get() + p.offset, src, n);
      e.received += n;
      break;
    }
    case Sink::discard:
      break;
  }
  p.offset += n;
  if (p.offset == p.bytes) end_message(p);
}

void ReceiveMatcher::apply(Peer& p, Request& r, const uint8_t* src, size_t n) {
  if (n == 0) return;
  if (!r.reduce) {
    std::memcpy(r.data + r.done, src, n);
    r.done += n;
    return;
  }
  const DType dtype = r.reduce->dtype;
  const ReduceOp op = r.reduce->op;
  const size_t esize = dtype_size(dtype);
  if (p.carry_len > 0) {  // finish the element split across two deliveries
    const size_t take = std::min<size_t>(esize - p.carry_len, n);
    std::memcpy(p.carry + p.carry_len, src, take);
    p.carry_len += static_cast<uint32_t>(take);
    src += take;
    n -= take;
    if (p.carry_len < esize) return;
    alignas(8) uint8_t element[8];
    std::memcpy(element, p.carry, esize);
    reduce_into(dtype, op, r.data + r.done, element, 1);
    r.done += esize;
    p.carry_len = 0;
  }
  const size_t whole = n / esize * esize;
  if (whole > 0) {
    if (reinterpret_cast<uintptr_t>(src) % esize == 0) {
      reduce_into(dtype, op, r.data + r.done, src, whole / esize);
    } else {  // a misaligned source (a byte stream's buffer): through an aligned bounce
      alignas(64) uint8_t bounce[4096];
      for (size_t at = 0; at < whole; at += sizeof(bounce)) {
        const size_t m = std::min(sizeof(bounce), whole - at);
        std::memcpy(bounce, src + at, m);
        reduce_into(dtype, op, r.data + r.done + at, bounce, m / esize);
      }
    }
    r.done += whole;
  }
  if (n > whole) {
    std::memcpy(p.carry, src + whole, n - whole);
    p.carry_len = static_cast<uint32_t>(n - whole);
  }
}

void ReceiveMatcher::end_message(Peer& p) {
  if (p.sink == Sink::request) {
    Request& r = slots_[p.target];
    if (!r.complete) complete(r);
  }
  p.in_message = false;
  p.sink = Sink::discard;
  p.carry_len = 0;
}

void ReceiveMatcher::fail_peer(int peer, const std::string& reason) {
  Peer& p = peers_[peer];
  if (!p.failure.empty()) return;
  p.failure = reason;
  if (peer != rank_) ++failed_peers_;
}

void ReceiveMatcher::reset_peer(int peer, std::span<const uint32_t> queued_sends,
                                const std::string& why) {
  Peer& p = peers_[peer];
  const std::string reason = p.failure.empty() ? why : detail::concat(p.failure, "; ", why);
  const auto fail_with = [&](Request& r) {
    if (!r.complete) fail(r, std::make_exception_ptr(PeerError(reason)));
  };
  for (const uint32_t s : p.posted) fail_with(slots_[s]);
  p.posted.clear();
  for (const uint32_t s : queued_sends) fail_with(slots_[s]);
  if (p.in_message && p.sink == Sink::request) fail_with(slots_[p.target]);
  for (Early& e : p.early) give_block(std::move(e.block));
  p.early.clear();
  p.early_bytes = 0;
  p.in_message = false;
  p.sink = Sink::discard;
  p.carry_len = 0;
  if (!p.failure.empty() && peer != rank_) --failed_peers_;
  p.failure.clear();
}

std::string ReceiveMatcher::failures() const {
  if (failed_peers_ == 0) return detail::concat("rank ", rank_, " is the only rank of the job");
  constexpr int kNamed = 3;  // a large job's list would drown the message
  std::string s;
  int named = 0;
  for (int q = 0; q < size_ && named < kNamed; ++q) {
    if (q == rank_ || peers_[q].failure.empty()) continue;
    s += detail::concat(named > 0 ? "; " : "", peers_[q].failure);
    ++named;
  }
  if (failed_peers_ > named) s += detail::concat("; and ", failed_peers_ - named, " more");
  return s;
}

void ReceiveMatcher::complete(Request& r) { r.complete = true; }

void ReceiveMatcher::fail(Request& r, std::exception_ptr e) {
  r.error = std::move(e);
  r.complete = true;
}

bool ReceiveMatcher::signatures_conflict(const Request& r, const Tag& tag,
                                         const CallSignature& sig) const {
  if (r.sig.call == CallKind::p2p && sig.call == CallKind::p2p) return false;
  return r.tag.channel == tag.channel && r.tag.seq == tag.seq && !(r.sig == sig);
}

std::exception_ptr ReceiveMatcher::mismatch(const Request& r, int from, const Tag& tag,
                                            const CallSignature& sig, uint64_t bytes,
                                            const char* what) const {
  const std::string message = detail::concat(
      "ranks ", rank_, " and ", from, " disagree about the call they are in: rank ", rank_,
      " posted a ", r.bytes, "-byte receive ", r.peer == kAnyRank ? "from any rank " : "", "for ",
      describe_call(r.sig, r.tag.seq), " ", describe_step(r.sig, r.tag), " but rank ", from, " ",
      what, " ", bytes, " bytes for ", describe_call(sig, tag.seq), " ", describe_step(sig, tag),
      "; every rank must make the same collective calls in the same order with the same "
      "arguments");
  return std::make_exception_ptr(CollectiveMismatch(message));
}

std::string ReceiveMatcher::describe(const Request& r) const {
  const std::string whom =
      r.peer == kAnyRank ? std::string("any rank") : detail::concat("rank ", r.peer);
  return detail::concat(r.is_send ? "a send of " : "a receive of ", r.bytes, " bytes ",
                        r.is_send ? "to " : "from ", whom, " for ", describe_call(r.sig, r.tag.seq),
                        " ", describe_step(r.sig, r.tag));
}

ReceiveMatcher::Block ReceiveMatcher::take_block(uint64_t bytes) {
  // The smallest spare block that holds the whole message, if any.
  size_t best = spare_blocks_.size();
  for (size_t i = 0; i < spare_blocks_.size(); ++i)
    if (spare_blocks_[i].capacity >= bytes &&
        (best == spare_blocks_.size() || spare_blocks_[i].capacity < spare_blocks_[best].capacity))
      best = i;
  if (best < spare_blocks_.size()) {
    Block b = std::move(spare_blocks_[best]);
    spare_blocks_.erase(spare_blocks_.begin() + static_cast<ptrdiff_t>(best));
    spare_bytes_ -= b.capacity;
    return b;
  }
  Block b;
  b.capacity = static_cast<size_t>(std::min(bytes, kFirstBlockBytes));
  b.data = allocate(b.capacity);
  return b;
}

void ReceiveMatcher::give_block(Block b) {
  if (!b.data || spare_bytes_ + b.capacity > kMaxSpareBytes) return;
  spare_bytes_ += b.capacity;
  spare_blocks_.push_back(std::move(b));
}

void ReceiveMatcher::grow(Early& e, uint64_t need) {
  if (need <= e.block.capacity) return;
  const uint64_t capacity = std::max(need, std::min<uint64_t>(e.bytes, 2 * e.block.capacity));
  Block b;
  b.capacity = static_cast<size_t>(capacity);
  b.data = allocate(b.capacity);
  std::memcpy(b.data.get(), e.block.data.get(), e.received);
  e.block = std::move(b);
}

}  // namespace braid::comm
