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

// Set by connect_rejoining_transport once the newcomer's records are all in place.
constexpr const char* kPublishedKey = "published";

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

std::shared_ptr<Store> rejoin_store(std::shared_ptr<Store> transport_store, int rank,
                                    int incarnation) {
  return prefixed(std::move(transport_store),
                  "rejoin/" + std::to_string(rank) + "." + std::to_string(incarnation));
}

bool rejoin_published(Store& rejoin_store) { return rejoin_store.add(kPublishedKey, 0) > 0; }

void mark_rejoin_published(Store& rejoin_store) { rejoin_store.add(kPublishedKey, 1); }

std::shared_ptr<Transport> connect_rejoining_transport(TransportKind kind,
                                                       std::shared_ptr<Store> transport_store,
                                                       int rank, int size, int incarnation,
                                                       const Secret& secret, Deadline deadline,
                                                       const TransportOptions& options) {
  BRAID_CHECK(size >= 2 && rank >= 0 && rank < size && incarnation > 0,
              "connect_rejoining_transport: rank ", rank, " of ", size, ", incarnation ",
              incarnation);
  if (kind == TransportKind::automatic) {
    // The job's first processes chose shm only when all were on one host; their records
    // are still in the store (this rank's earlier process's too, on the same host).
    const std::string mine = host_identity();
    kind = TransportKind::shm;
    for (int p = 0; p < size && kind == TransportKind::shm; ++p)
      if (transport_store->get_string("host/" + std::to_string(p), deadline) != mine)
        kind = TransportKind::tcp;
  }
  std::shared_ptr<Store> store = rejoin_store(transport_store, rank, incarnation);
  std::shared_ptr<Transport> t;
  if (kind == TransportKind::tcp) {
    t = connect_rejoining_tcp_transport(store, rank, size, secret, options);
  } else {
    t = connect_rejoining_shm_transport(store, rank, size, options);
    mark_rejoin_published(*store);
  }
  log_debug("restarted rank ", rank, " (restart ", incarnation, "): ", transport_kind_name(kind),
            " transport published; waiting for its peers to connect");
  return t;
}

}  // namespace braid::comm
