// A Transport over an MPI communicator, so braid's own collective algorithms run on a job
// that mpirun (or srun) started, over whatever network the cluster's MPI drives. It keeps
// every promise of comm/transport.h; MPI provides the bytes, braid the tag matching.
//
// How it works. Each message is two MPI messages on a private duplicate of the
// communicator: its 48-byte FrameHeader (tag, signature, length) on MPI tag 0, then its
// payload (none for zero bytes; pieces of at most 1 GiB) on a payload tag taken from a
// per-(sender, receiver) message counter. MPI keeps messages from one sender on one tag in
// order, so both sides count headers the same way and agree on every payload's tag
// without sending it. The receiver pulls headers as they arrive and matches each to the
// earliest posted receive from that peer with the whole braid Tag; a header that comes
// early is kept (bounded by max_buffered_bytes) while its payload stays in MPI, which for
// a large message means it has not even moved yet. Once matched, the payload is received
// straight into the caller's buffer, or into a reused staging buffer that is then
// combined with braid::reduce_into for a receive with a Reduction.
//
// Receives from any rank (kAnyRank) are braid's, not MPI_ANY_SOURCE's: headers are already
// probed from every source in the order MPI delivers them, so an any-rank receive takes
// the first header with its tag to arrive (among early ones, the first that arrived), a
// header goes to the first posted of its sender's receives and the any-rank ones, and the
// payload is then received from the sender it came from on its own payload tag.
//
// A peer that dies is for MPI to report: mpirun ends the whole job by default, so no wait
// outlives it (an any-rank receive included); a peer that is stuck is a TimeoutError like
// on every transport.
//
// Thread safety: one thread drives it at a time (MPI needs at least FUNNELED, SERIALIZED
// if that thread is not the main one). Lifetime: MPI must be initialised before it is
// built and not finalised before it is destroyed (destroying it after MPI_Finalize is
// harmless: it then frees nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "comm/frame.h"
#include "comm/mpi/mpi_c.h"
#include "comm/transport.h"

namespace braid::comm {

struct MpiTransportOptions {
  // Bytes a peer may send ahead of the matching receive before the job fails.
  size_t max_buffered_bytes = size_t{256} << 20;
};

class MpiTransport final : public Transport {
 public:
  // Duplicates `comm` (the caller keeps ownership of `comm`); ranks are `comm`'s ranks.
  explicit MpiTransport(MPI_Comm comm, MpiTransportOptions options = {});
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }
  // A second duplicate with the same ranks on which the transport sends nothing: for
  // MPI's own collectives and communicator construction beside it (use_mpi_backend), whose
  // internal messages must never meet the transport's header probe.
  MPI_Comm spare_comm() const { return spare_comm_; }

  RequestId isend(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                  size_t bytes) override;
  RequestId irecv(int peer, const Tag& tag, const CallSignature& sig, void* data, size_t bytes,
                  std::optional<Reduction> reduce = std::nullopt, int* source = nullptr) override;
  void wait(std::span<const RequestId> requests, Deadline deadline) override;
  bool test(RequestId request) override;
  using Transport::wait;

 private:
  struct Request;
  class Steps;  // this transport's part of the wait/test loop (comm/wait_loop.h)
  // A header that arrived before its receive was posted; its payload waits in MPI.
  struct Early {
    FrameHeader header;
    int payload_tag = 0;
    uint64_t arrival = 0;  // order among every peer's early headers
  };
  struct Staging {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity = 0;
  };

  void check(int rc, const char* what) const;
  void progress();
  void on_header(int peer, const FrameHeader& header);
  void match(Request& r, int from, const FrameHeader& header, int payload_tag);
  void check_same_call(const Request& r, int from, const FrameHeader& header) const;
  void post_payload(void* data, size_t bytes, int peer, int payload_tag, bool send,
                    std::vector<MPI_Request>& out);
  bool try_complete(Request& r);
  void abandon(RequestId id);
  int next_payload_tag(std::vector<uint64_t>& counters, int peer) const;
  Request& find(RequestId id, const char* where);

  MPI_Comm comm_ = MPI_COMM_NULL;        // the transport's messages only
  MPI_Comm spare_comm_ = MPI_COMM_NULL;  // see spare_comm()
  int rank_ = 0;
  int size_ = 0;
  int tag_ub_ = 32767;  // payload tags are 1..tag_ub_, header tag is 0
  MpiTransportOptions options_;
  RequestId next_id_ = 1;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<std::deque<RequestId>> posted_;        // per peer: receives waiting for a header
  std::deque<RequestId> any_posted_;                 // any-rank receives waiting for a header
  uint64_t posts_ = 0;                               // receives posted (Request::order)
  uint64_t arrivals_ = 0;                            // early headers kept (Early::arrival)
  std::vector<std::deque<Early>> early_;             // per peer: headers waiting for a receive
  std::vector<size_t> early_bytes_;                  // per peer: payload bytes behind early_
  std::vector<uint64_t> sent_;                       // per peer: messages sent (payload tags)
  std::vector<uint64_t> received_;                   // per peer: headers received (payload tags)
  std::vector<Staging> staging_;                     // free staging buffers for reductions
  std::vector<std::unique_ptr<Request>> abandoned_;  // sends MPI may still read from
  std::vector<MPI_Status> statuses_;                 // scratch for MPI_Testall
};

}  // namespace braid::comm
