// A Group is an ordered set of ranks that communicate: rank, size, tagged asynchronous
// point-to-point with completion handles, sub-groups, and the call counter that gives
// every collective its sequence number. Collectives (comm/collectives.h) are free
// functions over a Group.
//
// Thread safety: like its Transport, a Group is driven by one thread at a time. Every
// member must call collectives and split() in the same order. Lifetime: holds its
// Transport (shared); sub-groups share their parent's transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "comm/deadline.h"
#include "comm/transport.h"

namespace braid::comm {

class CollectiveBackend;
class SelectionTable;
class SharedWindow;

// Sub-groups from split() inherit their parent's options.
struct GroupOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;  // every wait of every call
  // A wait stuck this long logs whom it waits for, and again as often (0: never).
  std::chrono::milliseconds stall_warning = kDefaultStallWarning;
  // Picks the algorithm of a collective that names none (comm/algorithm.h); null: the
  // built-in table. Every member must use the same table, or their calls disagree.
  std::shared_ptr<const SelectionTable> algorithm_table = nullptr;
};

class Group {
 public:
  // Every rank of `transport`, in transport order.
  static std::shared_ptr<Group> world(std::shared_ptr<Transport> transport,
                                      GroupOptions options = {});

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  // The transport rank of group rank r.
  int global_rank(int r) const { return members_.at(static_cast<size_t>(r)); }
  const std::vector<int>& members() const { return members_; }
  uint32_t channel() const { return channel_; }
  Transport& transport() const { return *transport_; }

  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // The options' table, else the built-in one.
  const SelectionTable& algorithm_table() const;
  void set_timeout(std::chrono::milliseconds t) { options_.timeout = t; }
  Deadline deadline() const { return deadline_after(options_.timeout); }
  // A deadline `timeout` from now that warns of stalls as the group's options say.
  Deadline deadline_after(std::chrono::milliseconds timeout) const {
    return Deadline::after(timeout).warn_stalls_every(options_.stall_warning);
  }

  // The next call number; collectives take one each, so members agree on it.
  uint32_t next_seq() { return ++seq_; }

  // Point-to-point between group ranks, matched by (peer, tag). Requests complete in
  // wait(); waits use the group's timeout.
  RequestId isend(int to, uint32_t tag, const void* data, size_t bytes);
  RequestId irecv(int from, uint32_t tag, void* data, size_t bytes);
  // Receives the earliest arriving message with `tag` from whichever member sends it
  // (comm/transport.h's kAnyRank rules: a rank that dies fails it only once every other
  // rank of the transport has). Its sender's group rank is in *source (unless null) once
  // this group's wait() or test() has reported the request complete; complete it through
  // them, not through the transport, and keep `source` valid until then.
  RequestId irecv_any(uint32_t tag, void* data, size_t bytes, int* source);
  void wait(std::span<const RequestId> requests) { wait(requests, deadline()); }
  void wait(RequestId request) { wait(std::span<const RequestId>(&request, 1)); }
  // The same with a deadline of the caller's (a server that wakes up to check on its
  // peers). A TimeoutError releases the requests, as any failed wait does.
  void wait(std::span<const RequestId> requests, Deadline until);
  bool test(RequestId request);
  void send(int to, uint32_t tag, const void* data, size_t bytes) {
    wait(isend(to, tag, data, bytes));
  }
  void recv(int from, uint32_t tag, void* data, size_t bytes) {
    wait(irecv(from, tag, data, bytes));
  }

  // Collective: members passing the same colour form a new group ordered by (key, rank).
  // A negative colour joins no group and gets nullptr.
  std::shared_ptr<Group> split(int colour, int key);

  // When set, collectives on this group are handed to `backend` (e.g. MPI) instead of
  // braid's algorithms.
  void set_backend(std::shared_ptr<CollectiveBackend> backend) { backend_ = std::move(backend); }
  CollectiveBackend* backend() const { return backend_.get(); }

  // Set by the first allocate_shared() on this group (comm/shared_buffer.h); from then on
  // its allreduces agree through shared memory whether to read peers' buffers in place.
  const std::shared_ptr<SharedWindow>& shared_window() const { return shared_window_; }
  void set_shared_window(std::shared_ptr<SharedWindow> w) { shared_window_ = std::move(w); }

  Group(std::shared_ptr<Transport> transport, std::vector<int> members, uint32_t channel,
        GroupOptions options);

 private:
  // An irecv_any whose *source still holds a transport rank, to become a group rank when
  // the request completes.
  struct AnySource {
    RequestId id;
    int* source;
  };
  // Turns the completed requests' sources into group ranks (and forgets them all).
  void settle_sources(std::span<const RequestId> requests, bool completed);

  std::shared_ptr<Transport> transport_;
  std::vector<int> members_;            // transport ranks, in group order
  std::vector<AnySource> any_sources_;  // irecv_any requests not yet completed
  int rank_ = -1;
  uint32_t channel_ = 0;
  uint32_t seq_ = 0;
  uint32_t splits_ = 0;
  GroupOptions options_;
  std::shared_ptr<CollectiveBackend> backend_;
  std::shared_ptr<SharedWindow> shared_window_;
};

// The axes of a data x tensor x pipeline mesh over `world` (size D*T*P). Ranks are laid
// out tensor-fastest: rank = (p * D + d) * T + t, so a tensor group is T neighbouring
// ranks (one host's shared memory where possible).
struct Mesh {
  int data_size = 1, tensor_size = 1, pipeline_size = 1;
  int data_index = 0, tensor_index = 0, pipeline_index = 0;
  std::shared_ptr<Group> data, tensor, pipeline;
};
Mesh make_mesh(Group& world, int data, int tensor, int pipeline);

}  // namespace braid::comm
