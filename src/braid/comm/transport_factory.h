// Builds the Transport of one rank of a job: every rank calls connect_transport() with the
// same store and kind; connections are set up through the store and authenticated with
// the job's secret before any frame is parsed.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "comm/deadline.h"
#include "comm/secret.h"
#include "comm/store.h"
#include "comm/transport.h"

namespace braid::comm {

enum class TransportKind {
  automatic,  // shm when every rank is on this host, tcp otherwise
  shm,        // ring buffers in /dev/shm; all ranks on one host
  tcp,        // TCP between every pair
};
std::string_view transport_kind_name(TransportKind k);
// Throws braid::Error listing the accepted names ("auto", "shm", "tcp").
TransportKind parse_transport_kind(std::string_view name);

// Every field has a default that works; launch/ fills some from the environment
// (launch/comm_env.h), since comm/ reads none.
struct TransportOptions {
  // tcp: the interface to listen on, and the address peers use to reach this rank
  // (tcp_advertise_host() says how an empty one is worked out).
  std::string listen_host = "0.0.0.0";
  std::string advertise_host;
  // tcp: a host the others reach too (the store's): with advertise_host empty and a
  // wildcard listen_host, this rank advertises the local address of its route there.
  std::string route_probe_host;
  // shm: bytes of each directed ring (rounded to pages; allocated and touched once).
  size_t shm_ring_bytes = size_t{4} << 20;
  // shm: how long an idle wait spins on the rings, then yields the core, before it sleeps
  // on its doorbell. Unset: chosen from ranks per core (shorter when oversubscribed).
  std::optional<std::chrono::microseconds> shm_spin;
  std::optional<std::chrono::microseconds> shm_yield;
  // Bytes a peer may send ahead of the matching receive before the job fails.
  size_t max_buffered_bytes = size_t{256} << 20;
};

// `store` should be private to this job and transport (see prefixed()); rank in [0, size).
std::shared_ptr<Transport> connect_transport(TransportKind kind, Store& store, int rank, int size,
                                             const Secret& secret, Deadline deadline,
                                             const TransportOptions& options = {});

}  // namespace braid::comm
