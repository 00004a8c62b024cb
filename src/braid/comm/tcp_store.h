// The client of StoreServer: a Store over one authenticated TCP connection. Thread-safe:
// each concurrent call borrows its own authenticated connection, so a waiting get never
// holds up another thread's set. A server that goes away turns every call
// into an IoError naming the address.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/secret.h"
#include "comm/store.h"

namespace braid::comm {

struct StoreClientOptions {
  // The longest a call that does not wait for keys (set, add, compare_set, remove) may take,
  // and the longest opening a further connection may take. A caller that must notice a cut
  // link within seconds (a launcher's heartbeat) passes its own; past it the call throws
  // TimeoutError and the next call tries a fresh connection.
  std::chrono::milliseconds call_timeout = kDefaultTimeout;
};

// Connects to host:port, retrying until `deadline` (the server may start after its
// clients), then authenticates with `secret`. A wrong secret is an Error saying so; the
// server closes the connection without parsing anything.
std::shared_ptr<Store> connect_store(const std::string& host, uint16_t port, const Secret& secret,
                                     Deadline deadline, StoreClientOptions options = {});

}  // namespace braid::comm
