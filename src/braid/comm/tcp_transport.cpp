// TcpTransport: see tcp_transport.h for the design. This file is the connection setup
// through the store, the per-peer send and receive pumps, and the poll() wait loop.
#include "comm/tcp_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>
#include <vector>

#include "comm/auth.h"
#include "comm/frame.h"
#include "comm/receive_matcher.h"
#include "comm/socket.h"
#include "comm/wait_loop.h"
#include "core/error.h"
#include "core/log.h"

namespace braid::comm {

namespace {

using namespace std::chrono_literals;

constexpr int kSocketBufferBytes = 4 << 20;
constexpr size_t kRxBytes = size_t{256} << 10;  // per peer: headers, small messages, reductions
constexpr size_t kDirectMinBytes = size_t{16} << 10;  // payloads this big skip the rx buffer
constexpr size_t kDirectMaxBytes = size_t{4} << 20;   // an early block grows at most this per read
constexpr int kMaxIov = 32;
constexpr int kReadsPerPull = 64;             // then the other peers get a turn
constexpr uint32_t kHelloMagic = 0x48545242;  // "BRTH"
constexpr auto kAuthTimeout = 10s;            // for one incoming connection to prove itself

struct Hello {
  uint32_t magic = kHelloMagic;
  int32_t rank = -1;
  int32_t size = 0;
  uint32_t reserved = 0;
};

// Connects to rank `peer`'s listener at `address`, authenticates as this job's and says who
// this rank is; the listener must answer as rank `peer` of `size` (else a stale address).
Socket dial(const std::string& address, const Secret& secret, int rank, int size, int peer,
            const std::string& what, Deadline deadline) {
  const HostPort hp = parse_host_port(address);
  Socket s = connect_tcp(hp.host, hp.port, deadline);
  try {
    authenticate(s, secret, AuthRole::client, "tcp-transport", deadline);
  } catch (const AuthError& e) {
    throw AuthError(what + ": " + e.what());
  }
  Hello hello;
  hello.rank = rank;
  hello.size = size;
  s.write_all(&hello, sizeof(hello), deadline, what);
  Hello theirs;
  s.read_exact(&theirs, sizeof(theirs), deadline, what);
  if (theirs.magic != kHelloMagic || theirs.rank != peer || theirs.size != size)
    BRAID_THROW(IoError, what, ": the listener there is rank ", theirs.rank, " of ", theirs.size,
                ", not rank ", peer, " of ", size, " (a stale address in the store?)");
  return s;
}

std::string join_host_port(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// The local address of the route to `host`, via a connected UDP socket (nothing is sent).
std::string route_source(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return {};
  std::string out;
  for (addrinfo* ai = res; ai && out.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr =
          ss.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr);
      if (::inet_ntop(ss.ss_family, addr, text, sizeof(text))) out = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return out;
}

bool wildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

// 4 MiB buffers when the system allows them; otherwise Linux's autotuning does better than
// a capped fixed size.
void tune(Socket& s) {
  s.set_nodelay();
  std::ifstream in("/proc/sys/net/core/rmem_max");
  long rmem_max = 0;
  in >> rmem_max;
  if (rmem_max >= kSocketBufferBytes) s.set_buffer_sizes(kSocketBufferBytes);
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(Store& store, int rank, int size, const Secret& secret, Deadline deadline,
               const TransportOptions& options);
  // A restarted process in rank `rank`'s place (connect_rejoining_transport): listens,
  // publishes its address in `rejoin_store` and takes peers' connections as they come.
  TcpTransport(std::shared_ptr<Store> rejoin_store, int rank, int size, const Secret& secret,
               const TransportOptions& options);
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "tcp"; }

  RequestId isend(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                  size_t bytes) override;
  RequestId irecv(int peer, const Tag& tag, const CallSignature& sig, void* data, size_t bytes,
                  std::optional<Reduction> reduce, int* source) override;
  void wait(std::span<const RequestId> requests, Deadline deadline) override;
  bool test(RequestId request) override;
  // Gone once its connection closed or failed (learnt as the transport reads it).
  std::string peer_gone(int peer) override {
    return peer >= 0 && peer < size_ && peer != rank_ && !peers_[peer].open &&
                   matcher_.peer_failed(peer)
               ? matcher_.peer_failure(peer)
               : std::string();
  }
  void accept_rejoin(int peer, Store& store, Deadline deadline) override;

 private:
  struct Out {
    uint32_t slot = 0;
    FrameHeader header;
    size_t header_sent = 0;
  };
  struct Peer {
    Socket socket;
    bool open = false;
    std::string address;
    std::deque<Out> sends;
    bool writable = true;
    bool readable = true;
    std::unique_ptr<uint8_t[]> rx;
    size_t rx_begin = 0, rx_end = 0;
  };

  class Steps;  // this transport's part of the wait/test loop (comm/wait_loop.h)

  bool progress(int timeout_ms);
  bool push(int p);
  bool pull(int p);
  bool consume_rx(int p);
  void lose(int p, const std::string& reason);
  // Makes `s` (authenticated, hello exchanged) peer p's connection.
  void open_peer(int p, Socket s, const std::string& address);
  // A restarted process: takes one waiting connection from a peer that learnt of it.
  bool accept_peer();
  void release_all(std::span<const RequestId> ids);

  int rank_;
  int size_;
  ReceiveMatcher matcher_;
  std::vector<Peer> peers_;
  std::vector<pollfd> pollfds_;
  std::vector<int> poll_peers_;
  Secret secret_;
  Socket listener_;  // a restarted process's, open for the peers that have not connected
  // A restarted process's store until its first wait: a peer's connect needs this process
  // in its wait loop to answer, so it says it is ready only then (mark_rejoin_published).
  std::shared_ptr<Store> unannounced_;
  void announce() {
    if (!unannounced_) return;
    mark_rejoin_published(*unannounced_);
    unannounced_.reset();
  }
  // How long an idle wait polls without blocking; none when the job may have more ranks
  // on this host than it has cores (a spinning rank would take its peer's core).
  std::chrono::nanoseconds spin_ =
      static_cast<unsigned>(size_) <= std::max(1u, std::thread::hardware_concurrency())
          ? std::chrono::nanoseconds(50us)
          : std::chrono::nanoseconds(0);
};

TcpTransport::TcpTransport(Store& store, int rank, int size, const Secret& secret,
                           Deadline deadline, const TransportOptions& options)
    : rank_(rank),
      size_(size),
      matcher_(rank, size, options.max_buffered_bytes),
      peers_(size),
      secret_(secret) {
  BRAID_CHECK(size >= 1 && rank >= 0 && rank < size, "tcp transport: rank ", rank, " of a job of ",
              size, " ranks");
  if (size == 1) return;
  const Socket listener = listen_tcp(options.listen_host, 0);
  const std::string me = join_host_port(tcp_advertise_host(options), listener.local_port());
  store.set("tcp/addr/" + std::to_string(rank), me);

  // Lower ranks first: rank r's accepts wait only on ranks above it, whose connects wait
  // only on ranks below them that are done connecting, so the order cannot deadlock.
  for (int p = 0; p < rank; ++p) {
    const std::string address = store.get_string("tcp/addr/" + std::to_string(p), deadline);
    Socket s = dial(
        address, secret, rank, size, p,
        detail::concat("tcp transport: rank ", rank, " connecting to rank ", p, " at ", address),
        deadline);
    peers_[p].socket = std::move(s);
    peers_[p].address = address;
  }
  for (int accepted = 0; accepted < size - 1 - rank;) {
    Socket s = accept_tcp(listener, deadline);
    const std::string from = s.peer_address();
    const Deadline auth_deadline =
        Deadline::after(std::min(std::chrono::milliseconds(kAuthTimeout),
                                 std::chrono::milliseconds(deadline.remaining_ms())));
    Hello theirs;
    try {
      authenticate(s, secret, AuthRole::server, "tcp-transport", auth_deadline);
      s.read_exact(&theirs, sizeof(theirs), auth_deadline, "tcp transport hello from " + from);
    } catch (const Error& e) {  // AuthError, IoError, TimeoutError: not one of ours
      log_warn("tcp transport: rank ", rank, " refused a connection from ", from, ": ", e.what());
      continue;
    }
    if (theirs.magic != kHelloMagic || theirs.size != size || theirs.rank <= rank ||
        theirs.rank >= size || peers_[theirs.rank].socket.valid()) {
      log_warn("tcp transport: rank ", rank, " refused a connection from ", from,
               ": it claims to be rank ", theirs.rank, " of ", theirs.size);
      continue;
    }
    Hello hello;
    hello.rank = rank;
    hello.size = size;
    s.write_all(&hello, sizeof(hello), deadline, "tcp transport hello to " + from);
    peers_[theirs.rank].socket = std::move(s);
    peers_[theirs.rank].address = from;
    ++accepted;
  }
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    Peer& q = peers_[p];
    open_peer(p, std::move(q.socket), q.address);
  }
}

TcpTransport::TcpTransport(std::shared_ptr<Store> rejoin_store, int rank, int size,
                           const Secret& secret, const TransportOptions& options)
    : rank_(rank),
      size_(size),
      matcher_(rank, size, options.max_buffered_bytes),
      peers_(size),
      secret_(secret),
      unannounced_(std::move(rejoin_store)) {
  BRAID_CHECK(size >= 2 && rank >= 0 && rank < size, "tcp transport: a restarted rank ", rank,
              " of a job of ", size, " ranks");
  listener_ = listen_tcp(options.listen_host, 0);
  listener_.set_nonblocking(true);
  unannounced_->set("tcp/addr/" + std::to_string(rank),
                    join_host_port(tcp_advertise_host(options), listener_.local_port()));
}

void TcpTransport::open_peer(int p, Socket s, const std::string& address) {
  Peer& q = peers_[p];
  q.socket = std::move(s);
  q.address = address;
  tune(q.socket);
  q.socket.set_nonblocking(true);
  q.open = true;
  q.writable = true;
  q.readable = true;
  q.rx_begin = q.rx_end = 0;
  if (!q.rx) q.rx.reset(new uint8_t[kRxBytes]);
}

bool TcpTransport::accept_peer() {
  Socket s;
  try {
    s = accept_tcp(listener_, Deadline::after(std::chrono::milliseconds(0)));
  } catch (const TimeoutError&) {
    return false;  // the connection went away before it was taken
  }
  const std::string from = s.peer_address();
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(kAuthTimeout));
  Hello theirs;
  try {
    authenticate(s, secret_, AuthRole::server, "tcp-transport", deadline);
    s.read_exact(&theirs, sizeof(theirs), deadline, "tcp transport hello from " + from);
  } catch (const Error& e) {  // AuthError, IoError, TimeoutError: not one of ours
    log_warn("tcp transport: restarted rank ", rank_, " refused a connection from ", from, ": ",
             e.what());
    return true;
  }
  if (theirs.magic != kHelloMagic || theirs.size != size_ || theirs.rank < 0 ||
      theirs.rank >= size_ || theirs.rank == rank_ || peers_[theirs.rank].open) {
    log_warn("tcp transport: restarted rank ", rank_, " refused a connection from ", from,
             ": it claims to be rank ", theirs.rank, " of ", theirs.size);
    return true;
  }
  Hello hello;
  hello.rank = rank_;
  hello.size = size_;
  s.write_all(&hello, sizeof(hello), deadline, "tcp transport hello to " + from);
  open_peer(theirs.rank, std::move(s), from);
  log_debug("tcp transport: rank ", theirs.rank, " connected to restarted rank ", rank_);
  return true;
}

// The surviving side always connects: the newcomer listens at the address it published.
void TcpTransport::accept_rejoin(int peer, Store& store, Deadline deadline) {
  BRAID_CHECK(peer >= 0 && peer < size_ && peer != rank_, "tcp transport: accept_rejoin(", peer,
              ") on rank ", rank_, " of ", size_);
  Peer& q = peers_[peer];
  if (q.open) {
    // The caller knows the earlier process is gone (the launcher restarted it).
    q.open = false;
    q.socket.close();
  }
  std::vector<uint32_t> queued;
  for (const Out& o : q.sends) queued.push_back(o.slot);
  q.sends.clear();
  matcher_.reset_peer(
      peer, queued, detail::concat("rank ", peer, " was restarted: a new process took its place"));
  const std::string address = store.get_string("tcp/addr/" + std::to_string(peer), deadline);
  Socket s = dial(address, secret_, rank_, size_, peer,
                  detail::concat("tcp transport: rank ", rank_, " connecting to restarted rank ",
                                 peer, " at ", address),
                  deadline);
  open_peer(peer, std::move(s), address);
}

TcpTransport::~TcpTransport() {
  for (int p = 0; p < size_; ++p) {
    Peer& q = peers_[p];
    if (!q.open) continue;
    // Say goodbye unless a frame is half sent (the peer would misread it); best effort.
    if (q.sends.empty() ||
        (q.sends.front().header_sent == 0 && matcher_.slot(q.sends.front().slot).done == 0)) {
      FrameHeader bye;
      bye.type = FrameType::goodbye;
      (void)::send(q.socket.fd(), &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ::shutdown(q.socket.fd(), SHUT_WR);
  }
}

RequestId TcpTransport::isend(int peer, const Tag& tag, const CallSignature& sig, const void* data,
                              size_t bytes) {
  const RequestId id = matcher_.add_send(peer, tag, sig, data, bytes);
  if (peer != rank_) {
    Peer& q = peers_[peer];
    Out out;
    out.slot = matcher_.slot_of(id);
    out.header.tag = tag;
    out.header.sig = sig;
    out.header.bytes = bytes;
    q.sends.push_back(out);
    if (q.sends.size() == 1 && q.open) push(peer);  // most small messages leave right here
  }
  return id;
}

RequestId TcpTransport::irecv(int peer, const Tag& tag, const CallSignature& sig, void* data,
                              size_t bytes, std::optional<Reduction> reduce, int* source) {
  return matcher_.add_recv(peer, tag, sig, data, bytes, reduce, source);
}

void TcpTransport::lose(int p, const std::string& reason) {
  Peer& q = peers_[p];
  matcher_.fail_peer(p, reason);
  q.open = false;
  q.socket.close();
}

bool TcpTransport::push(int p) {
  Peer& q = peers_[p];
  bool moved = false;
  while (!q.sends.empty() && q.open) {
    iovec iov[kMaxIov];
    int n_iov = 0;
    for (size_t i = 0; i < q.sends.size() && n_iov + 2 <= kMaxIov; ++i) {
      Out& o = q.sends[i];
      const Request& r = matcher_.slot(o.slot);
      if (o.header_sent < sizeof(FrameHeader))
        iov[n_iov++] = {reinterpret_cast<uint8_t*>(&o.header) + o.header_sent,
                        sizeof(FrameHeader) - o.header_sent};
      if (r.done < r.bytes) iov[n_iov++] = {r.data + r.done, static_cast<size_t>(r.bytes - r.done)};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    const ssize_t sent = ::sendmsg(q.socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        q.writable = false;
        break;
      }
      lose(p, detail::concat("the connection to rank ", p, " (", q.address, ") failed: ",
                             std::strerror(errno), " (rank ", p, " died or closed it)"));
      return true;
    }
    moved = true;
    // Account the bytes to the queued frames in order.
    size_t left = static_cast<size_t>(sent);
    while (!q.sends.empty()) {
      Out& o = q.sends.front();
      Request& r = matcher_.slot(o.slot);
      const size_t h = std::min(left, sizeof(FrameHeader) - o.header_sent);
      o.header_sent += h;
      left -= h;
      const size_t b = static_cast<size_t>(std::min<uint64_t>(left, r.bytes - r.done));
      r.done += b;
      left -= b;
      if (o.header_sent < sizeof(FrameHeader) || r.done < r.bytes) break;
      r.complete = true;
      q.sends.pop_front();
    }
  }
  return moved;
}

bool TcpTransport::consume_rx(int p) {
  Peer& q = peers_[p];
  bool moved = false;
  while (q.rx_end > q.rx_begin) {
    const size_t have = q.rx_end - q.rx_begin;
    const uint8_t* at = q.rx.get() + q.rx_begin;
    if (!matcher_.in_message(p)) {
      if (have < sizeof(FrameHeader)) break;
      const FrameHeader h = parse_frame_header({at, sizeof(FrameHeader)}, kMaxFrameBytes, p);
      q.rx_begin += sizeof(FrameHeader);
      moved = true;
      if (h.type == FrameType::goodbye) {
        lose(p, detail::concat("rank ", p, " closed its tcp transport (it finished or failed)"));
        return true;
      }
      if (!matcher_.begin_matched(p, h)) matcher_.begin_early(p, h);
      continue;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(have, matcher_.remaining(p)));
    matcher_.deliver(p, at, n);
    q.rx_begin += n;
    moved = true;
  }
  if (q.rx_begin == q.rx_end) {
    q.rx_begin = q.rx_end = 0;
  } else if (q.rx_begin > 0) {  // a partial header: move it to the front
    std::memmove(q.rx.get(), q.rx.get() + q.rx_begin, q.rx_end - q.rx_begin);
    q.rx_end -= q.rx_begin;
    q.rx_begin = 0;
  }
  return moved;
}

bool TcpTransport::pull(int p) {
  Peer& q = peers_[p];
  bool moved = false;
  try {
    for (int reads = 0; reads < kReadsPerPull && q.open; ++reads) {
      moved |= consume_rx(p);
      if (!q.open) break;
      // A large payload with nothing buffered goes straight to its destination.
      std::span<uint8_t> target;
      if (q.rx_end == 0 && matcher_.in_message(p) && matcher_.remaining(p) >= kDirectMinBytes)
        target = matcher_.direct(p, kDirectMaxBytes);
      const bool direct = !target.empty();
      if (!direct) {
        // Between messages read little, so a large payload's bulk lands in place on the
        // next read instead of being copied out of the rx buffer.
        const size_t room = kRxBytes - q.rx_end;
        target = {q.rx.get() + q.rx_end,
                  matcher_.in_message(p) ? room : std::min(room, kDirectMinBytes)};
      }
      const ssize_t got = ::recv(q.socket.fd(), target.data(), target.size(), MSG_DONTWAIT);
      if (got > 0) {
        moved = true;
        if (direct)
          matcher_.advance(p, static_cast<size_t>(got));
        else
          q.rx_end += static_cast<size_t>(got);
        continue;
      }
      if (got == 0) {
        const uint64_t left = matcher_.remaining(p);
        lose(p, matcher_.in_message(p) || q.rx_end > 0
                    ? detail::concat("rank ", p, " (", q.address,
                                     ") closed its connection in the middle of a message (", left,
                                     " payload bytes missing)")
                    : detail::concat("rank ", p, " (", q.address,
                                     ") closed its connection (it died or exited)"));
        return true;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        q.readable = false;
        break;
      }
      lose(p, detail::concat("the connection to rank ", p, " (", q.address, ") failed: ",
                             std::strerror(errno), " (rank ", p, " died or closed it)"));
      return true;
    }
  } catch (const PeerError& e) {  // a corrupt frame, or too much sent ahead
    lose(p, e.what());
    throw;
  }
  return moved;
}

// Polls and reads every open peer on every pass, whatever is posted: a message is taken
// in (matched or buffered) as soon as it arrives, so arrival order is read order and an
// any-rank receive sees every peer.
bool TcpTransport::progress(int timeout_ms) {
  pollfds_.clear();
  poll_peers_.clear();
  for (int p = 0; p < size_; ++p) {
    Peer& q = peers_[p];
    if (!q.open) continue;
    short events = POLLIN;
    if (!q.sends.empty()) events |= POLLOUT;
    pollfds_.push_back({q.socket.fd(), events, 0});
    poll_peers_.push_back(p);
  }
  if (listener_.valid()) pollfds_.push_back({listener_.fd(), POLLIN, 0});
  if (!pollfds_.empty()) {
    const int n = ::poll(pollfds_.data(), pollfds_.size(), timeout_ms);
    if (n < 0 && errno != EINTR)
      BRAID_THROW(IoError, "tcp transport: poll failed: ", std::strerror(errno));
    if (n > 0 && listener_.valid() && (pollfds_.back().revents & POLLIN)) accept_peer();
    for (size_t i = 0; n > 0 && i < poll_peers_.size(); ++i) {
      Peer& q = peers_[poll_peers_[i]];
      if (pollfds_[i].revents & (POLLIN | POLLHUP | POLLERR)) q.readable = true;
      if (pollfds_[i].revents & (POLLOUT | POLLHUP | POLLERR)) q.writable = true;
    }
  }
  bool moved = false;
  for (int p = 0; p < size_; ++p) {
    Peer& q = peers_[p];
    if (!q.open) continue;
    if (!q.sends.empty() && q.writable) moved |= push(p);
    if (q.open && q.readable) moved |= pull(p);
  }
  return moved;
}

void TcpTransport::release_all(std::span<const RequestId> ids) {
  for (const RequestId id : ids) {
    if (!matcher_.valid(id)) continue;
    const uint32_t s = matcher_.slot_of(id);
    const Request& r = matcher_.slot(s);
    if (r.is_send && !r.complete && r.peer != rank_) {
      Peer& q = peers_[r.peer];
      if (!q.sends.empty() && q.sends.front().slot == s &&
          (q.sends.front().header_sent > 0 || r.done > 0)) {
        // Half a frame is on the wire and its source may now go away.
        lose(r.peer, detail::concat("rank ", rank_, " abandoned a partly sent message to rank ",
                                    r.peer, " after an earlier error"));
      }
      std::erase_if(q.sends, [s](const Out& o) { return o.slot == s; });
    }
    matcher_.release(id);
  }
}

class TcpTransport::Steps final : public WaitSteps {
 public:
  Steps(TcpTransport& t, std::span<const RequestId> ids, const Deadline& deadline)
      : t_(t), ids_(ids), deadline_(deadline) {}

  bool progress() override {
    const bool moved = t_.progress(timeout_ms_);
    timeout_ms_ = 0;
    return moved;
  }
  bool done() override { return t_.matcher_.finished(ids_, deadline_); }
  std::string pending() override { return t_.matcher_.pending(ids_); }
  [[noreturn]] void timeout() override {
    t_.matcher_.throw_timeout(ids_, deadline_,
                              "the peer is connected but did not send or take the message");
  }
  // Block in poll() (the next progress pass) only after passes that moved nothing for a
  // while: a wake-up from poll costs more than the next segment usually takes to arrive.
  void idle(Clock::time_point now, Clock::duration idle_for, Clock::time_point wake) override {
    if (idle_for < t_.spin_) return;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
    timeout_ms_ = static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
  }
  void release() override { t_.release_all(ids_); }
  void fail() override { t_.release_all(ids_); }

 private:
  TcpTransport& t_;
  std::span<const RequestId> ids_;
  Deadline deadline_;
  int timeout_ms_ = 0;  // of the next progress pass's poll()
};

void TcpTransport::wait(std::span<const RequestId> ids, Deadline deadline) {
  announce();
  if (ids.empty()) return;
  Steps steps(*this, ids, deadline);
  run_wait(steps, rank_, deadline);
}

bool TcpTransport::test(RequestId request) {
  announce();
  Steps steps(*this, std::span<const RequestId>(&request, 1), Deadline::never());
  return run_test(steps);
}

}  // namespace

std::string tcp_advertise_host(const TransportOptions& options) {
  if (!options.advertise_host.empty()) return options.advertise_host;
  if (!wildcard(options.listen_host)) return options.listen_host;
  if (!options.route_probe_host.empty()) {
    const std::string local = route_source(options.route_probe_host);
    if (!local.empty()) return local;
  }
  return "127.0.0.1";
}

std::shared_ptr<Transport> connect_tcp_transport(Store& store, int rank, int size,
                                                 const Secret& secret, Deadline deadline,
                                                 const TransportOptions& options) {
  return std::make_shared<TcpTransport>(store, rank, size, secret, deadline, options);
}

std::shared_ptr<Transport> connect_rejoining_tcp_transport(std::shared_ptr<Store> rejoin_store,
                                                           int rank, int size, const Secret& secret,
                                                           const TransportOptions& options) {
  return std::make_shared<TcpTransport>(std::move(rejoin_store), rank, size, secret, options);
}

}  // namespace braid::comm
