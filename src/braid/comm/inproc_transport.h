// The in-process Transport: the ranks of a job are threads of one process, sharing a hub
// of per-rank mailboxes. For unit tests of groups, collectives and everything above them.
//
// How it moves data: isend and irecv match at once under the hub's lock (so, unlike the
// other transports, matching happens between calls); a matched pair is copied, or
// reduced, straight from the sender's buffer into the receiver's by whichever of the two
// ranks is first in wait() or test(). A receive from any rank (kAnyRank) takes, when
// posted, the unmatched message with its tag that was sent first (the hub numbers sends
// as they are made); a send goes to the first posted of its destination's receives from
// it and from any rank. A send whose receive is not posted within a short
// grace period while its sender waits (at once for a send to oneself) is copied into the
// hub, bounded by max_buffered_bytes per ordered pair of ranks, and completes. Everything
// else is the contract of comm/transport.h.
//
// Failure: close() (or destroying the transport) marks the rank dead, as a crashed
// process would be; peers' waits involving it throw PeerError naming it and, after its
// own failure, the reason (an unmatched any-rank receive fails only once every other
// rank is dead). A wait that throws closes its own rank too, so errors spread
// to the ranks waiting on it instead of leaving them to time out. A CollectiveMismatch is
// reported to both ranks of the pair that disagree, at their next wait on anything.
//
// Thread safety: as Transport; close() may also be called from another thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/transport.h"

namespace braid::comm {

class InprocHub;

class InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocHub> hub, int rank);
  ~InprocTransport() override;
  InprocTransport(const InprocTransport&) = delete;
  InprocTransport& operator=(const InprocTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override;
  std::string_view name() const override { return "inproc"; }

  RequestId isend(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                  size_t bytes) override;
  RequestId irecv(int peer, const Tag& tag, const CallSignature& sig, void* data, size_t bytes,
                  std::optional<Reduction> reduce = std::nullopt, int* source = nullptr) override;
  using Transport::wait;
  void wait(std::span<const RequestId> requests, Deadline deadline) override;
  bool test(RequestId request) override;
  bool shares_memory() const override { return true; }
  bool anonymous_shared_memory() const override { return true; }
  std::string peer_gone(int peer) override;

  // Makes this rank dead, as if its process had crashed: peers' waits involving it throw
  // PeerError naming it and `reason`. Idempotent. Returns once no peer is still copying
  // from this rank's buffers.
  void close(const std::string& reason = "its transport was closed");

  struct Request;

 private:
  class Steps;  // this transport's part of the wait/test loop (comm/wait_loop.h)

  std::shared_ptr<InprocHub> hub_;
  int rank_;
  RequestId next_id_ = 1;
  std::unordered_map<RequestId, std::shared_ptr<Request>> requests_;
};

// `size` connected transports, one per rank; hand transport r to the thread of rank r.
std::vector<std::shared_ptr<Transport>> make_inproc_transports(
    int size, size_t max_buffered_bytes = size_t{256} << 20);

}  // namespace braid::comm
