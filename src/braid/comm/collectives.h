// Collectives over a Group. Each is a free function with an options struct; it returns
// when this rank's part is done and its buffers may be reused.
//
// Invariants, for every algorithm: results are bitwise identical on every rank; any group
// size and any count (0, 1, primes, not divisible by the size) work; every call carries a
// sequence number and a signature (call, dtype, op, count, root), and ranks that disagree
// fail with a CollectiveMismatch naming both calls; every wait has the group's deadline.
// Counts are in elements of `dtype`; buffers may be unaligned.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>

#include "comm/algorithm.h"
#include "comm/group.h"
#include "core/dtype.h"
#include "core/reduce.h"

namespace braid::comm {

struct CollectiveOptions {
  Algorithm algorithm = Algorithm::automatic;        // automatic: from the selection table
  std::optional<std::chrono::milliseconds> timeout;  // default: the group's
};

// data = op over ranks of data; in place.
void allreduce(Group& g, void* data, size_t count, DType dtype, ReduceOp op,
               const CollectiveOptions& options = {});
// recv[0, count) = op over ranks of send[rank*count, (rank+1)*count); send holds
// size*count elements. send and recv may not overlap.
void reduce_scatter(Group& g, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                    const CollectiveOptions& options = {});
// recv[r*count, (r+1)*count) = rank r's send; recv holds size*count. send may equal
// recv + rank*count (in place).
void allgather(Group& g, const void* send, void* recv, size_t count, DType dtype,
               const CollectiveOptions& options = {});
// data = root's data on every rank.
void broadcast(Group& g, void* data, size_t count, DType dtype, int root,
               const CollectiveOptions& options = {});
// On root, data = op over ranks; other ranks' data is left unspecified (used as scratch).
void reduce(Group& g, void* data, size_t count, DType dtype, ReduceOp op, int root,
            const CollectiveOptions& options = {});
// On root, recv[r*count, ...) = rank r's send; recv is ignored elsewhere.
void gather(Group& g, const void* send, void* recv, size_t count, DType dtype, int root,
            const CollectiveOptions& options = {});
// recv = root's send[rank*count, (rank+1)*count); send is ignored off root.
void scatter(Group& g, const void* send, void* recv, size_t count, DType dtype, int root,
             const CollectiveOptions& options = {});
// recv[r*count, ...) = rank r's send[rank*count, ...); send and recv hold size*count.
void alltoall(Group& g, const void* send, void* recv, size_t count, DType dtype,
              const CollectiveOptions& options = {});
// Returns when every rank has entered.
void barrier(Group& g, const CollectiveOptions& options = {});

// Collectives by another library (MPI) for a group; see Group::set_backend. Each method
// has the semantics of the free function of the same name.
class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual void allreduce(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                              ReduceOp op) = 0;
  virtual void allgather(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual void broadcast(void* data, size_t count, DType dtype, int root) = 0;
  virtual void reduce(void* data, size_t count, DType dtype, ReduceOp op, int root) = 0;
  virtual void gather(const void* send, void* recv, size_t count, DType dtype, int root) = 0;
  virtual void scatter(const void* send, void* recv, size_t count, DType dtype, int root) = 0;
  virtual void alltoall(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual void barrier() = 0;
};

}  // namespace braid::comm
