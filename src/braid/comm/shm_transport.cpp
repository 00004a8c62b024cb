// ShmTransport: see shm_transport.h for the design. This file is the connection setup
// through the store, the per-peer send and receive pumps, and the wait loop.
#include "comm/shm_transport.h"

#include <immintrin.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <new>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/frame.h"
#include "comm/receive_matcher.h"
#include "comm/shm_ring.h"
#include "comm/wait_loop.h"
#include "core/error.h"
#include "core/log.h"

namespace braid::comm {

namespace {

using namespace std::chrono_literals;
using shm::kPageBytes;
using shm::kRingAlign;

// Pieces of a message move between publishes; big enough that a publish (one cache line
// handed over) is cheap per byte, small enough that the receiver starts early.
constexpr size_t kPieceBytes = size_t{64} << 10;
constexpr size_t kMinRingBytes = size_t{64} << 10;
// Every ring of the job together (there are size * (size - 1)); past it rings shrink, so
// many local ranks do not fill /dev/shm.
constexpr size_t kMaxJobRingBytes = size_t{4} << 30;
// How often a waiting rank looks whether its peers are alive (a pidfd poll each, or their
// closed flag): a lost rank is seen within this, and an elastic job's recovery waits on it.
constexpr std::chrono::nanoseconds kLivenessInterval = 20ms;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string random_hex(size_t bytes) {
  std::vector<uint8_t> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    BRAID_CHECK(n > 0, "getrandom failed: ", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (const uint8_t b : raw) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

struct IdlePolicy {
  std::chrono::nanoseconds spin;   // idle time spent spinning on the rings
  std::chrono::nanoseconds yield;  // idle time after which sched_yield gives way to sleeping
};

IdlePolicy idle_policy(int ranks, const TransportOptions& options) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // With more ranks than cores a spinning rank steals the core its peer needs.
  const bool oversubscribed = static_cast<unsigned>(ranks) > cores;
  IdlePolicy p{oversubscribed ? std::chrono::nanoseconds(2us) : std::chrono::nanoseconds(50us),
               oversubscribed ? std::chrono::nanoseconds(200us) : std::chrono::nanoseconds(1ms)};
  if (options.shm_spin) p.spin = std::max(*options.shm_spin, std::chrono::microseconds(0));
  if (options.shm_yield) p.yield = *options.shm_yield;
  p.yield = std::max(p.yield, p.spin);
  return p;
}

int pidfd_open(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// Without a pidfd: gone when the pid is free or a zombie (a killed child not yet reaped).
bool process_gone(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = read_first_line(("/proc/" + std::to_string(pid) + "/stat").c_str());
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() &&
         (stat[close + 2] == 'Z' || stat[close + 2] == 'X');
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Unlinks a segment's name when dropped unless disarmed.
struct UnlinkGuard {
  std::string name;
  ~UnlinkGuard() { unlink(); }
  void unlink() {
    if (!name.empty()) ::shm_unlink(name.c_str());
    name.clear();
  }
};

// Bytes of each ring for a job of `size` local ranks.
size_t ring_bytes_for(int size, const TransportOptions& options) {
  size_t ring_bytes = round_up(std::max(options.shm_ring_bytes, kMinRingBytes), kPageBytes);
  const size_t cap = round_up(
      std::max(kMaxJobRingBytes / (static_cast<size_t>(size) * static_cast<size_t>(size - 1)),
               kMinRingBytes),
      kPageBytes);
  if (ring_bytes > cap) {
    log_debug("shm transport: ", size, " local ranks, so rings of ", cap, " bytes instead of ",
              ring_bytes);
    ring_bytes = cap;
  }
  return ring_bytes;
}

// How long a newcomer waits for the records of a peer that said it attached (they are
// published before it says so).
constexpr auto kAttachTimeout = 10s;

class ShmTransport final : public Transport {
 public:
  ShmTransport(Store& store, int rank, int size, Deadline deadline,
               const TransportOptions& options);
  // A restarted process in rank `rank`'s place (connect_rejoining_transport): publishes
  // itself in `rejoin_store` and is connected to nobody until peers attach.
  ShmTransport(std::shared_ptr<Store> rejoin_store, int rank, int size,
               const TransportOptions& options);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "shm"; }

  RequestId isend(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                  size_t bytes) override;
  RequestId irecv(int peer, const Tag& tag, const CallSignature& sig, void* data, size_t bytes,
                  std::optional<Reduction> reduce, int* source) override;
  void wait(std::span<const RequestId> requests, Deadline deadline) override;
  bool test(RequestId request) override;
  bool shares_memory() const override { return true; }
  bool anonymous_shared_memory() const override { return anonymous_; }
  std::string peer_gone(int peer) override {
    return peer == rank_ || peer < 0 || peer >= size_ ? std::string() : gone_reason(peer);
  }
  void accept_rejoin(int peer, Store& store, Deadline deadline) override;

 private:
  struct Peer {
    // Outbound: the ring this rank writes, in the peer's segment.
    shm::Mapping header_map;  // the peer's header page (its doorbell, pid, closed flag)
    shm::Mapping ring_map;
    shm::SegmentHeader* header = nullptr;
    shm::Producer out;
    std::deque<uint32_t> sends;  // queued send slots; the front is being written
    bool header_written = false;
    bool out_broken = false;  // a half-written frame was abandoned
    // Inbound: the peer's ring in this rank's segment.
    shm::RingHeader* in_header = nullptr;
    shm::Consumer in;
    bool parked = false;  // `parked_header` is read but its receive is not posted
    FrameHeader parked_header;
    // Liveness.
    int pid = 0;
    Fd pidfd;
    uint64_t checked = 0;  // the liveness round that last looked at this peer
    // False on a restarted process until the peer connects (accept_rejoin on its side):
    // nothing moves to or from it, and it is not looked at for liveness.
    bool attached = true;
  };

  class Steps;  // this transport's part of the wait/test loop (comm/wait_loop.h)

  shm::SegmentLayout own_layout() const { return {ring_bytes_, rank_, size_}; }
  // Creates this rank's segment (an anonymous one when anonymous_) and its inbound rings.
  void create_segment();
  // This rank's records in `store`: where it runs, and where its segment is.
  void publish_host(Store& store) const;
  void publish_segment(Store& store) const;
  // Maps peer p's header page and the ring this rank writes in p's segment, from p's
  // records in `store`.
  void map_peer(int p, Store& store, Deadline deadline);
  // Rank p's host record (its pid, its pid namespace), refused unless it runs on this host.
  struct PeerHost {
    int pid = 0;
    uint64_t pidns = 0;
  };
  PeerHost read_peer_host(int p, Store& store, Deadline deadline) const;
  // A restarted process: maps back the peers that attached since it last looked.
  void check_attachments();
  bool progress();
  // Each moves at most about `budget` payload bytes, so one pass interleaves a piece of
  // every send with a piece of every receive.
  bool push(int p, size_t budget = SIZE_MAX);
  bool pull(int p, bool absorb, size_t budget = SIZE_MAX);
  bool absorb_stalled();
  bool check_liveness(std::span<const RequestId> ids);
  bool check_peer(int p);
  std::string gone_reason(int p);
  std::string timeout_hint(std::span<const RequestId> ids);
  void release_all(std::span<const RequestId> ids);

  int rank_;
  int size_;
  ReceiveMatcher matcher_;
  IdlePolicy policy_;
  UnlinkGuard unlink_;
  bool anonymous_ = false;  // this rank's segment is a memfd (see shm::create_anonymous_segment)
  Fd own_fd_;               // an anonymous segment's fd, open until every peer has mapped it
  shm::Mapping own_;
  shm::SegmentHeader* own_header_ = nullptr;
  std::vector<Peer> peers_;
  uint64_t liveness_round_ = 0;
  Clock::time_point next_test_check_{};
  size_t ring_bytes_ = 0;
  std::string own_name_;  // this rank's segment: its /dev/shm name or anonymous locator
  std::string boot_id_;
  uint64_t pidns_ = 0;
  // TransportOptions::accept_rejoins (always on a restarted process): the anonymous
  // segment's fd stays open so that a restarted peer can map it.
  bool accepts_rejoins_ = false;
  std::shared_ptr<Store> rejoin_store_;  // a restarted process's: where attaching peers publish
  int unattached_ = 0;                   // peers not attached yet
};

ShmTransport::ShmTransport(Store& store, int rank, int size, Deadline deadline,
                           const TransportOptions& options)
    : rank_(rank),
      size_(size),
      matcher_(rank, size, options.max_buffered_bytes),
      policy_(idle_policy(size, options)),
      peers_(static_cast<size_t>(size)),
      accepts_rejoins_(options.accept_rejoins) {
  BRAID_CHECK(size >= 1 && rank >= 0 && rank < size, "shm transport: rank ", rank, " of a job of ",
              size, " ranks");
  if (size == 1) return;
  ring_bytes_ = ring_bytes_for(size, options);
  // First who is where: anonymous segments need every rank in this pid namespace.
  boot_id_ = read_first_line("/proc/sys/kernel/random/boot_id");
  pidns_ = shm::pid_namespace();
  publish_host(store);
  anonymous_ = pidns_ != 0;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    // Before anything is made: a peer elsewhere cannot map it.
    const PeerHost host = read_peer_host(p, store, deadline);
    // A pid means something only in our pid namespace; elsewhere, closing and the
    // deadline still end a wait.
    if (host.pid <= 0 || host.pidns != pidns_) anonymous_ = false;
  }
  create_segment();
  publish_segment(store);

  std::vector<std::string> mapped_keys;
  for (int p = 0; p < size; ++p) {
    mapped_keys.push_back("shm/mapped/" + std::to_string(p));
    if (p != rank) map_peer(p, store, deadline);
  }
  store.set(mapped_keys[static_cast<size_t>(rank)], std::string("1"));
  store.wait(mapped_keys, deadline);
  // Every peer has it mapped: neither the name nor the fd is needed any more, unless a
  // restarted peer will map it again.
  unlink_.unlink();
  if (!accepts_rejoins_) own_fd_ = Fd();
}

ShmTransport::ShmTransport(std::shared_ptr<Store> rejoin_store, int rank, int size,
                           const TransportOptions& options)
    : rank_(rank),
      size_(size),
      matcher_(rank, size, options.max_buffered_bytes),
      policy_(idle_policy(size, options)),
      peers_(static_cast<size_t>(size)),
      accepts_rejoins_(true),
      rejoin_store_(std::move(rejoin_store)) {
  BRAID_CHECK(size >= 2 && rank >= 0 && rank < size, "shm transport: a restarted rank ", rank,
              " of a job of ", size, " ranks");
  ring_bytes_ = ring_bytes_for(size, options);
  boot_id_ = read_first_line("/proc/sys/kernel/random/boot_id");
  pidns_ = shm::pid_namespace();
  // Its peers' segments lost their names once mapped: only anonymous ones can be found
  // again, and only from this pid namespace.
  if (pidns_ == 0)
    BRAID_THROW(IoError,
                "shm transport: a restarted process reconnects through anonymous shared memory, "
                "which needs /proc/self/ns/pid; run the job on the tcp transport");
  anonymous_ = true;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    peers_[p].attached = false;
    ++unattached_;
  }
  create_segment();
  publish_host(*rejoin_store_);
  publish_segment(*rejoin_store_);
}

void ShmTransport::publish_host(Store& store) const {
  std::ostringstream mine;
  mine << ::getpid() << ' ' << pidns_ << ' ' << boot_id_;
  store.set("shm/host/" + std::to_string(rank_), mine.str());
}

void ShmTransport::publish_segment(Store& store) const {
  std::ostringstream mine;
  mine << own_name_ << ' ' << ring_bytes_;
  store.set("shm/seg/" + std::to_string(rank_), mine.str());
}

void ShmTransport::create_segment() {
  const shm::SegmentLayout layout = own_layout();
  {
    Fd fd;
    if (anonymous_) {
      fd = Fd(shm::create_anonymous_segment("ring", layout.total(), own_name_));
    } else {
      own_name_ = "/braid-ring-" + std::to_string(::getpid()) + "-" + random_hex(8);
      fd = Fd(shm::create_segment(own_name_, layout.total()));
      unlink_.name = own_name_;
    }
    own_ = shm::Mapping(fd.get(), 0, layout.total(), "this rank's shared-memory segment");
    // Peers open an anonymous segment through this process's fd until all have mapped it.
    if (anonymous_) own_fd_ = std::move(fd);
  }
  own_header_ = new (own_.data()) shm::SegmentHeader{};
  own_header_->rank = rank_;
  own_header_->size = size_;
  own_header_->pid = static_cast<int32_t>(::getpid());
  own_header_->ring_bytes = ring_bytes_;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    uint8_t* at = own_.data() + layout.ring_offset(p);
    peers_[p].in_header = new (at) shm::RingHeader{};
    peers_[p].in = shm::Consumer(peers_[p].in_header, at + kPageBytes, ring_bytes_);
  }
}

ShmTransport::PeerHost ShmTransport::read_peer_host(int p, Store& store, Deadline deadline) const {
  std::istringstream record(store.get_string("shm/host/" + std::to_string(p), deadline));
  std::string peer_boot;
  PeerHost host;
  record >> host.pid >> host.pidns >> peer_boot;
  BRAID_CHECK(!record.fail(), "shm transport: rank ", p, " published a malformed host record");
  if (peer_boot != boot_id_)
    BRAID_THROW(IoError, "shm transport: rank ", p, " runs on another host (boot id ", peer_boot,
                ", here ", boot_id_,
                "); shared memory needs every rank on one host: use the tcp or auto transport");
  return host;
}

void ShmTransport::map_peer(int p, Store& store, Deadline deadline) {
  const PeerHost host = read_peer_host(p, store, deadline);
  const int pid = host.pid;
  const uint64_t peer_pidns = host.pidns;
  std::istringstream seg(store.get_string("shm/seg/" + std::to_string(p), deadline));
  std::string peer_name;
  size_t peer_ring = 0;
  seg >> peer_name >> peer_ring;
  BRAID_CHECK(!seg.fail() && peer_ring >= kMinRingBytes && peer_ring % kPageBytes == 0,
              "shm transport: rank ", p, " published a malformed segment record");
  const std::string what = "rank " + std::to_string(p) + "'s shared-memory segment";
  const shm::SegmentLayout theirs_layout{peer_ring, p, size_};
  Peer& q = peers_[p];
  {
    const Fd fd(shm::open_segment(peer_name, theirs_layout.total(), what));
    q.header_map = shm::Mapping(fd.get(), 0, kPageBytes, what);
    q.ring_map =
        shm::Mapping(fd.get(), theirs_layout.ring_offset(rank_), theirs_layout.ring_stride(), what);
  }
  q.header = reinterpret_cast<shm::SegmentHeader*>(q.header_map.data());
  if (q.header->magic != shm::kSegmentMagic || q.header->version != shm::kSegmentVersion ||
      q.header->rank != p || q.header->size != size_ || q.header->ring_bytes != peer_ring)
    BRAID_THROW(IoError, what, " (/dev/shm", peer_name,
                ") is not a braid segment of this job (another braid version?)");
  q.out = shm::Producer(reinterpret_cast<shm::RingHeader*>(q.ring_map.data()),
                        q.ring_map.data() + kPageBytes, peer_ring);
  q.pid = 0;
  q.pidfd = Fd();
  if (pid > 0 && peer_pidns == pidns_) {
    q.pid = pid;
    q.pidfd = Fd(pidfd_open(pid));
  }
}

// The peer that accepts a restarted process drops what is left of the earlier one, resets
// the ring the newcomer will write in this rank's segment, maps the newcomer's, publishes
// its own records beside the newcomer's and only then marks the newcomer's ring attached:
// by the time the newcomer maps this rank back, everything it will touch is fresh.
void ShmTransport::accept_rejoin(int peer, Store& store, Deadline deadline) {
  BRAID_CHECK(peer >= 0 && peer < size_ && peer != rank_, "shm transport: accept_rejoin(", peer,
              ") on rank ", rank_, " of ", size_);
  if (!accepts_rejoins_ || !anonymous_)
    BRAID_THROW(Error, "shm transport: rank ", rank_, " cannot take a restarted process as rank ",
                peer,
                !accepts_rejoins_
                    ? " (the transport was made without TransportOptions::accept_rejoins)"
                    : " (its segment has a /dev/shm name, gone once mapped: restarts over shared "
                      "memory need every rank in one pid namespace; run the job on the tcp "
                      "transport)");
  Peer& q = peers_[peer];
  if (q.attached && gone_reason(peer).empty())
    BRAID_THROW(IoError, "shm transport: rank ", peer, "'s earlier process (", q.pid,
                ") still runs; a restarted process takes its place only once it is gone");
  const std::vector<uint32_t> queued(q.sends.begin(), q.sends.end());
  q.sends.clear();
  matcher_.reset_peer(
      peer, queued, detail::concat("rank ", peer, " was restarted: a new process took its place"));
  q.header_written = false;
  q.out_broken = false;
  q.parked = false;
  q.checked = 0;
  uint8_t* at = own_.data() + own_layout().ring_offset(peer);
  q.in_header = new (at) shm::RingHeader{};
  q.in = shm::Consumer(q.in_header, at + kPageBytes, ring_bytes_);
  map_peer(peer, store, deadline);
  publish_host(store);
  publish_segment(store);
  reinterpret_cast<shm::RingHeader*>(q.ring_map.data())
      ->attached.store(1, std::memory_order_release);
  if (!q.attached) --unattached_;
  q.attached = true;
  shm::ring(q.header->doorbell);
}

void ShmTransport::check_attachments() {
  if (unattached_ == 0) return;
  for (int p = 0; p < size_; ++p) {
    Peer& q = peers_[p];
    if (q.attached || q.in_header == nullptr ||
        q.in_header->attached.load(std::memory_order_acquire) == 0)
      continue;
    map_peer(p, *rejoin_store_, Deadline::after(kAttachTimeout));
    q.attached = true;
    --unattached_;
    log_debug("shm transport: rank ", p, " connected to restarted rank ", rank_);
  }
}

ShmTransport::~ShmTransport() {
  if (!own_header_) return;
  own_header_->closed.store(1, std::memory_order_release);
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && peers_[p].header) shm::ring(peers_[p].header->doorbell);
}

RequestId ShmTransport::isend(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                              size_t bytes) {
  const RequestId id = matcher_.add_send(peer, tag, sig, data, bytes);
  if (peer != rank_) {
    Peer& q = peers_[peer];
    q.sends.push_back(matcher_.slot_of(id));
    if (q.sends.size() == 1 && !q.out_broken && q.attached) push(peer, kPieceBytes);
  }
  return id;
}

RequestId ShmTransport::irecv(int peer, const Tag& tag, const CallSignature& sig, void* data,
                              size_t bytes, std::optional<Reduction> reduce, int* source) {
  return matcher_.add_recv(peer, tag, sig, data, bytes, reduce, source);
}

bool ShmTransport::push(int p, size_t budget) {
  Peer& q = peers_[p];
  bool moved = false;
  size_t pushed = 0;
  while (!q.sends.empty() && pushed < budget) {
    Request& r = matcher_.slot(q.sends.front());
    if (!q.header_written) {
      q.out.rewind_if_empty();
      const auto span = q.out.reserve(kRingAlign);
      if (span.size() < kRingAlign) break;
      FrameHeader h;
      h.tag = r.tag;
      h.sig = r.sig;
      h.bytes = r.bytes;
      std::memcpy(span.data(), &h, sizeof(h));
      std::memset(span.data() + sizeof(h), 0, kRingAlign - sizeof(h));
      q.out.advance(kRingAlign);
      q.header_written = true;
      moved = true;
    }
    while (r.done < r.bytes && pushed < budget) {
      const uint64_t left = r.bytes - r.done;
      const auto span = q.out.reserve(std::min<uint64_t>(round_up(left, kRingAlign), kPieceBytes));
      if (span.empty()) break;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(span.size(), left));
      std::memcpy(span.data(), r.data + r.done, n);
      q.out.advance(round_up(n, kRingAlign));
      r.done += n;
      pushed += n;
      moved = true;
      if (r.done < r.bytes && q.out.publish()) shm::ring(q.header->doorbell);
    }
    if (r.done < r.bytes) break;
    r.complete = true;
    q.sends.pop_front();
    q.header_written = false;
  }
  if (q.out.publish()) shm::ring(q.header->doorbell);
  return moved;
}

bool ShmTransport::pull(int p, bool absorb, size_t budget) {
  Peer& q = peers_[p];
  bool moved = false;
  size_t pulled = 0;
  try {
    while (pulled < budget) {
      if (!matcher_.in_message(p)) {
        if (!q.parked) {
          const auto span = q.in.peek(kRingAlign);
          if (span.size() < kRingAlign) break;
          if (q.in.skip(span)) continue;
          q.parked_header = parse_frame_header(span.first(sizeof(FrameHeader)), kMaxFrameBytes, p);
          q.in.advance(kRingAlign);
          moved = true;
          if (q.parked_header.type != FrameType::data)
            BRAID_THROW(PeerError, "rank ", p, " sent a goodbye frame on a shared-memory ring");
          q.parked = true;
        }
        if (matcher_.begin_matched(p, q.parked_header)) {
          q.parked = false;
        } else if (absorb || matcher_.has_posted(p)) {
          matcher_.begin_early(p, q.parked_header);
          q.parked = false;
        } else {
          break;  // stays in the ring until its receive is posted
        }
        moved = true;
      }
      const uint64_t left = matcher_.remaining(p);
      if (left == 0) continue;  // a zero-byte message completed at its header
      const auto span = q.in.peek(std::min<uint64_t>(round_up(left, kRingAlign), kPieceBytes));
      if (span.empty()) break;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(span.size(), left));
      matcher_.deliver(p, span.data(), n);
      q.in.advance(n == left ? round_up(n, kRingAlign) : n);
      pulled += n;
      moved = true;
      if (q.in.publish()) shm::ring(q.header->doorbell);
    }
  } catch (const PeerError& e) {
    matcher_.fail_peer(p, e.what());
    throw;
  }
  if (q.in.publish()) shm::ring(q.header->doorbell);
  return moved;
}

// Reads from a peer only while a receive it could satisfy is posted (its own or an
// any-rank one) or its message is under way; otherwise its messages wait in the ring.
bool ShmTransport::progress() {
  check_attachments();
  bool moved = false;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Peer& q = peers_[p];
    if (!q.attached) continue;
    if (!q.sends.empty() && !q.out_broken) moved |= push(p, kPieceBytes);
    if ((matcher_.in_message(p) || matcher_.has_posted(p)) && !matcher_.peer_failed(p))
      moved |= pull(p, false, kPieceBytes);
  }
  return moved;
}

bool ShmTransport::absorb_stalled() {
  // A sender blocked on a full ring may be what everyone waits for: buffer its message.
  bool moved = false;
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && peers_[p].attached && !matcher_.peer_failed(p) && peers_[p].in.full())
      moved |= pull(p, true);
  return moved;
}

std::string ShmTransport::gone_reason(int p) {
  Peer& q = peers_[p];
  if (!q.attached) return {};  // a restarted process cannot tell yet
  if (q.header->closed.load(std::memory_order_acquire))
    return detail::concat("rank ", p, " closed its shm transport (it finished or failed)");
  bool dead = false;
  if (q.pidfd.get() >= 0) {
    pollfd pfd{q.pidfd.get(), POLLIN, 0};
    dead = ::poll(&pfd, 1, 0) > 0;
  } else if (q.pid > 0) {
    dead = process_gone(q.pid);
  }
  return dead ? detail::concat("rank ", p, " (process ", q.pid, ") died") : std::string();
}

bool ShmTransport::check_liveness(std::span<const RequestId> ids) {
  ++liveness_round_;
  bool found = false;
  for (const RequestId id : ids) {
    const Request& r = matcher_.get(id);
    if (r.complete) continue;
    if (r.peer != kAnyRank) {
      found |= check_peer(r.peer);
      continue;
    }
    for (int p = 0; p < size_; ++p) found |= check_peer(p);  // any of them may send it
  }
  return found;
}

// Once per liveness round: true when peer `p` is newly found gone (and failed).
bool ShmTransport::check_peer(int p) {
  if (p == rank_ || matcher_.peer_failed(p)) return false;
  Peer& q = peers_[p];
  if (q.checked == liveness_round_) return false;
  q.checked = liveness_round_;
  const std::string reason = gone_reason(p);
  if (reason.empty()) return false;
  // What it wrote before it went is still in the ring: deliver that first.
  while (pull(p, true)) {
  }
  matcher_.fail_peer(p, reason);
  return true;
}

std::string ShmTransport::timeout_hint(std::span<const RequestId> ids) {
  for (const RequestId id : ids) {
    const Request& r = matcher_.get(id);
    if (r.complete || r.peer == rank_) continue;
    if (r.peer == kAnyRank) return {};  // no one peer to blame
    const Peer& q = peers_[r.peer];
    if (!q.attached)
      return detail::concat("rank ", r.peer,
                            " has not connected to this restarted process (it connects once it "
                            "learns of the restart)");
    if (r.is_send)
      return detail::concat("rank ", r.peer, " (process ", q.pid,
                            ") is alive but did not take the message");
    return detail::concat(
        "rank ", r.peer, " (process ", q.pid, ") is alive but did not send the message",
        q.parked ? detail::concat("; its next message is for ",
                                  describe_call(q.parked_header.sig, q.parked_header.tag.seq), " ",
                                  describe_step(q.parked_header.sig, q.parked_header.tag))
                 : std::string());
  }
  return {};
}

void ShmTransport::release_all(std::span<const RequestId> ids) {
  for (const RequestId id : ids) {
    if (!matcher_.valid(id)) continue;
    const uint32_t s = matcher_.slot_of(id);
    const Request& r = matcher_.slot(s);
    if (r.is_send && !r.complete && r.peer != rank_) {
      Peer& q = peers_[r.peer];
      if (!q.sends.empty() && q.sends.front() == s && q.header_written) {
        // Half a frame is in the ring and its source may now go away: the stream to this
        // peer cannot continue.
        q.out_broken = true;
        q.header_written = false;
        matcher_.fail_peer(
            r.peer, detail::concat("rank ", rank_, " abandoned a partly sent message to rank ",
                                   r.peer, " after an earlier error"));
      }
      std::erase(q.sends, s);
    }
    matcher_.release(id);
  }
}

class ShmTransport::Steps final : public WaitSteps {
 public:
  // `next_check`: when peers' liveness is next looked at (a wait's own, or test()'s).
  Steps(ShmTransport& t, std::span<const RequestId> ids, const Deadline& deadline,
        Clock::time_point& next_check)
      : t_(t), ids_(ids), deadline_(deadline), next_check_(next_check) {}

  bool progress() override { return t_.progress() || t_.absorb_stalled(); }
  bool done() override { return t_.matcher_.finished(ids_, deadline_); }
  bool recheck(Clock::time_point now) override {
    if (now < next_check_) return false;
    next_check_ = now + kLivenessInterval;
    return t_.check_liveness(ids_);
  }
  std::string pending() override {
    const std::string hint = t_.timeout_hint(ids_);
    return t_.matcher_.pending(ids_) + (hint.empty() ? "" : "; ") + hint;
  }
  [[noreturn]] void timeout() override {
    t_.matcher_.throw_timeout(ids_, deadline_, t_.timeout_hint(ids_));
  }
  // Spin, then yield the core, then sleep on the doorbell (shm_transport.h, "Waiting").
  void idle(Clock::time_point now, Clock::duration idle_for, Clock::time_point wake) override {
    if (idle_for < t_.policy_.spin) {
      for (int i = 0; i < 4; ++i) _mm_pause();
    } else if (idle_for < t_.policy_.yield) {
      ::sched_yield();
    } else {
      shm::sleep_until_rung(
          t_.own_header_->doorbell, [&] { return progress(); },
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::min(wake, next_check_) - now));
    }
  }
  void release() override { t_.release_all(ids_); }
  void fail() override { t_.release_all(ids_); }

 private:
  ShmTransport& t_;
  std::span<const RequestId> ids_;
  Deadline deadline_;
  Clock::time_point& next_check_;
};

void ShmTransport::wait(std::span<const RequestId> ids, Deadline deadline) {
  if (ids.empty()) return;
  Clock::time_point next_check = Clock::now() + kLivenessInterval;
  Steps steps(*this, ids, deadline, next_check);
  run_wait(steps, rank_, deadline);
}

bool ShmTransport::test(RequestId request) {
  Steps steps(*this, std::span<const RequestId>(&request, 1), Deadline::never(), next_test_check_);
  return run_test(steps);
}

}  // namespace

std::shared_ptr<Transport> connect_shm_transport(Store& store, int rank, int size,
                                                 Deadline deadline,
                                                 const TransportOptions& options) {
  return std::make_shared<ShmTransport>(store, rank, size, deadline, options);
}

std::shared_ptr<Transport> connect_rejoining_shm_transport(std::shared_ptr<Store> rejoin_store,
                                                           int rank, int size,
                                                           const TransportOptions& options) {
  return std::make_shared<ShmTransport>(std::move(rejoin_store), rank, size, options);
}

}  // namespace braid::comm
