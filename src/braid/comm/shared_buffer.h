// Buffers that every rank of a group on one host maps, so collectives work in peers'
// memory directly. An allreduce on such a buffer has each rank reduce its share of all the
// buffers and write the result into every one of them: one read of the inputs and one
// write per copy, where the transport's rings cost copies into and out of a ring at every
// hop. It is the analogue of NCCL's registered user buffers or MPI_Alloc_mem. Where the
// group's transport cannot share memory (tcp, an MPI backend) or /dev/shm has no room,
// allocate_shared() gives private memory and collectives take their usual path, so code
// written against it runs anywhere.
//
// Use: allocate the buffer a loop reduces over and over (a flat gradient buffer) once,
// with the group it is reduced on; pass it, or any range of it, to allreduce(). The fast
// path is taken when every rank passes the same range of the same buffer, with
// Algorithm::automatic; otherwise the call runs as usual. A buffer belongs to the group it
// was allocated with (a sub-group's allreduce on it takes the usual path).
//
// Thread safety: allocate and destroy on the thread that drives the group. Lifetime: the
// memory stays valid while the SharedBuffer lives, even if the group or peers go away.
#pragma once

#include <cstddef>
#include <memory>

namespace braid::comm {

class Group;
struct SharedRegion;

class SharedBuffer {
 public:
  SharedBuffer() = default;

  void* data() const;
  size_t bytes() const;
  // Whether peers map it (false: private memory, as on tcp).
  bool shared() const;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }

 private:
  friend SharedBuffer allocate_shared(Group& g, size_t bytes);
  explicit SharedBuffer(std::shared_ptr<SharedRegion> region) : region_(std::move(region)) {}
  std::shared_ptr<SharedRegion> region_;
};

// Collective over `g`: every member calls it with the same `bytes`. The memory is zeroed,
// 64-byte aligned and its pages are allocated now. Falls back to private memory on every
// rank (with a warning on stderr from the rank that could not) when a rank cannot create
// or map its segment.
SharedBuffer allocate_shared(Group& g, size_t bytes);

}  // namespace braid::comm
