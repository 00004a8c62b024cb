// Internal to comm/: what a group keeps once it has shared buffers (comm/shared_buffer.h).
//
// A SharedRegion is one allocate_shared() buffer: this rank's segment plus its mappings
// of every peer's, so base[r] is rank r's copy of the buffer in this process. A
// SharedWindow is the group's: its live regions by id, and one ControlBlock per rank in
// shared memory through which the ranks of an allreduce on shared buffers agree on the
// call and meet at its start and end, with no message through the transport.
//
// Call protocol (allreduce_shared.cpp): once a group has a window, every allreduce on it
// starts by publishing a Descriptor of the call and waiting for every peer's. Only when
// all ranks name the same range of the same region does the call take the shared path;
// otherwise every rank, having read the same descriptors, takes the usual algorithm. The
// descriptors also catch ranks that disagree about the call.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/deadline.h"
#include "comm/message.h"
#include "comm/shm_ring.h"
#include "core/memory.h"

namespace braid::comm {

class Group;
class SharedWindow;

struct SharedRegion {
  uint64_t id = 0;  // the same on every rank; 0 for private memory
  size_t bytes = 0;
  shm::Mapping own;
  std::vector<shm::Mapping> peers;  // [group rank]; empty at this rank's index
  std::vector<uint8_t*> base;       // [group rank] -> that rank's buffer, mapped here
  Buffer fallback;                  // private memory when not shared
  std::weak_ptr<SharedWindow> window;

  SharedRegion() = default;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();
  uint8_t* data() const { return id ? own.data() : static_cast<uint8_t*>(fallback.data()); }
};

// What a rank says of its allreduce before any data moves.
struct Descriptor {
  uint64_t region = 0;  // 0: not in a shared buffer of this group
  uint64_t offset = 0;  // bytes from the region's start
  uint64_t count = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t forced = 0;  // the caller named an algorithm
};

// One rank's, in its control segment; peers read it. Each counter on its own line.
struct ControlBlock {
  alignas(64) std::atomic<uint64_t> entered{0};   // number of the last call published
  Descriptor descriptor;                          // of that call, written before `entered`
  alignas(64) std::atomic<uint64_t> finished{0};  // number of the last call it finished
  // Every collective this rank entered on the group, shared path or not (a seqlock:
  // `version` is odd while the rank writes, 2 x seq once the call is published), so a rank
  // waiting here for a peer sees at once that the peer is in another call (an alltoall
  // meeting an allreduce) instead of waiting out the deadline.
  alignas(64) std::atomic<uint64_t> version{0};
  std::atomic<uint64_t> signature{
      0};  // call | dtype << 8 | op << 16 | algorithm << 24 | root << 32
  std::atomic<uint64_t> count{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

class SharedWindow {
 public:
  SharedWindow(shm::Mapping own_control, std::vector<shm::Mapping> peer_control, int rank);

  ControlBlock& control(int rank) const { return *control_[static_cast<size_t>(rank)]; }
  // Publishes the collective this rank (`rank`) enters: sequence number and signature.
  void publish_call(int rank, uint32_t seq, const CallSignature& sig);
  // The collective `rank` last published, if it was not being rewritten while read.
  std::optional<std::pair<uint32_t, CallSignature>> published_call(int rank) const;
  // The next allreduce's number; every member counts the same calls.
  uint64_t next_call() { return ++calls_; }
  // How many allreduces took the in-place path (for tests and benchmarks).
  uint64_t in_place_calls() const { return in_place_; }
  void count_in_place() { ++in_place_; }

  uint64_t add(SharedRegion* region) {
    region->id = next_region_++;
    regions_[region->id] = region;
    return region->id;
  }
  void remove(uint64_t id) { regions_.erase(id); }
  // The live region holding [p, p + bytes), else nullptr.
  const SharedRegion* find(const void* p, size_t bytes) const;

 private:
  shm::Mapping own_control_;
  std::vector<shm::Mapping> peer_control_;
  std::vector<ControlBlock*> control_;  // [group rank]
  std::map<uint64_t, SharedRegion*> regions_;
  uint64_t next_region_ = 1;
  uint64_t calls_ = 0;
  uint64_t in_place_ = 0;
};

// Returns once `ready()` holds: spins, then yields the core, then naps (briefly, since
// shared-path calls are large). Polls group rank `peer`'s liveness every 0.1 s and throws
// PeerError when it is gone, or TimeoutError at the deadline, naming the peer and what
// `waiting_for()` says.
void wait_for_peer(Group& g, int peer, const Deadline& deadline, const std::function<bool()>& ready,
                   const std::function<std::string()>& waiting_for);

}  // namespace braid::comm
