// The TCP transport, for ranks across hosts.
//
// How it works: every rank listens on an ephemeral port and publishes advertise_host:port
// in the store; each rank connects to every lower rank and accepts every higher one, so
// each pair has one connection. A connection is authenticated with the job's secret
// (comm/auth.h) before anything else is read, then the two sides exchange ranks; a
// connection that fails authentication is refused and logged, and the wait goes on.
// Sockets are TCP_NODELAY with 4 MiB buffers and non-blocking: wait() drives every pending
// send (several queued messages per sendmsg) and receive in one poll() loop, so traffic
// flows both ways at once. A message is a FrameHeader then its payload; each header is
// validated before anything is allocated for it, plain receives read straight into their
// destination, reductions go through a per-peer buffer, and early messages are buffered
// in blocks that grow as bytes arrive (never to a size a header merely claims). End of
// stream, a reset or a corrupt frame fails every wait on that peer with PeerError naming
// it; a clean shutdown sends a goodbye frame first.
//
// Restarted processes: a new process in a dead rank's place listens and publishes its
// address in its rejoin store; each peer that learns of it closes what is left of the old
// connection and connects (accept_rejoin, the same authentication and hello), and the
// newcomer takes those connections in its wait loop as they come (a peer connects only once
// the newcomer has begun waiting: its published mark comes then).
#pragma once

#include <memory>
#include <string>

#include "comm/deadline.h"
#include "comm/secret.h"
#include "comm/store.h"
#include "comm/transport.h"
#include "comm/transport_factory.h"

namespace braid::comm {

// Collective over the ranks sharing `store`; returns when this rank is connected to every
// other. AuthError when a peer does not know `secret`; TimeoutError at the deadline.
std::shared_ptr<Transport> connect_tcp_transport(Store& store, int rank, int size,
                                                 const Secret& secret, Deadline deadline,
                                                 const TransportOptions& options = {});

// A restarted process in rank `rank`'s place (connect_rejoining_transport): returns at
// once, listening; peers connect as they learn of it. A peer's connect needs this process
// to answer from its wait loop, so it marks itself published (mark_rejoin_published) at
// its first wait, not before.
std::shared_ptr<Transport> connect_rejoining_tcp_transport(std::shared_ptr<Store> rejoin_store,
                                                           int rank, int size, const Secret& secret,
                                                           const TransportOptions& options = {});

// The address peers should use to reach this rank: options.advertise_host, else
// listen_host when it names one interface, else the local address of the route to
// options.route_probe_host (launch/ names the store's host), else 127.0.0.1.
std::string tcp_advertise_host(const TransportOptions& options);

}  // namespace braid::comm
