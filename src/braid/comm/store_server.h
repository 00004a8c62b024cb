// The TCP rendezvous store's server: hosted by `braid launch`, by rank 0, or standalone by
// `braid store`. A background thread accepts connections, authenticates each client with
// the job's secret (comm/auth.h) before parsing any request, and serves set / get / add /
// compare_set / wait / remove; waits are parked server-side and answered when the keys
// appear or the client's deadline passes. Binds to loopback unless told otherwise.
//
// Thread safety: construct, port(), address() and stop() from one thread. Lifetime:
// the destructor stops the server and closes every connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/secret.h"

namespace braid::comm {

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // interface to bind; "0.0.0.0" for every interface
  uint16_t port = 0;               // 0 = an ephemeral port, see port()
  Secret secret;                   // required: an empty secret is refused
};

class StoreServer {
 public:
  explicit StoreServer(StoreServerOptions options);  // listening when it returns
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;
  std::string address() const;  // "host:port"
  void stop();                  // idempotent

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::comm
