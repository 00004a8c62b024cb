// A trial bind (SO_REUSEADDR, as the store's own listener sets it, so connections of an
// earlier store lingering in TIME_WAIT do not count) tells the three cases apart:
// EADDRINUSE (someone listens there: another agent), EADDRNOTAVAIL (not this machine's
// address), success (ours to host). Two agents racing on one machine both see success; the
// loser's listen then fails with EADDRINUSE and it connects like the others.
#include "launch/store_endpoint.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace braid::launch {
namespace {

enum class Bind { free, taken, not_here };

Bind try_bind(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0)
    BRAID_THROW(IoError, "--rdzv-endpoint ", host, ":", port, ": cannot resolve '", host,
                "': ", ::gai_strerror(rc));
  Bind result = Bind::not_here;
  int other = 0;
  for (const addrinfo* ai = list; ai != nullptr && result == Bind::not_here; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0)
      result = Bind::free;
    else if (errno == EADDRINUSE)
      result = Bind::taken;
    else if (errno != EADDRNOTAVAIL && errno != EAFNOSUPPORT)
      other = errno;
    ::close(fd);
  }
  ::freeaddrinfo(list);
  if (result == Bind::not_here && other != 0)
    BRAID_THROW(IoError, "--rdzv-endpoint ", host, ":", port,
                ": cannot bind it to host the "
                "job's store: ",
                std::strerror(other), " (pick a port above 1023, or one free)");
  return result;
}

}  // namespace

std::unique_ptr<comm::StoreServer> host_store_if_mine(const std::string& host, uint16_t port,
                                                      const comm::Secret& secret) {
  if (try_bind(host, port) != Bind::free) return nullptr;
  comm::StoreServerOptions options;
  options.host = host;
  options.port = port;
  options.secret = secret;
  try {
    return std::make_unique<comm::StoreServer>(std::move(options));
  } catch (const IoError&) {
    if (try_bind(host, port) == Bind::taken) return nullptr;  // another agent won the race
    throw;
  }
}

}  // namespace braid::launch
