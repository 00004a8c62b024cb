// Collectives by the cluster's MPI: a CollectiveBackend whose every call is the matching
// MPI collective (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast,
// MPI_Reduce, MPI_Gather, MPI_Scatter, MPI_Alltoall, MPI_Barrier) on a private duplicate
// of a communicator, so a job started by mpirun uses the MPI's tuned algorithms and
// network. Semantics are those of comm/collectives.h, with two differences: MPI decides
// the combination order (Open MPI's algorithms still leave the same bits on every rank,
// which tests/mpi checks), and a call blocks inside MPI without braid's deadline (a dead
// peer is for mpirun to detect).
//
// dtypes: f32, f64, i32, i64 are MPI's own types and ops; bf16 and f16 travel as 16-bit
// words and are reduced by user-defined MPI_Ops that widen to f32 through
// braid::reduce_into, so they round exactly like braid's own algorithms. avg is a sum
// followed by braid::divide_by(size). Counts above INT_MAX (or options.max_piece_elements)
// go in pieces.
//
// Thread safety: one thread at a time, like a Group. Lifetime: built after MPI_Init and
// destroyed before MPI_Finalize (after it, destruction frees nothing).
#pragma once

#include <array>
#include <climits>
#include <cstddef>

#include "comm/collectives.h"
#include "comm/mpi/mpi_c.h"

namespace braid::comm {

struct MpiBackendOptions {
  // Elements per MPI call; larger counts are split. INT_MAX is MPI's limit; tests lower it
  // to exercise the splitting.
  size_t max_piece_elements = INT_MAX;
};

class MpiBackend final : public CollectiveBackend {
 public:
  // Duplicates `comm` (the caller keeps `comm`); group rank r is `comm`'s rank r.
  explicit MpiBackend(MPI_Comm comm, MpiBackendOptions options = {});
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  void allreduce(void* data, size_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                      ReduceOp op) override;
  void allgather(const void* send, void* recv, size_t count, DType dtype) override;
  void broadcast(void* data, size_t count, DType dtype, int root) override;
  void reduce(void* data, size_t count, DType dtype, ReduceOp op, int root) override;
  void gather(const void* send, void* recv, size_t count, DType dtype, int root) override;
  void scatter(const void* send, void* recv, size_t count, DType dtype, int root) override;
  void alltoall(const void* send, void* recv, size_t count, DType dtype) override;
  void barrier() override;

 private:
  void check(int rc, const char* what) const;
  MPI_Op op_for(DType dtype, ReduceOp op) const;
  void check_root(int root, const char* call) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  size_t max_piece_ = INT_MAX;
  // User-defined ops for the 16-bit floats: [bf16 = 0, f16 = 1][sum, min, max, prod].
  std::array<std::array<MPI_Op, 4>, 2> half_ops_{};
};

}  // namespace braid::comm
