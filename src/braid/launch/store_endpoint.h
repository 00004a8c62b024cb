// Which agent of a multi-host elastic job hosts its store (`braid launch --nnodes ...
// --rdzv-endpoint HOST:PORT`): the one that can bind HOST:PORT, as torchrun's c10d
// rendezvous decides. On the host whose address HOST names, the first agent to bind the
// port hosts the store (and the job's round coordinator); every other agent, there or on
// another host, connects to it. So any agent may be started first, and two agents on one
// machine (HOST a loopback address) share one endpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/secret.h"
#include "comm/store_server.h"

namespace braid::launch {

// A listening store when HOST is an address of this machine and nobody holds PORT there
// yet; nullptr when another process holds the port or HOST is not this machine's. IoError
// for anything else (HOST cannot be resolved, a port this user may not bind), naming the
// endpoint.
std::unique_ptr<comm::StoreServer> host_store_if_mine(const std::string& host, uint16_t port,
                                                      const comm::Secret& secret);

}  // namespace braid::launch
