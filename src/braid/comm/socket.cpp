// Socket, listen_tcp, accept_tcp, connect_tcp: POSIX TCP with deadlines.
//
// I/O never blocks in the kernel past a deadline: every send/recv is MSG_DONTWAIT and a
// would-block result waits in poll() for at most the time left, so the same code serves
// blocking and non-blocking fds. connect() is non-blocking too, with poll for the handshake.
#include "comm/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "core/error.h"

namespace braid::comm {

namespace {

constexpr std::chrono::milliseconds kMaxAttempt{10'000};

std::string errno_text(int err) { return std::strerror(err); }

int poll_timeout(Deadline deadline) { return deadline.is_never() ? -1 : deadline.remaining_ms(); }

// Waits until `fd` is ready for `events`; false when the deadline passed first.
bool wait_ready(int fd, short events, Deadline deadline, std::string_view what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_timeout(deadline));
    if (n > 0) return true;  // ready, or an error/hangup the next call reports
    if (n == 0) {
      if (deadline.expired()) return false;
      continue;  // poll's millisecond rounding woke us early
    }
    if (errno != EINTR) BRAID_THROW(IoError, what, ": poll failed: ", errno_text(errno));
  }
}

bool is_closed_error(int err) { return err == ECONNRESET || err == EPIPE || err == ENOTCONN; }

std::string format_address(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    std::string out = "[";  // appended, not "[" + s: GCC 12 warns falsely on the latter
    out += host;
    out += "]:";
    out += std::to_string(port);
    return out;
  }
  return "?";
}

std::string display(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  std::string out = v6 ? "[" : "";
  out += host;
  out += v6 ? "]:" : ":";
  out += std::to_string(port);
  return out;
}

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head) ::freeaddrinfo(head);
  }
};

// getaddrinfo; returns its error code (0 on success).
int resolve(const std::string& host, uint16_t port, bool passive, AddrInfoList& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string service = std::to_string(port);
  return ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out.head);
}

// Worth retrying: the listener is not up yet, or the network is still coming up.
bool is_transient_connect_error(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == ECONNABORTED || err == ENETUNREACH ||
         err == EHOSTUNREACH || err == ETIMEDOUT || err == EADDRNOTAVAIL || err == EAGAIN;
}

std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return format_address(reinterpret_cast<const sockaddr*>(&ss));
}

// One non-blocking connect to `ai`, waiting for the handshake until the deadline. Returns
// a connected (blocking) socket, or an invalid one with `err` set.
Socket try_connect(const addrinfo* ai, Deadline deadline, int& err) {
  Socket s(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!s.valid()) {
    err = errno;
    return Socket();
  }
  if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      err = errno;
      return Socket();
    }
    for (;;) {
      pollfd p{s.fd(), POLLOUT, 0};
      const int n = ::poll(&p, 1, poll_timeout(deadline));
      if (n > 0) break;
      if (n == 0 && deadline.expired()) {
        err = ETIMEDOUT;
        return Socket();
      }
      if (n < 0 && errno != EINTR) {
        err = errno;
        return Socket();
      }
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
    if (so_error != 0) {
      err = so_error;
      return Socket();
    }
  }
  // Connecting to a free local port can pick that same port as the source and connect
  // the socket to itself (TCP simultaneous open); that is nobody listening, not a peer.
  if (s.peer_address() == local_address(s.fd())) {
    err = ECONNREFUSED;
    return Socket();
  }
  s.set_nonblocking(false);
  return s;
}

}  // namespace

Socket::Socket(int fd) : fd_(fd) {}

Socket::~Socket() { close(); }

Socket::Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

int Socket::fd() const { return fd_; }
bool Socket::valid() const { return fd_ >= 0; }

void Socket::close() {
  // close() is not retried on EINTR: on Linux the fd is released either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::write_all(const void* data, size_t bytes, Deadline deadline,
                       std::string_view what) const {
  BRAID_CHECK(valid(), what, ": write on a closed socket");
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::send(fd_, p + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = n < 0 ? errno : EAGAIN;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (!wait_ready(fd_, POLLOUT, deadline, what))
        BRAID_THROW(TimeoutError, what, ": timed out after ", deadline.waited_seconds(), " s with ",
                    done, " of ", bytes, " bytes sent (is the peer stuck?)");
      continue;
    }
    if (is_closed_error(err)) BRAID_THROW(IoError, what, ": connection closed by peer");
    BRAID_THROW(IoError, what, ": send failed: ", errno_text(err));
  }
}

void Socket::read_exact(void* data, size_t bytes, Deadline deadline, std::string_view what) const {
  BRAID_CHECK(valid(), what, ": read on a closed socket");
  auto* p = static_cast<uint8_t*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::recv(fd_, p + done, bytes - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) BRAID_THROW(IoError, what, ": connection closed by peer");
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (!wait_ready(fd_, POLLIN, deadline, what))
        BRAID_THROW(TimeoutError, what, ": timed out after ", deadline.waited_seconds(), " s with ",
                    done, " of ", bytes, " bytes received (is the peer stuck?)");
      continue;
    }
    if (is_closed_error(err)) BRAID_THROW(IoError, what, ": connection closed by peer");
    BRAID_THROW(IoError, what, ": recv failed: ", errno_text(err));
  }
}

void Socket::set_nodelay() {
  const int on = 1;
  if (::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on)) != 0)
    BRAID_THROW(IoError, "setsockopt(TCP_NODELAY): ", errno_text(errno));
}

void Socket::set_buffer_sizes(int bytes) {
  if (::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) != 0 ||
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0)
    BRAID_THROW(IoError, "setsockopt(SO_SNDBUF/SO_RCVBUF, ", bytes, "): ", errno_text(errno));
}

void Socket::set_nonblocking(bool on) {
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK)) != 0)
    BRAID_THROW(IoError, "fcntl(O_NONBLOCK): ", errno_text(errno));
}

std::string Socket::peer_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return format_address(reinterpret_cast<const sockaddr*>(&ss));
}

uint16_t Socket::local_port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    BRAID_THROW(IoError, "getsockname: ", errno_text(errno));
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::vector<uint8_t> read_announced(const Socket& socket, size_t bytes, Deadline deadline,
                                    std::string_view what) {
  constexpr size_t kFirstChunk = size_t{64} << 10;
  std::vector<uint8_t> out;
  while (out.size() < bytes) {
    const size_t have = out.size();
    out.resize(std::min(bytes, std::max(2 * have, kFirstChunk)));
    socket.read_exact(out.data() + have, out.size() - have, deadline, what);
  }
  return out;
}

HostPort parse_host_port(std::string_view s) {
  auto bad = [&](const char* why) {
    BRAID_THROW(Error, "address '", s, "': ", why,
                " (expected host:port, e.g. 10.0.0.1:29500 or [::1]:29500)");
  };
  HostPort hp;
  std::string_view port_text;
  if (s.starts_with('[')) {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) bad("missing ']' after the IPv6 address");
    hp.host = std::string(s.substr(1, close - 1));
    if (close + 1 >= s.size() || s[close + 1] != ':') bad("missing ':port' after ']'");
    port_text = s.substr(close + 2);
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) bad("missing ':port'");
    hp.host = std::string(s.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) bad("an IPv6 address must be in brackets");
    port_text = s.substr(colon + 1);
  }
  if (hp.host.empty()) bad("empty host");
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535)
    bad("the port is not a number in 0..65535");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

Socket listen_tcp(const std::string& host, uint16_t port, int backlog) {
  AddrInfoList list;
  if (const int rc = resolve(host, port, /*passive=*/true, list); rc != 0)
    BRAID_THROW(IoError, "cannot listen on ", display(host, port), ": cannot resolve '", host,
                "': ", ::gai_strerror(rc));
  int last_err = 0;
  for (const addrinfo* ai = list.head; ai; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      last_err = errno;
      continue;
    }
    const int on = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(s.fd(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    // Non-blocking so accept after a poll never hangs on a connection that was aborted
    // in between; accepted sockets do not inherit it.
    s.set_nonblocking(true);
    return s;
  }
  BRAID_THROW(IoError, "cannot listen on ", display(host, port), ": ", errno_text(last_err),
              last_err == EADDRINUSE ? " (another process holds that port; pick another)" : "");
}

Socket accept_tcp(const Socket& listener, Deadline deadline) {
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket s(fd);
      s.set_nonblocking(false);  // in case the listener's O_NONBLOCK was inherited
      return s;
    }
    const int err = errno;
    if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
    if (err != EAGAIN && err != EWOULDBLOCK)
      BRAID_THROW(IoError, "accept on port ", listener.local_port(), ": ", errno_text(err));
    if (!wait_ready(listener.fd(), POLLIN, deadline, "accept"))
      BRAID_THROW(TimeoutError, "accept on port ", listener.local_port(), ": no connection within ",
                  deadline.waited_seconds(), " s");
  }
}

Socket connect_tcp(const std::string& host, uint16_t port, Deadline deadline) {
  const std::string where = display(host, port);
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error;
  int attempts = 0;
  for (;;) {
    ++attempts;
    AddrInfoList list;
    const int rc = resolve(host, port, /*passive=*/false, list);
    if (rc != 0) {
      // A name that does not resolve yet (a pod's DNS record) may appear; a bad name fails
      // at the deadline with this message.
      if (rc != EAI_AGAIN && rc != EAI_NONAME && rc != EAI_FAIL)
        BRAID_THROW(IoError, "connect to ", where, ": cannot resolve '", host,
                    "': ", ::gai_strerror(rc));
      last_error = std::string("cannot resolve '") + host + "': " + ::gai_strerror(rc);
    } else {
      for (const addrinfo* ai = list.head; ai; ai = ai->ai_next) {
        // A silently dropped SYN must not spend the whole deadline on one address.
        const Deadline attempt = Deadline::after(std::min<std::chrono::milliseconds>(
            kMaxAttempt, std::chrono::milliseconds(deadline.remaining_ms())));
        int err = 0;
        Socket s = try_connect(ai, attempt, err);
        if (s.valid()) return s;
        last_error = errno_text(err);
        if (!is_transient_connect_error(err))
          BRAID_THROW(IoError, "connect to ", where, ": ", last_error);
      }
    }
    if (deadline.expired() || deadline.remaining_ms() == 0)
      BRAID_THROW(TimeoutError, "connect to ", where, ": no connection after ",
                  deadline.waited_seconds(), " s and ", attempts, " attempts (last: ", last_error,
                  "); is the server running and reachable?");
    const auto wait = std::min<std::chrono::milliseconds>(
        backoff, std::chrono::milliseconds(deadline.remaining_ms()));
    std::this_thread::sleep_for(wait);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace braid::comm
