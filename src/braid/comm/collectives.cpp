// The public collectives (comm/collectives.h): each takes the group's next sequence
// number, builds the call's signature, checks its arguments, hands the call to the
// group's backend if it has one, takes the fast paths (a group of one, an empty buffer),
// chooses the algorithm (the options, else the group's selection table) and divides once for
// avg. The algorithms themselves are in one file each (comm/algorithms.h).
#include "comm/collectives.h"

#include <cstring>

#include "comm/algorithms.h"
#include "comm/shared_window.h"
#include "core/error.h"
#include "core/memory.h"

namespace braid::comm {

void* scratch(size_t bytes) {
  thread_local Buffer buffer;
  if (buffer.bytes() < bytes) {
    buffer = Buffer();  // release first so the peak is not old + new
    buffer = Buffer(std::max(bytes, size_t{4096}), MemCategory::workspace);
  }
  return buffer.data();
}

namespace {

void check_dtype(DType dtype, const char* what) {
  BRAID_CHECK(dtype_size(dtype) != 0, what, ": unknown dtype ", static_cast<int>(dtype));
}

void check_root(const Group& g, int root, const char* what) {
  BRAID_CHECK(root >= 0 && root < g.size(), what, ": root ", root,
              " is not a rank of this group of ", g.size());
}

void check_buffer(const void* p, size_t count, const char* what, const char* name) {
  BRAID_CHECK(p != nullptr || count == 0, what, ": ", name, " is null but count is ", count);
}

// The algorithm for this call: the caller's, else the table's. A function of (call,
// group size, bytes) only, so every rank picks the same one.
Algorithm pick(const Group& g, CallKind call, size_t bytes, const CollectiveOptions& o) {
  if (o.algorithm != Algorithm::automatic) {
    BRAID_CHECK(algorithm_supported(call, o.algorithm), call_kind_name(call), " has no algorithm '",
                algorithm_name(o.algorithm), "'; it has ", supported_algorithm_names(call));
    return o.algorithm;
  }
  const Algorithm a = g.algorithm_table().choose(call, g.size(), bytes);
  return algorithm_supported(call, a) ? a : default_algorithm(call);
}

CallContext begin(Group& g, CallKind call, DType dtype, ReduceOp op, int root, size_t count,
                  Algorithm algorithm, const CollectiveOptions& o) {
  uint32_t seq = g.next_seq();
  if (seq == 0) seq = g.next_seq();  // 0 is point-to-point's
  CallSignature sig;
  sig.call = call;
  sig.dtype = dtype;
  sig.op = op;
  sig.algorithm = static_cast<uint8_t>(algorithm);
  sig.root = root;
  sig.count = count;
  // Peers waiting in a shared-memory handshake see which call this rank is in.
  if (const auto& w = g.shared_window()) w->publish_call(g.rank(), seq, sig);
  return CallContext{g, seq, sig, o.timeout.value_or(g.timeout())};
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

}  // namespace

void allreduce(Group& g, void* data, size_t count, DType dtype, ReduceOp op,
               const CollectiveOptions& options) {
  check_dtype(dtype, "allreduce");
  check_buffer(data, count, "allreduce", "data");
  if (auto* b = g.backend()) return b->allreduce(data, count, dtype, op);
  const Algorithm a = pick(g, CallKind::allreduce, count * dtype_size(dtype), options);
  const CallContext ctx = begin(g, CallKind::allreduce, dtype, op, -1, count, a, options);
  if (g.size() == 1 || count == 0) return;
  const bool forced = options.algorithm != Algorithm::automatic;
  if (g.shared_window() && allreduce_shared(ctx, *g.shared_window(), data, count, forced)) {
    if (op == ReduceOp::avg) divide_by(dtype, data, count, g.size());
    return;
  }
  switch (a) {
    case Algorithm::ring:
      allreduce_ring(ctx, data, count);
      break;
    case Algorithm::halving_doubling:
      allreduce_halving_doubling(ctx, data, count);
      break;
    case Algorithm::binary_blocks:
      allreduce_binary_blocks(ctx, data, count);
      break;
    case Algorithm::tree:
      allreduce_tree(ctx, data, count);
      break;
    case Algorithm::direct:
      allreduce_direct(ctx, data, count);
      break;
    case Algorithm::automatic:
      break;
  }
  if (op == ReduceOp::avg) divide_by(dtype, data, count, g.size());
}

void reduce_scatter(Group& g, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                    const CollectiveOptions& options) {
  check_dtype(dtype, "reduce_scatter");
  check_buffer(send, count, "reduce_scatter", "send");
  check_buffer(recv, count, "reduce_scatter", "recv");
  if (auto* b = g.backend()) return b->reduce_scatter(send, recv, count, dtype, op);
  const Algorithm a = pick(g, CallKind::reduce_scatter, count * dtype_size(dtype), options);
  const CallContext ctx = begin(g, CallKind::reduce_scatter, dtype, op, -1, count, a, options);
  if (count == 0) return;
  if (g.size() == 1) return copy_bytes(recv, send, count * dtype_size(dtype));
  if (a == Algorithm::direct)
    reduce_scatter_direct(ctx, send, recv, count);
  else
    reduce_scatter_ring(ctx, send, recv, count);
  if (op == ReduceOp::avg) divide_by(dtype, recv, count, g.size());
}

void allgather(Group& g, const void* send, void* recv, size_t count, DType dtype,
               const CollectiveOptions& options) {
  check_dtype(dtype, "allgather");
  check_buffer(send, count, "allgather", "send");
  check_buffer(recv, count, "allgather", "recv");
  if (auto* b = g.backend()) return b->allgather(send, recv, count, dtype);
  const Algorithm a = pick(g, CallKind::allgather, count * dtype_size(dtype), options);
  const CallContext ctx =
      begin(g, CallKind::allgather, dtype, ReduceOp::sum, -1, count, a, options);
  if (count == 0) return;
  if (g.size() == 1) return copy_bytes(recv, send, count * dtype_size(dtype));
  if (a == Algorithm::direct)
    allgather_direct(ctx, send, recv, count);
  else
    allgather_ring(ctx, send, recv, count);
}

void broadcast(Group& g, void* data, size_t count, DType dtype, int root,
               const CollectiveOptions& options) {
  check_dtype(dtype, "broadcast");
  check_buffer(data, count, "broadcast", "data");
  check_root(g, root, "broadcast");
  if (auto* b = g.backend()) return b->broadcast(data, count, dtype, root);
  const Algorithm a = pick(g, CallKind::broadcast, count * dtype_size(dtype), options);
  const CallContext ctx =
      begin(g, CallKind::broadcast, dtype, ReduceOp::sum, root, count, a, options);
  if (g.size() == 1 || count == 0) return;
  if (a == Algorithm::ring)
    broadcast_scatter_allgather(ctx, data, count, root);
  else
    broadcast_tree(ctx, data, count, root);
}

void reduce(Group& g, void* data, size_t count, DType dtype, ReduceOp op, int root,
            const CollectiveOptions& options) {
  check_dtype(dtype, "reduce");
  check_buffer(data, count, "reduce", "data");
  check_root(g, root, "reduce");
  if (auto* b = g.backend()) return b->reduce(data, count, dtype, op, root);
  const Algorithm a = pick(g, CallKind::reduce, count * dtype_size(dtype), options);
  const CallContext ctx = begin(g, CallKind::reduce, dtype, op, root, count, a, options);
  if (g.size() == 1 || count == 0) return;
  if (a == Algorithm::ring)
    reduce_ring(ctx, data, count, root);
  else
    reduce_tree(ctx, data, count, root);
  if (op == ReduceOp::avg && g.rank() == root) divide_by(dtype, data, count, g.size());
}

void gather(Group& g, const void* send, void* recv, size_t count, DType dtype, int root,
            const CollectiveOptions& options) {
  check_dtype(dtype, "gather");
  check_root(g, root, "gather");
  check_buffer(send, count, "gather", "send");
  if (g.rank() == root) check_buffer(recv, count, "gather", "recv");
  if (auto* b = g.backend()) return b->gather(send, recv, count, dtype, root);
  const Algorithm a = pick(g, CallKind::gather, count * dtype_size(dtype), options);
  const CallContext ctx = begin(g, CallKind::gather, dtype, ReduceOp::sum, root, count, a, options);
  if (count == 0) return;
  if (g.size() == 1) return copy_bytes(recv, send, count * dtype_size(dtype));
  gather_direct(ctx, send, recv, count, root);
}

void scatter(Group& g, const void* send, void* recv, size_t count, DType dtype, int root,
             const CollectiveOptions& options) {
  check_dtype(dtype, "scatter");
  check_root(g, root, "scatter");
  if (g.rank() == root) check_buffer(send, count, "scatter", "send");
  check_buffer(recv, count, "scatter", "recv");
  if (auto* b = g.backend()) return b->scatter(send, recv, count, dtype, root);
  const Algorithm a = pick(g, CallKind::scatter, count * dtype_size(dtype), options);
  const CallContext ctx =
      begin(g, CallKind::scatter, dtype, ReduceOp::sum, root, count, a, options);
  if (count == 0) return;
  if (g.size() == 1) return copy_bytes(recv, send, count * dtype_size(dtype));
  scatter_direct(ctx, send, recv, count, root);
}

void alltoall(Group& g, const void* send, void* recv, size_t count, DType dtype,
              const CollectiveOptions& options) {
  check_dtype(dtype, "alltoall");
  check_buffer(send, count, "alltoall", "send");
  check_buffer(recv, count, "alltoall", "recv");
  if (auto* b = g.backend()) return b->alltoall(send, recv, count, dtype);
  const Algorithm a = pick(g, CallKind::alltoall, count * dtype_size(dtype), options);
  const CallContext ctx = begin(g, CallKind::alltoall, dtype, ReduceOp::sum, -1, count, a, options);
  if (count == 0) return;
  if (g.size() == 1) return copy_bytes(recv, send, count * dtype_size(dtype));
  alltoall_pairwise(ctx, send, recv, count);
}

void barrier(Group& g, const CollectiveOptions& options) {
  if (auto* b = g.backend()) return b->barrier();
  BRAID_CHECK(options.algorithm == Algorithm::automatic,
              "barrier has a single algorithm "
              "(dissemination); pass Algorithm::automatic, not ",
              algorithm_name(options.algorithm));
  const CallContext ctx =
      begin(g, CallKind::barrier, DType::f32, ReduceOp::sum, -1, 0, Algorithm::automatic, options);
  if (g.size() == 1) return;
  barrier_dissemination(ctx);
}

}  // namespace braid::comm
