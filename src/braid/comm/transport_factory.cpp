// connect_transport: picks shm or tcp. `automatic` has every rank publish its host identity
// (hostname and kernel boot id, so two containers with one hostname on different machines,
// or one machine's two network names, are told apart) and uses shm only when all agree.
#include "comm/transport_factory.h"

#include <unistd.h>

#include <fstream>

#include "comm/shm_transport.h"
#include "comm/tcp_transport.h"
#include "core/error.h"
#include "core/log.h"

namespace braid::comm {

namespace {

std::string host_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  return std::string(host) + "/" + boot;
}

}  // namespace

std::string_view transport_kind_name(TransportKind k) {
  switch (k) {
    case TransportKind::automatic:
      return "auto";
    case TransportKind::shm:
      return "shm";
    case TransportKind::tcp:
      return "tcp";
  }
  return "unknown";
}

TransportKind parse_transport_kind(std::string_view name) {
  if (name == "auto" || name == "automatic") return TransportKind::automatic;
  if (name == "shm") return TransportKind::shm;
  if (name == "tcp") return TransportKind::tcp;
  BRAID_THROW(Error, "unknown transport '", name, "': expected auto, shm or tcp");
}

std::shared_ptr<Transport> connect_transport(TransportKind kind, Store& store, int rank, int size,
                                             const Secret& secret, Deadline deadline,
                                             const TransportOptions& options) {
  BRAID_CHECK(size >= 1 && rank >= 0 && rank < size, "connect_transport: rank ", rank,
              " of a job of ", size, " ranks");
  if (kind == TransportKind::automatic) {
    const std::string mine = host_identity();
    store.set("host/" + std::to_string(rank), mine);
    kind = TransportKind::shm;
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      // All ranks agree: each sees a host unlike its own exactly when not all are alike.
      if (store.get_string("host/" + std::to_string(p), deadline) != mine) {
        kind = TransportKind::tcp;
        break;
      }
    }
    log_debug("rank ", rank, ": ", transport_kind_name(kind), " transport (",
              kind == TransportKind::shm ? "every rank on this host" : "ranks on several hosts",
              ")");
  }
  if (kind == TransportKind::shm)
    return connect_shm_transport(store, rank, size, deadline, options);
  return connect_tcp_transport(store, rank, size, secret, deadline, options);
}

}  // namespace braid::comm
