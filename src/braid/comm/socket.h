// TCP sockets for comm/: an RAII owner of one socket fd with blocking-with-deadline I/O,
// and the listen / accept / connect helpers the store and the TCP transport share. Every
// call that can block takes a Deadline; a missed deadline is a TimeoutError, a peer that
// goes away an IoError, both naming the operation and the peer.
//
// Thread safety: a Socket is owned by one thread at a time; write_all and read_exact are
// const so one reader and one writer thread may use the same socket concurrently.
// SIGPIPE is never raised (MSG_NOSIGNAL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/deadline.h"

namespace braid::comm {

class Socket {  // RAII owner of a TCP socket fd; move-only
 public:
  Socket() = default;
  explicit Socket(int fd);
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const;
  bool valid() const;
  void close();

  // Blocking-with-deadline I/O (poll + retry on EINTR/EAGAIN, MSG_NOSIGNAL). `what` names
  // the operation and peer for errors, e.g. "store request to 127.0.0.1:2900".
  // EOF or ECONNRESET -> IoError "...: connection closed by peer"; deadline -> TimeoutError.
  void write_all(const void* data, size_t bytes, Deadline deadline, std::string_view what) const;
  void read_exact(void* data, size_t bytes, Deadline deadline, std::string_view what) const;

  void set_nodelay();
  void set_buffer_sizes(int bytes);  // SO_SNDBUF and SO_RCVBUF
  void set_nonblocking(bool on);
  std::string peer_address() const;  // "host:port"
  uint16_t local_port() const;

 private:
  int fd_ = -1;
};

// Reads exactly `bytes` that the peer announced (a length prefix) into a buffer that grows
// geometrically as they arrive, so a forged length costs memory only once it is sent.
// Errors as read_exact. (The caller still checks `bytes` against its limit first.)
std::vector<uint8_t> read_announced(const Socket& socket, size_t bytes, Deadline deadline,
                                    std::string_view what);

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// "host:port" or "[::1]:port"; braid::Error naming `s` otherwise.
HostPort parse_host_port(std::string_view s);

// A listening socket bound to host:port with SO_REUSEADDR; port 0 = an ephemeral port
// (see local_port()).
Socket listen_tcp(const std::string& host, uint16_t port, int backlog = 128);
// The next connection on `listener`, or TimeoutError at the deadline.
Socket accept_tcp(const Socket& listener, Deadline deadline);
// Resolves host (getaddrinfo) and connects, retrying refused/unreachable connects with
// backoff until the deadline (the listener may start after its clients).
Socket connect_tcp(const std::string& host, uint16_t port, Deadline deadline);

}  // namespace braid::comm
