// The bookkeeping the byte-stream transports (shm, tcp) share: the request table, each
// peer's posted receives and early messages, and the sink of the message each peer's
// stream is delivering. It is the Transport contract's matching rules in one place: a
// message matches the earliest posted receive with an equal Tag among those from its peer
// and those from any rank (kAnyRank), in post order; a message that arrives first is
// buffered (bounded per peer) until its receive is posted, and an any-rank receive takes
// the buffered message that arrived first, whichever peer sent it; a length
// or (for collectives) signature disagreement fails the receive with CollectiveMismatch
// naming both calls; a broken peer fails every request still waiting on it, except an
// unmatched any-rank receive, which fails only once every other peer is broken.
//
// A transport feeds it the frames of each peer's stream in order: begin_matched() or
// begin_early() for a validated header, then the payload through direct()/advance()
// (plain copies straight into the destination) or deliver() (copies or reductions from
// the transport's memory, e.g. the shm ring, with no staging copy).
//
// Not thread-safe: owned by one transport and driven by the thread driving it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/deadline.h"
#include "comm/frame.h"
#include "comm/transport.h"

namespace braid::comm {

// The largest payload a frame may announce; anything larger is a corrupt frame.
inline constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 40;

struct Request {
  bool is_send = false;
  bool complete = false;
  int peer = 0;  // kAnyRank while an any-rank receive is unmatched, then its sender
  Tag tag;
  CallSignature sig;
  uint8_t* data = nullptr;  // send: the source (never written); recv: the destination
  uint64_t bytes = 0;
  uint64_t done = 0;  // bytes sent, or received and applied to `data`
  std::optional<Reduction> reduce;
  std::exception_ptr error;  // set with complete: the request failed
  int* source = nullptr;     // recv: where the sender's rank is written when it matches
  uint64_t order = 0;        // recv: post order, which decides between candidates
  uint32_t serial = 0;       // 0: the slot is free
};

class ReceiveMatcher {
 public:
  ReceiveMatcher(int rank, int size, uint64_t max_buffered_bytes);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // --- requests. Ids stay valid until release(); slot numbers index slot().
  // A send to this rank itself is delivered (or buffered) at once and returned complete.
  RequestId add_send(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                     size_t bytes);
  // Matches the earliest buffered message first (from any peer for kAnyRank: the one that
  // arrived first); otherwise the receive is posted. Writes the sender to *source (when
  // not null) as it matches.
  RequestId add_recv(int peer, const Tag& tag, const CallSignature& sig, void* data, size_t bytes,
                     std::optional<Reduction> reduce, int* source = nullptr);
  uint32_t slot_of(RequestId id) const;  // braid::Error for an unknown or released id
  bool valid(RequestId id) const;
  Request& slot(uint32_t s) { return slots_[s]; }
  Request& get(RequestId id) { return slots_[slot_of(id)]; }
  // Frees the request. A receive still posted is withdrawn; one a stream is filling has
  // the rest of its message discarded. (A send still queued is the transport's to drop.)
  void release(RequestId id);

  // True when every request is complete and none failed. A failed one, or one still
  // waiting on a broken peer (for an unmatched any-rank receive: with every other peer
  // broken), makes it throw (the caller releases `ids`): the request's own error, or
  // PeerError naming the peer (or every peer), the call and the seconds waited.
  bool finished(std::span<const RequestId> ids, const Deadline& deadline);
  // The first incomplete request of `ids` with its progress, for stall warnings
  // ("a receive of 8 bytes from rank 1 for allreduce #7 ... (0 of 8 bytes done)").
  std::string pending(std::span<const RequestId> ids);
  // Throws TimeoutError naming the first incomplete request of `ids` (the caller releases).
  [[noreturn]] void throw_timeout(std::span<const RequestId> ids, const Deadline& deadline,
                                  const std::string& hint);

  // --- one peer's inbound stream.
  // True when a receive that a message from `peer` could match is posted: one from that
  // peer, or one from any rank (then every live peer's stream must keep moving).
  bool has_posted(int peer) const { return !peers_[peer].posted.empty() || !any_posted_.empty(); }
  bool in_message(int peer) const { return peers_[peer].in_message; }
  // Bytes of the current message's payload not yet delivered.
  uint64_t remaining(int peer) const;
  // A validated data header from `peer`: starts its message if a posted receive matches
  // (or it belongs to a receive that failed on it); false, changing nothing, otherwise.
  bool begin_matched(int peer, const FrameHeader& h);
  // Starts the message as an early one, to be buffered. PeerError when the peer's early
  // messages would exceed the bound.
  void begin_early(int peer, const FrameHeader& h);
  // Where the next payload bytes can be written directly (a plain copy), at most `max`;
  // empty when the sink reduces (use deliver()).
  std::span<uint8_t> direct(int peer, size_t max);
  void advance(int peer, size_t n);  // n bytes were written into direct()
  // Copies or reduces n payload bytes (any n; partial elements are carried over).
  void deliver(int peer, const uint8_t* src, size_t n);

  // The peer is gone or broken: nothing more will arrive from it, and every request
  // waiting on it fails with PeerError("<reason> ..."). The first reason stays.
  void fail_peer(int peer, const std::string& reason);
  bool peer_failed(int peer) const { return !peers_[peer].failure.empty(); }
  const std::string& peer_failure(int peer) const { return peers_[peer].failure; }
  // A new process took `peer`'s place (Transport::accept_rejoin): what is left of the old
  // one's stream goes (its early messages, a message under way), every request still tied
  // to it fails with PeerError saying `why` (receives posted from it, and the sends in
  // `queued_sends` that the transport had not finished), and the peer counts as live again.
  // Any-rank receives stay posted: the newcomer may answer them.
  void reset_peer(int peer, std::span<const uint32_t> queued_sends, const std::string& why);

  // Describes a request for errors: "a receive of 8 bytes from rank 1 for allreduce #7
  // (f32 sum, ...) step 0", or "... from any rank ..." while an any-rank one is unmatched.
  std::string describe(const Request& r) const;

 private:
  // Memory for one early message; recycled so a steady state allocates nothing.
  struct Block {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity = 0;
  };
  struct Early {
    Tag tag;
    CallSignature sig;
    uint64_t bytes = 0;
    uint64_t received = 0;
    uint64_t arrival = 0;  // order among every peer's early messages
    Block block;
  };
  enum class Sink : uint8_t { request, early, discard };
  struct Peer {
    std::vector<uint32_t> posted;  // receive slots in post order, unmatched
    std::deque<Early> early;       // stream order; only the back may be incomplete
    uint64_t early_bytes = 0;
    bool in_message = false;
    Sink sink = Sink::discard;
    uint32_t target = 0;  // the receive slot when sink == request
    uint64_t bytes = 0;   // the current message's payload size
    uint64_t offset = 0;  // payload bytes consumed from the stream
    uint8_t carry[8] = {};
    uint32_t carry_len = 0;  // bytes of a partial element held back from a reduction
    std::string failure;
  };

  uint32_t new_slot();
  RequestId id_of(uint32_t s) const { return (uint64_t{slots_[s].serial} << 32) | s; }
  void complete(Request& r);
  void fail(Request& r, std::exception_ptr e);
  // Receive `r` takes a message from `peer`: its sender is known.
  void bind(Request& r, int peer);
  // Receive slot `s` takes early message `it` of `peer` (or fails on it).
  void take_early(uint32_t s, int peer, std::deque<Early>::iterator it);
  // CollectiveMismatch for receive `r` meeting a message of (tag, sig, bytes) from `from`.
  std::exception_ptr mismatch(const Request& r, int from, const Tag& tag, const CallSignature& sig,
                              uint64_t bytes, const char* what) const;
  // "rank 1 closed ...; rank 2 died" for an any-rank receive that no peer can satisfy.
  std::string failures() const;
  bool signatures_conflict(const Request& r, const Tag& tag, const CallSignature& sig) const;
  // Applies n bytes at stream offset `at` of the current message to receive `r`.
  void apply(Peer& p, Request& r, const uint8_t* src, size_t n);
  void apply_early(Request& r, Early& e);
  void end_message(Peer& p);
  Block take_block(uint64_t bytes);
  void give_block(Block b);
  void grow(Early& e, uint64_t need);

  int rank_;
  int size_;
  uint64_t max_buffered_;
  std::vector<Request> slots_;
  std::vector<uint32_t> free_slots_;
  uint32_t next_serial_ = 1;
  std::vector<Peer> peers_;
  std::vector<uint32_t> any_posted_;  // any-rank receive slots in post order, unmatched
  uint64_t posts_ = 0;                // receives posted so far (Request::order)
  uint64_t arrivals_ = 0;             // early messages begun so far (Early::arrival)
  int failed_peers_ = 0;              // peers other than this rank that are broken
  std::vector<Block> spare_blocks_;
  uint64_t spare_bytes_ = 0;
};

}  // namespace braid::comm
