// The client of StoreServer: a Store over one authenticated TCP connection. Thread-safe
// (requests are serialised on the connection). A server that goes away turns every call
// into an IoError naming the address.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/secret.h"
#include "comm/store.h"

namespace braid::comm {

// Connects to host:port, retrying until `deadline` (the server may start after its
// clients), then authenticates with `secret`. A wrong secret is an Error saying so; the
// server closes the connection without parsing anything.
std::shared_ptr<Store> connect_store(const std::string& host, uint16_t port, const Secret& secret,
                                     Deadline deadline);

}  // namespace braid::comm
