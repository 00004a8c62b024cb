// The shared-memory transport, for ranks on one host.
//
// How it works: every rank creates one segment holding its doorbell and one inbound ring
// per peer (shm_ring.h); every peer maps the ring it writes plus the owner's header page.
// When all ranks share a pid namespace (the usual case) a segment is a memfd that peers
// open through /proc/<pid>/fd: it never has a name, so nothing is left in /dev/shm however
// the job ends, even when every rank is killed during setup. Otherwise it is a /dev/shm
// name, unlinked once every peer has mapped it. The ranks first exchange (pid, pid
// namespace, boot id) through the store to choose, then their segments' locators. A message is a
// FrameHeader (padded to 64 bytes) then its payload, streamed through the ring in pieces of up to
// 64 KiB so a message may be larger than the ring and the receiver works on one piece while
// the sender writes the next. A sender that finds its ring drained starts the next message
// at the ring's beginning again, so the bytes in use stay in cache (a 4 KiB message costs
// well under a microsecond each way). The receiver validates each header, then copies or reduces
// straight from the ring into the posted destination. A message whose receive is not yet
// posted stays parked in the ring (costing nothing) unless the stream must move past it:
// a later receive from that peer or from any rank is posted (an any-rank receive keeps
// every live peer's stream moving), or the ring is full while this rank has nothing else
// to do (the sender may be stalled on it); then it is buffered (ReceiveMatcher).
//
// Waiting: isend copies the first piece at once; wait() moves every pending send and
// receive a piece at a time, interleaved, so a ring step's send and receive progress
// together and each piece is reduced while it is still in the writer's cache. When nothing moves it
// spins briefly, then yields the core, then sleeps on its futex doorbell, which peers ring after
// writing to it or freeing space it waits for; with more ranks than cores it spins less. While it
// waits it watches the peers it waits on (pidfd; all of them for a receive from any rank),
// so a peer killed with SIGKILL fails the wait with PeerError within about 0.1 s (an
// any-rank receive: once every other peer is gone).
//
// Restarted processes (TransportOptions::accept_rejoins): every rank keeps its anonymous
// segment's fd open, so a new process in a dead rank's place can map it. The newcomer
// publishes its own segment and waits, connected to nobody; a peer that learns of it
// (accept_rejoin) drops the dead process's ring state, maps the newcomer's segment,
// publishes its own records beside the newcomer's and sets the `attached` word of the ring
// it writes there, ringing the newcomer's doorbell; the newcomer then maps that peer back.
// A newcomer's wait never blocks on a peer that has not attached; it times out naming it.
// Needs every rank in one pid namespace (segments found by their fds).
//
// Tuning (for benchmarks): TransportOptions::shm_spin and shm_yield (launch/ reads them
// from BRAID_SHM_SPIN_US and BRAID_SHM_YIELD_US) override how long an idle wait spins, and
// then yields, before it sleeps.
#pragma once

#include <memory>

#include "comm/deadline.h"
#include "comm/store.h"
#include "comm/transport.h"
#include "comm/transport_factory.h"

namespace braid::comm {

// Collective over the ranks sharing `store`; returns when every rank has mapped its rings.
// IoError when /dev/shm is missing or full or a peer is on another host; TimeoutError at
// the deadline.
std::shared_ptr<Transport> connect_shm_transport(Store& store, int rank, int size,
                                                 Deadline deadline,
                                                 const TransportOptions& options = {});

// A restarted process in rank `rank`'s place (connect_rejoining_transport): publishes
// itself in `rejoin_store`, which it keeps to read the records of the peers that attach.
std::shared_ptr<Transport> connect_rejoining_shm_transport(std::shared_ptr<Store> rejoin_store,
                                                           int rank, int size,
                                                           const TransportOptions& options = {});

}  // namespace braid::comm
