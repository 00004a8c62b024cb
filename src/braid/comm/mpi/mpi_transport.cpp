#include "comm/mpi/mpi_transport.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "comm/blame.h"
#include "comm/mpi/mpi_error.h"
#include "comm/wait_loop.h"
#include "core/error.h"

namespace braid::comm {

namespace {

constexpr int kHeaderTag = 0;
// Payloads travel in pieces so every MPI count fits an int.
constexpr size_t kPieceBytes = size_t{1} << 30;
// Staging buffers kept for reuse; more only matters with many reducing receives in flight.
constexpr size_t kMaxPooledStaging = 8;

size_t piece_count(size_t bytes) { return (bytes + kPieceBytes - 1) / kPieceBytes; }

std::string describe(const Tag& tag, const CallSignature& sig) {
  return detail::concat(describe_call(sig, tag.seq), " [channel ", tag.channel, ", ",
                        describe_step(sig, tag), "]");
}

std::string rank_text(int peer) {
  return peer == kAnyRank ? std::string("any rank") : detail::concat("rank ", peer);
}

}  // namespace

struct MpiTransport::Request {
  bool send = false;
  int peer = 0;  // kAnyRank while an any-rank receive waits for its header
  Tag tag;
  CallSignature sig;
  void* data = nullptr;
  size_t bytes = 0;
  std::optional<Reduction> reduce;
  int* source = nullptr;  // receive: where the sender is written when its header arrives
  uint64_t order = 0;     // receive: post order, which decides between candidates
  FrameHeader header;     // send: the bytes of its header message, alive until it is sent
  bool matched = false;   // receive: its header has arrived and its payload is posted
  bool done = false;
  std::vector<MPI_Request> mpi;  // payload pieces (and a send's header) in flight
  std::unique_ptr<uint8_t[]> staging;
  size_t staging_capacity = 0;
};

MpiTransport::MpiTransport(MPI_Comm comm, MpiTransportOptions options) : options_(options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  BRAID_CHECK(initialized, "MpiTransport needs MPI initialised first (see mpi_world())");
  mpi_check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup", -1);
  mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", -1);
  mpi_check(MPI_Comm_dup(comm, &spare_comm_), "MPI_Comm_dup", -1);
  mpi_check(MPI_Comm_set_errhandler(spare_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", -1);
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  void* attr = nullptr;
  int found = 0;
  check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &attr, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (found && attr != nullptr) tag_ub_ = *static_cast<int*>(attr);
  const auto n = static_cast<size_t>(size_);
  posted_.resize(n);
  early_.resize(n);
  early_bytes_.assign(n, 0);
  sent_.assign(n, 0);
  received_.assign(n, 0);
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // MPI has already released everything; nothing left to free
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  for (RequestId id : ids) {
    try {
      abandon(id);
    } catch (...) {  // a destructor reports nothing; the job is going away
    }
  }
  requests_.clear();
  MPI_Comm_free(&comm_);
  MPI_Comm_free(&spare_comm_);
}

void MpiTransport::check(int rc, const char* what) const { mpi_check(rc, what, rank_); }

int MpiTransport::next_payload_tag(std::vector<uint64_t>& counters, int peer) const {
  const uint64_t n = counters[static_cast<size_t>(peer)]++;
  return 1 + static_cast<int>(n % static_cast<uint64_t>(tag_ub_));
}

MpiTransport::Request& MpiTransport::find(RequestId id, const char* where) {
  auto it = requests_.find(id);
  BRAID_CHECK(it != requests_.end(), where, ": unknown or already completed request ", id,
              " on rank ", rank_);
  return *it->second;
}

RequestId MpiTransport::isend(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                              size_t bytes) {
  BRAID_CHECK(peer >= 0 && peer < size_, "isend to rank ", peer, " of a job of ", size_, " ranks");
  BRAID_CHECK(bytes == 0 || data != nullptr, "isend of ", bytes, " bytes from a null buffer");
  auto r = std::make_unique<Request>();
  r->send = true;
  r->peer = peer;
  r->tag = tag;
  r->sig = sig;
  r->bytes = bytes;
  r->header.tag = tag;
  r->header.sig = sig;
  r->header.bytes = bytes;
  const int payload_tag = next_payload_tag(sent_, peer);
  r->mpi.reserve(1 + piece_count(bytes));
  MPI_Request header_request = MPI_REQUEST_NULL;
  check(MPI_Isend(&r->header, sizeof(FrameHeader), MPI_BYTE, peer, kHeaderTag, comm_,
                  &header_request),
        "MPI_Isend (header)");
  r->mpi.push_back(header_request);
  // MPI_Isend takes a non-const buffer in old signatures only; the bytes are never written.
  post_payload(const_cast<void*>(data), bytes, peer, payload_tag, /*send=*/true, r->mpi);
  const RequestId id = next_id_++;
  requests_.emplace(id, std::move(r));
  return id;
}

RequestId MpiTransport::irecv(int peer, const Tag& tag, const CallSignature& sig, void* data,
                              size_t bytes, std::optional<Reduction> reduce, int* source) {
  BRAID_CHECK(peer == kAnyRank || (peer >= 0 && peer < size_), "irecv from rank ", peer,
              " of a job of ", size_, " ranks (kAnyRank, ", kAnyRank, ", receives from any)");
  BRAID_CHECK(bytes == 0 || data != nullptr, "irecv of ", bytes, " bytes into a null buffer");
  if (reduce)
    BRAID_CHECK(bytes % dtype_size(reduce->dtype) == 0, "a reducing receive of ", bytes,
                " bytes is not a whole number of ", dtype_name(reduce->dtype), " elements");
  auto r = std::make_unique<Request>();
  r->peer = peer;
  r->tag = tag;
  r->sig = sig;
  r->data = data;
  r->bytes = bytes;
  r->reduce = reduce;
  r->source = source;
  r->order = ++posts_;
  if (peer != kAnyRank && source != nullptr) *source = peer;
  Request& req = *r;
  const RequestId id = next_id_++;
  requests_.emplace(id, std::move(r));

  try {
    // The early header it takes: the first of its peer's with its tag; from any rank, the
    // one of those that arrived first.
    const int first = peer == kAnyRank ? 0 : peer;
    const int last = peer == kAnyRank ? size_ - 1 : peer;
    int from = -1;
    std::deque<Early>::iterator found;
    for (int q = first; q <= last; ++q) {
      auto& early = early_[static_cast<size_t>(q)];
      for (auto it = early.begin(); it != early.end(); ++it) {
        if (!(it->header.tag == tag)) continue;
        if (from < 0 || it->arrival < found->arrival) {
          from = q;
          found = it;
        }
        break;
      }
    }
    if (from >= 0) {
      const Early e = *found;
      early_[static_cast<size_t>(from)].erase(found);
      early_bytes_[static_cast<size_t>(from)] -= e.header.bytes;
      match(req, from, e.header, e.payload_tag);
      return id;
    }
    for (int q = first; q <= last; ++q)
      for (const Early& e : early_[static_cast<size_t>(q)]) check_same_call(req, q, e.header);
  } catch (...) {
    requests_.erase(id);
    throw;
  }
  (peer == kAnyRank ? any_posted_ : posted_[static_cast<size_t>(peer)]).push_back(id);
  return id;
}

void MpiTransport::post_payload(void* data, size_t bytes, int peer, int payload_tag, bool send,
                                std::vector<MPI_Request>& out) {
  auto* p = static_cast<uint8_t*>(data);
  for (size_t offset = 0; offset < bytes; offset += kPieceBytes) {
    const int n = static_cast<int>(std::min(kPieceBytes, bytes - offset));
    MPI_Request request = MPI_REQUEST_NULL;
    if (send)
      check(MPI_Isend(p + offset, n, MPI_BYTE, peer, payload_tag, comm_, &request), "MPI_Isend");
    else
      check(MPI_Irecv(p + offset, n, MPI_BYTE, peer, payload_tag, comm_, &request), "MPI_Irecv");
    out.push_back(request);
  }
}

// A header with the receive's (channel, seq) but another signature means the ranks are in
// different collectives; p2p messages are matched by tag alone.
void MpiTransport::check_same_call(const Request& r, int from, const FrameHeader& header) const {
  if (r.sig.call == CallKind::p2p || header.sig.call == CallKind::p2p) return;
  if (header.tag.channel != r.tag.channel || header.tag.seq != r.tag.seq) return;
  if (header.sig == r.sig) return;
  BRAID_THROW(CollectiveMismatch, "rank ", rank_, " is in ", describe(r.tag, r.sig), " but rank ",
              from, " sent a message for ", describe(header.tag, header.sig),
              "; every rank must make the same collective calls, in the same order, with the "
              "same dtype, op, count and root");
}

void MpiTransport::match(Request& r, int from, const FrameHeader& header, int payload_tag) {
  if (header.sig != r.sig || header.bytes != r.bytes)
    BRAID_THROW(CollectiveMismatch, "rank ", rank_, " posted ", describe(r.tag, r.sig), " for ",
                r.bytes, " bytes from ", rank_text(r.peer), " but rank ", from, " sent ",
                describe(header.tag, header.sig), " of ", header.bytes,
                " bytes; every rank must make the same calls, in the same order, with the same "
                "dtype, op, count and root");
  r.peer = from;
  if (r.source != nullptr) *r.source = from;
  r.matched = true;
  void* target = r.data;
  if (r.reduce && r.bytes > 0) {
    // Reuse the smallest pooled buffer that is big enough; grow only when none is.
    auto best = staging_.end();
    for (auto it = staging_.begin(); it != staging_.end(); ++it)
      if (it->capacity >= r.bytes && (best == staging_.end() || it->capacity < best->capacity))
        best = it;
    if (best != staging_.end()) {
      r.staging = std::move(best->data);
      r.staging_capacity = best->capacity;
      staging_.erase(best);
    } else {
      r.staging.reset(new uint8_t[r.bytes]);
      r.staging_capacity = r.bytes;
    }
    target = r.staging.get();
  }
  r.mpi.reserve(piece_count(r.bytes));
  post_payload(target, r.bytes, r.peer, payload_tag, /*send=*/false, r.mpi);
}

void MpiTransport::on_header(int peer, const FrameHeader& header) {
  const int payload_tag = next_payload_tag(received_, peer);
  // The sender's posted receives and the any-rank ones, together in post order.
  auto& own = posted_[static_cast<size_t>(peer)];
  auto i = own.begin(), j = any_posted_.begin();
  while (i != own.end() || j != any_posted_.end()) {
    const bool from_any = i == own.end() || (j != any_posted_.end() &&
                                             requests_.at(*j)->order < requests_.at(*i)->order);
    auto& it = from_any ? j : i;
    Request& r = *requests_.at(*it);
    if (r.tag == header.tag) {
      (from_any ? any_posted_ : own).erase(it);
      match(r, peer, header, payload_tag);
      return;
    }
    ++it;
  }
  for (RequestId id : own) check_same_call(*requests_.at(id), peer, header);
  for (RequestId id : any_posted_) check_same_call(*requests_.at(id), peer, header);
  size_t& buffered = early_bytes_[static_cast<size_t>(peer)];
  if (header.bytes > options_.max_buffered_bytes - std::min(buffered, options_.max_buffered_bytes))
    BRAID_THROW(PeerError, "rank ", peer, " sent rank ", rank_, " more than ",
                options_.max_buffered_bytes, " bytes ahead of the matching receives (the last for ",
                describe(header.tag, header.sig),
                "); the ranks disagree about the calls they make, or one runs far ahead");
  buffered += header.bytes;
  early_[static_cast<size_t>(peer)].push_back(Early{header, payload_tag, ++arrivals_});
}

void MpiTransport::progress() {
  for (;;) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    check(MPI_Improbe(MPI_ANY_SOURCE, kHeaderTag, comm_, &flag, &message, &status), "MPI_Improbe");
    if (!flag) return;
    int count = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    const int peer = status.MPI_SOURCE;
    alignas(FrameHeader) uint8_t raw[sizeof(FrameHeader)];
    if (count != static_cast<int>(sizeof(FrameHeader)))
      BRAID_THROW(PeerError, "rank ", peer, " sent rank ", rank_, " a ", count,
                  "-byte message header where braid's are ", sizeof(FrameHeader),
                  " bytes; is another program using braid's communicator?");
    check(MPI_Mrecv(raw, count, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv (header)");
    const FrameHeader header = parse_frame_header(raw, UINT64_MAX, peer);
    if (header.type != FrameType::data)
      BRAID_THROW(PeerError, "rank ", peer, " sent rank ", rank_,
                  " a goodbye frame, which braid's MPI transport never sends; is another "
                  "program using braid's communicator?");
    on_header(peer, header);
  }
}

bool MpiTransport::try_complete(Request& r) {
  if (r.done) return true;
  if (!r.send && !r.matched) return false;
  if (!r.mpi.empty()) {
    int flag = 0;
    statuses_.resize(r.mpi.size());  // reused: this runs on every turn of a wait
    check(MPI_Testall(static_cast<int>(r.mpi.size()), r.mpi.data(), &flag, statuses_.data()),
          r.send ? "MPI_Testall (send)" : "MPI_Testall (receive)");
    if (!flag) return false;
    if (!r.send) {
      for (size_t i = 0; i < r.mpi.size(); ++i) {
        int got = 0;
        check(MPI_Get_count(&statuses_[i], MPI_BYTE, &got), "MPI_Get_count");
        const size_t want = std::min(kPieceBytes, r.bytes - i * kPieceBytes);
        if (static_cast<size_t>(got) != want)
          BRAID_THROW(PeerError, "rank ", r.peer, " sent rank ", rank_, " ", got,
                      " bytes in piece ", i, " of ", describe(r.tag, r.sig),
                      " where its header "
                      "announced ",
                      want);
      }
    }
    r.mpi.clear();
  }
  if (r.reduce && r.bytes > 0) {
    reduce_into(r.reduce->dtype, r.reduce->op, r.data, r.staging.get(),
                r.bytes / dtype_size(r.reduce->dtype));
    if (staging_.size() < kMaxPooledStaging)
      staging_.push_back(Staging{std::move(r.staging), r.staging_capacity});
    r.staging.reset();
  }
  r.done = true;
  return true;
}

// Releases a request that will not be waited for again (an error or timeout ended its
// wait). A receive's payload is cancelled; a send cannot be cancelled reliably in MPI, so
// its MPI requests are freed and the request's header kept alive until MPI is done with it.
void MpiTransport::abandon(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request& r = *it->second;
  if (!r.send && !r.matched) {
    auto& posted = r.peer == kAnyRank ? any_posted_ : posted_[static_cast<size_t>(r.peer)];
    posted.erase(std::remove(posted.begin(), posted.end(), id), posted.end());
  }
  bool keep = false;
  for (MPI_Request& m : r.mpi) {
    if (m == MPI_REQUEST_NULL) continue;
    if (r.send) {
      MPI_Request_free(&m);
      keep = true;
    } else {
      // MPI promises that a wait on a cancelled receive returns; waiting (rather than
      // freeing) keeps MPI from writing into the caller's buffer after it is released.
      MPI_Cancel(&m);
      MPI_Wait(&m, MPI_STATUS_IGNORE);
    }
  }
  if (keep) abandoned_.push_back(std::move(it->second));
  requests_.erase(it);
}

class MpiTransport::Steps final : public WaitSteps {
 public:
  // `where` names the call in an unknown request's error.
  Steps(MpiTransport& t, std::span<const RequestId> ids, const Deadline& deadline,
        const char* where)
      : t_(t), ids_(ids), deadline_(deadline), where_(where) {}

  bool progress() override {
    t_.progress();
    return false;  // MPI does not say whether anything moved
  }
  bool done() override {
    pending_ = nullptr;
    for (RequestId id : ids_) {
      Request& r = t_.find(id, where_);
      if (!t_.try_complete(r) && pending_ == nullptr) pending_ = &r;
    }
    return pending_ == nullptr;
  }
  std::string pending() override {
    return detail::concat(
        pending_->send ? "sending " : "receiving ", describe(pending_->tag, pending_->sig),
        pending_->send ? " to " : " from ", rank_text(pending_->peer), " over MPI");
  }
  [[noreturn]] void timeout() override {
    if (pending_->peer == kAnyRank)
      BRAID_THROW(TimeoutError, "rank ", t_.rank_, " timed out: no message with tag (channel ",
                  pending_->tag.channel, ", seq ", pending_->tag.seq, ", ",
                  describe_step(pending_->sig, pending_->tag), ") from any rank within ",
                  deadline_.waited_seconds(), " s, for a receive of ",
                  describe(pending_->tag, pending_->sig),
                  " over MPI; check that some rank sends it (raise the group's timeout or "
                  "BRAID_TIMEOUT_S if it is only slow)");
    BRAID_THROW(TimeoutError, "rank ", t_.rank_, " timed out after ", deadline_.waited_seconds(),
                " s waiting to ", pending_->send ? "send " : "receive ",
                describe(pending_->tag, pending_->sig),
                pending_->send ? " to rank " : " from rank ", pending_->peer,
                " over MPI; that rank may be stuck, dead or in another call (raise the group's "
                "timeout or BRAID_TIMEOUT_S if it is only slow) (",
                no_progress_from(pending_->peer), ")");
  }
  // Ranks may outnumber cores (mpirun --oversubscribe); let the peer we wait for run.
  void idle(Clock::time_point, Clock::duration, Clock::time_point) override {
    std::this_thread::yield();
  }
  void release() override {
    for (RequestId id : ids_) t_.requests_.erase(id);
  }
  void fail() override {
    for (RequestId id : ids_) t_.abandon(id);
  }

 private:
  MpiTransport& t_;
  std::span<const RequestId> ids_;
  Deadline deadline_;
  const char* where_;
  const Request* pending_ = nullptr;  // the first request done() found incomplete
};

void MpiTransport::wait(std::span<const RequestId> requests, Deadline deadline) {
  Steps steps(*this, requests, deadline, "MpiTransport::wait");
  run_wait(steps, rank_, deadline);
}

bool MpiTransport::test(RequestId request) {
  Steps steps(*this, std::span<const RequestId>(&request, 1), Deadline::never(),
              "MpiTransport::test");
  return run_test(steps);
}

}  // namespace braid::comm
