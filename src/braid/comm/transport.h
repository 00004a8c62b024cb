// A Transport moves tagged messages between the ranks of one job: in-process (ranks as
// threads, for unit tests), shared memory (ranks on one host) or TCP (across hosts).
// Collective algorithms are written against this interface only.
//
// Semantics every implementation keeps (tests/comm/transport_contract_test.cpp):
// - A receive matches the earliest unmatched message from its peer with an equal Tag.
//   Messages that arrive before their receive is posted are buffered (up to a bound; past
//   it the transport fails the job with an error naming the peer rather than grow).
// - Sizes must agree: a message whose tag matches but whose length differs from the
//   receive's is a CollectiveMismatch naming both calls, as is a message with the
//   receive's (channel, seq) but another CallSignature.
// - A receive with a Reduction combines incoming bytes into its buffer
//   (dst = op(dst, incoming)) as they arrive, without a staging copy where the transport
//   can avoid one.
// - Receive from any rank: a receive posted with kAnyRank as its peer matches the earliest
//   arriving unmatched message with an equal Tag from any rank, the caller's own included
//   (MPI_ANY_SOURCE). "Earliest" is the order in which this rank takes messages in (a
//   stream transport reads their headers, inproc posts them): among messages already
//   buffered when it is posted, the one that arrived first. Everything else is as for a
//   named receive (sizes agree, reductions, zero bytes). A message that both a named
//   receive (from its sender) and an any-rank receive could take goes to whichever of the
//   two was posted first. A peer that dies or closes does not fail a posted any-rank
//   receive (another may still send); it fails with PeerError once every other rank is
//   gone, or with TimeoutError at its deadline. Once matched it depends on its sender
//   alone, like a named receive.
// - Sends to and receives from the caller's own rank are allowed and are plain copies.
// - Zero-byte messages are real messages: they match and complete.
// - wait() drives all progress; nothing moves between calls unless an implementation
//   says so. A peer whose connection closes or dies fails every wait involving it with
//   PeerError naming the peer; a deadline that passes throws TimeoutError naming the
//   peer, the call and the seconds waited.
//
// Thread safety: one thread drives a Transport at a time (the rank's compute or
// communication thread). Lifetime: a Transport outlives every Group built on it; buffers
// passed to isend/irecv must stay valid until their request completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "comm/deadline.h"
#include "comm/message.h"
#include "core/error.h"

namespace braid::comm {

// A peer died, closed its connection or sent something that is not braid's protocol.
class PeerError : public IoError {
 public:
  using IoError::IoError;
};

// Ranks disagree about the call they are in (signature, size or order).
class CollectiveMismatch : public Error {
 public:
  using Error::Error;
};

using RequestId = uint64_t;

class Store;

// The peer of a receive that takes a message from whichever rank sends first.
inline constexpr int kAnyRank = -1;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view name() const = 0;  // "inproc", "shm", "tcp"

  // Starts sending `bytes` at `data` to global rank `peer`. `data` must stay valid and
  // unchanged until the request completes.
  virtual RequestId isend(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                          size_t bytes) = 0;
  // Starts receiving exactly `bytes` from `peer` (a global rank, or kAnyRank) into
  // `data`, combining with `reduce` when given (bytes must then be a multiple of the
  // dtype's size). When `source` is not null the transport writes the sender's global rank
  // there: at once for a named receive, when the message matches for an any-rank one. It
  // is written before the request completes and never after, so it is the sender once
  // wait() or test() has reported the request complete (releasing it); like `data` it must
  // stay valid until then. A request that fails leaves it unspecified.
  virtual RequestId irecv(int peer, const Tag& tag, const CallSignature& sig, void* data,
                          size_t bytes, std::optional<Reduction> reduce = std::nullopt,
                          int* source = nullptr) = 0;
  // Drives progress until every request in `requests` has completed, then releases them.
  // On error the requests are released too and the transport may be unusable.
  virtual void wait(std::span<const RequestId> requests, Deadline deadline) = 0;
  // Drives progress without blocking; true (and released) when `request` has completed.
  virtual bool test(RequestId request) = 0;

  // True when every rank can map memory another rank made (all on one host: shm, inproc);
  // then allocate_shared() gives buffers that collectives read in place
  // (comm/shared_buffer.h).
  virtual bool shares_memory() const { return false; }
  // True when, beyond that, every rank can open memory another rank made without a name
  // (a memfd through /proc/<pid>/fd: one pid namespace), so shared memory never has a
  // name in /dev/shm that a killed job could leave behind.
  virtual bool anonymous_shared_memory() const { return false; }
  // Why global rank `peer` can no longer take part, or "" while it can. For waits that
  // watch shared memory instead of going through the transport; cheap enough to poll
  // every 0.1 s.
  virtual std::string peer_gone(int /*peer*/) { return {}; }

  // Restarted processes (a parameter-server job's: TransportOptions::accept_rejoins). Takes
  // a new process in the place of global rank `peer`, whose earlier process is gone: what
  // is left of the old one goes (its unread messages; every request still tied to it fails
  // with PeerError), then this rank connects to the newcomer through `store`, where
  // connect_rejoining_transport() published it (rejoin_store(): one per rank and
  // incarnation). From then on `peer`'s messages are the newcomer's. Returns once
  // connected; IoError when the newcomer cannot be reached or the earlier process still
  // runs, TimeoutError at the deadline, braid::Error where this transport cannot take a
  // newcomer (inproc, MPI, one made without accept_rejoins).
  virtual void accept_rejoin(int peer, Store& /*store*/, Deadline /*deadline*/) {
    BRAID_THROW(Error, "the ", name(), " transport cannot take a restarted process as rank ", peer,
                " (only shm and tcp made with TransportOptions::accept_rejoins can)");
  }

  // Conveniences.
  void wait(RequestId request, Deadline deadline) {
    wait(std::span<const RequestId>(&request, 1), deadline);
  }
  void send(int peer, const Tag& tag, const CallSignature& sig, const void* data, size_t bytes,
            Deadline deadline) {
    wait(isend(peer, tag, sig, data, bytes), deadline);
  }
  void recv(int peer, const Tag& tag, const CallSignature& sig, void* data, size_t bytes,
            Deadline deadline, std::optional<Reduction> reduce = std::nullopt,
            int* source = nullptr) {
    wait(irecv(peer, tag, sig, data, bytes, reduce, source), deadline);
  }
};

}  // namespace braid::comm
