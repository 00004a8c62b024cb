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
  // Keep what a restarted process needs to connect to this rank (shm: the anonymous
  // segment's fd stays open), so Transport::accept_rejoin can take it. Set in jobs whose
  // launcher restarts processes (a parameter-server job with --max-restarts).
  bool accept_rejoins = false;
};

// `store` should be private to this job and transport (see prefixed()); rank in [0, size).
std::shared_ptr<Transport> connect_transport(TransportKind kind, Store& store, int rank, int size,
                                             const Secret& secret, Deadline deadline,
                                             const TransportOptions& options = {});

// Restarted processes. A new process in the place of rank `rank` of a running job, whose
// transport connect_transport() made over `transport_store`: publishes itself in
// rejoin_store(transport_store, rank, incarnation) and returns at once, connected to
// nobody. Each peer that learns of it (a parameter server told of a restart, a worker
// whose server died) calls Transport::accept_rejoin(rank, *that store, ...); messages to or
// from a peer not yet connected wait for it, and a wait's timeout names it. `automatic`
// picks as the job's first processes did, from their host records. It accepts restarted
// peers itself (accept_rejoins is implied).
std::shared_ptr<Transport> connect_rejoining_transport(TransportKind kind,
                                                       std::shared_ptr<Store> transport_store,
                                                       int rank, int size, int incarnation,
                                                       const Secret& secret, Deadline deadline,
                                                       const TransportOptions& options = {});
// Where incarnation `incarnation` (restarts before it) of rank `rank` publishes itself.
std::shared_ptr<Store> rejoin_store(std::shared_ptr<Store> transport_store, int rank,
                                    int incarnation);
// Whether it has published itself there and is ready for its peers (accept_rejoin would not
// wait for it); one store round trip. A newcomer's transport marks it (shm at once, tcp at
// its first wait, where it can answer a connect).
bool rejoin_published(Store& rejoin_store);
void mark_rejoin_published(Store& rejoin_store);

}  // namespace braid::comm
