#include "comm/mpi/mpi_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/mpi/mpi_error.h"
#include "core/error.h"

namespace braid::comm {

namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::bf16:  // 16-bit words; reductions use the user-defined ops below
    case DType::f16:
      return MPI_UINT16_T;
  }
  BRAID_THROW(Error, "no MPI type for dtype ", static_cast<int>(dtype));
}

// MPI calls user ops as inout[i] = in[i] op inout[i]; every braid op is commutative.
template <DType D, ReduceOp O>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(D, O, inout, in, static_cast<size_t>(*len));
}

constexpr std::array<ReduceOp, 4> kHalfOps = {ReduceOp::sum, ReduceOp::min, ReduceOp::max,
                                              ReduceOp::prod};
template <DType D>
constexpr std::array<MPI_User_function*, 4> kHalfFunctions = {
    &half_op<D, ReduceOp::sum>, &half_op<D, ReduceOp::min>, &half_op<D, ReduceOp::max>,
    &half_op<D, ReduceOp::prod>};

size_t half_op_index(ReduceOp op) {
  if (op == ReduceOp::avg) return 0;  // a sum, divided afterwards
  return static_cast<size_t>(std::find(kHalfOps.begin(), kHalfOps.end(), op) - kHalfOps.begin());
}

// One piece of a per-rank block layout: `n` elements of `base` at a stride of a whole
// block (`count` elements), so piece k of every rank's block moves in one call. When the
// piece is the whole block the base type does it directly.
class Blocks {
 public:
  Blocks(MPI_Datatype base, size_t n, size_t count, size_t esize, int rank) {
    if (n == count) {
      type_ = base;
      count_ = static_cast<int>(n);
      return;
    }
    MPI_Datatype contiguous = MPI_DATATYPE_NULL;
    mpi_check(MPI_Type_contiguous(static_cast<int>(n), base, &contiguous), "MPI_Type_contiguous",
              rank);
    const int rc =
        MPI_Type_create_resized(contiguous, 0, static_cast<MPI_Aint>(count * esize), &type_);
    MPI_Type_free(&contiguous);
    mpi_check(rc, "MPI_Type_create_resized", rank);
    mpi_check(MPI_Type_commit(&type_), "MPI_Type_commit", rank);
    owned_ = true;
    count_ = 1;
  }
  ~Blocks() {
    if (owned_) MPI_Type_free(&type_);
  }
  Blocks(const Blocks&) = delete;
  Blocks& operator=(const Blocks&) = delete;
  MPI_Datatype type() const { return type_; }
  int count() const { return count_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  int count_ = 0;
  bool owned_ = false;
};

uint8_t* at(void* p, size_t elements, size_t esize) {
  return static_cast<uint8_t*>(p) + elements * esize;
}
const uint8_t* at(const void* p, size_t elements, size_t esize) {
  return static_cast<const uint8_t*>(p) + elements * esize;
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm, MpiBackendOptions options)
    : max_piece_(options.max_piece_elements) {
  BRAID_CHECK(max_piece_ >= 1 && max_piece_ <= static_cast<size_t>(INT_MAX),
              "MpiBackendOptions.max_piece_elements must be in [1, INT_MAX], got ", max_piece_);
  int initialized = 0;
  MPI_Initialized(&initialized);
  BRAID_CHECK(initialized, "MpiBackend needs MPI initialised first (see mpi_world())");
  mpi_check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup", -1);
  mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", -1);
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  for (auto& ops : half_ops_) ops.fill(MPI_OP_NULL);
  for (size_t i = 0; i < kHalfOps.size(); ++i) {
    check(MPI_Op_create(kHalfFunctions<DType::bf16>[i], /*commute=*/1, &half_ops_[0][i]),
          "MPI_Op_create (bf16)");
    check(MPI_Op_create(kHalfFunctions<DType::f16>[i], /*commute=*/1, &half_ops_[1][i]),
          "MPI_Op_create (f16)");
  }
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& ops : half_ops_)
    for (MPI_Op& op : ops)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiBackend::check(int rc, const char* what) const { mpi_check(rc, what, rank_); }

void MpiBackend::check_root(int root, const char* call) const {
  BRAID_CHECK(root >= 0 && root < size_, call, ": root ", root, " is not a rank of this group of ",
              size_);
}

MPI_Op MpiBackend::op_for(DType dtype, ReduceOp op) const {
  if (dtype == DType::bf16) return half_ops_[0][half_op_index(op)];
  if (dtype == DType::f16) return half_ops_[1][half_op_index(op)];
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::prod:
      return MPI_PROD;
  }
  BRAID_THROW(Error, "no MPI op for reduce op ", static_cast<int>(op));
}

void MpiBackend::allreduce(void* data, size_t count, DType dtype, ReduceOp op) {
  const size_t es = dtype_size(dtype);
  for (size_t off = 0; off < count; off += max_piece_) {
    const int n = static_cast<int>(std::min(max_piece_, count - off));
    check(MPI_Allreduce(MPI_IN_PLACE, at(data, off, es), n, mpi_type(dtype), op_for(dtype, op),
                        comm_),
          "MPI_Allreduce");
  }
  if (op == ReduceOp::avg) divide_by(dtype, data, count, size_);
}

void MpiBackend::reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                ReduceOp op) {
  const size_t es = dtype_size(dtype);
  if (count <= max_piece_) {
    if (count > 0)
      check(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), mpi_type(dtype),
                                     op_for(dtype, op), comm_),
            "MPI_Reduce_scatter_block");
  } else {
    // A reduction needs contiguous blocks, so each piece of every rank's block is packed.
    std::vector<uint8_t> packed(static_cast<size_t>(size_) * max_piece_ * es);
    for (size_t off = 0; off < count; off += max_piece_) {
      const size_t n = std::min(max_piece_, count - off);
      for (size_t r = 0; r < static_cast<size_t>(size_); ++r)
        std::memcpy(packed.data() + r * n * es, at(send, r * count + off, es), n * es);
      check(MPI_Reduce_scatter_block(packed.data(), at(recv, off, es), static_cast<int>(n),
                                     mpi_type(dtype), op_for(dtype, op), comm_),
            "MPI_Reduce_scatter_block");
    }
  }
  if (op == ReduceOp::avg) divide_by(dtype, recv, count, size_);
}

void MpiBackend::allgather(const void* send, void* recv, size_t count, DType dtype) {
  const size_t es = dtype_size(dtype);
  const bool in_place = send == at(recv, static_cast<size_t>(rank_) * count, es);
  for (size_t off = 0; off < count; off += max_piece_) {
    const size_t n = std::min(max_piece_, count - off);
    const Blocks blocks(mpi_type(dtype), n, count, es, rank_);
    check(MPI_Allgather(in_place ? MPI_IN_PLACE : at(send, off, es), static_cast<int>(n),
                        mpi_type(dtype), at(recv, off, es), blocks.count(), blocks.type(), comm_),
          "MPI_Allgather");
  }
}

void MpiBackend::broadcast(void* data, size_t count, DType dtype, int root) {
  check_root(root, "broadcast");
  const size_t es = dtype_size(dtype);
  for (size_t off = 0; off < count; off += max_piece_) {
    const int n = static_cast<int>(std::min(max_piece_, count - off));
    check(MPI_Bcast(at(data, off, es), n, mpi_type(dtype), root, comm_), "MPI_Bcast");
  }
}

void MpiBackend::reduce(void* data, size_t count, DType dtype, ReduceOp op, int root) {
  check_root(root, "reduce");
  const size_t es = dtype_size(dtype);
  for (size_t off = 0; off < count; off += max_piece_) {
    const int n = static_cast<int>(std::min(max_piece_, count - off));
    void* piece = at(data, off, es);
    check(MPI_Reduce(rank_ == root ? MPI_IN_PLACE : piece, rank_ == root ? piece : nullptr, n,
                     mpi_type(dtype), op_for(dtype, op), root, comm_),
          "MPI_Reduce");
  }
  if (op == ReduceOp::avg && rank_ == root) divide_by(dtype, data, count, size_);
}

void MpiBackend::gather(const void* send, void* recv, size_t count, DType dtype, int root) {
  check_root(root, "gather");
  const size_t es = dtype_size(dtype);
  const bool in_place = rank_ == root && send == at(recv, static_cast<size_t>(root) * count, es);
  for (size_t off = 0; off < count; off += max_piece_) {
    const size_t n = std::min(max_piece_, count - off);
    const Blocks blocks(mpi_type(dtype), n, count, es, rank_);
    check(MPI_Gather(in_place ? MPI_IN_PLACE : at(send, off, es), static_cast<int>(n),
                     mpi_type(dtype), rank_ == root ? at(recv, off, es) : nullptr, blocks.count(),
                     blocks.type(), root, comm_),
          "MPI_Gather");
  }
}

void MpiBackend::scatter(const void* send, void* recv, size_t count, DType dtype, int root) {
  check_root(root, "scatter");
  const size_t es = dtype_size(dtype);
  const bool in_place = rank_ == root && recv == at(send, static_cast<size_t>(root) * count, es);
  for (size_t off = 0; off < count; off += max_piece_) {
    const size_t n = std::min(max_piece_, count - off);
    const Blocks blocks(mpi_type(dtype), n, count, es, rank_);
    check(MPI_Scatter(rank_ == root ? at(send, off, es) : nullptr, blocks.count(), blocks.type(),
                      in_place ? MPI_IN_PLACE : at(recv, off, es), static_cast<int>(n),
                      mpi_type(dtype), root, comm_),
          "MPI_Scatter");
  }
}

void MpiBackend::alltoall(const void* send, void* recv, size_t count, DType dtype) {
  const size_t es = dtype_size(dtype);
  const bool in_place = send == recv;
  for (size_t off = 0; off < count; off += max_piece_) {
    const size_t n = std::min(max_piece_, count - off);
    const Blocks blocks(mpi_type(dtype), n, count, es, rank_);
    if (in_place)
      check(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, at(recv, off, es), blocks.count(),
                         blocks.type(), comm_),
            "MPI_Alltoall");
    else
      check(MPI_Alltoall(at(send, off, es), blocks.count(), blocks.type(), at(recv, off, es),
                         blocks.count(), blocks.type(), comm_),
            "MPI_Alltoall");
  }
}

void MpiBackend::barrier() { check(MPI_Barrier(comm_), "MPI_Barrier"); }

}  // namespace braid::comm
