// The TCP rendezvous store's server: hosted by `braid launch`, by rank 0, or standalone by
// `braid store`. A background thread accepts connections, authenticates each client with
// the job's secret (comm/auth.h) before parsing any request, and serves set / get / add /
// compare_set / wait / remove; waits are parked server-side and answered when the keys
// appear or the client's deadline passes. Binds to loopback unless told otherwise.
//
// Thread safety: construct, port(), address() and stop() from one thread. Lifetime:
// the destructor stops the server and closes every connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/secret.h"
#include "comm/store_protocol.h"

namespace braid::comm {

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // interface to bind; "0.0.0.0" for every interface
  uint16_t port = 0;               // 0 = an ephemeral port, see port()
  Secret secret;                   // required: an empty secret is refused
  // The largest request one connection may announce. Its buffer grows only as the bytes
  // arrive, so an announced length costs nothing until it is sent; past this limit the
  // connection is dropped with a warning naming the client and the limit.
  size_t max_request_bytes = kMaxStoreRequestBytes;
  // Warnings about clients (refused, dropped) are logged at most once per interval; the
  // next one, or stop(), says how many were held back.
  std::chrono::milliseconds warning_interval = std::chrono::minutes(1);
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

  // The largest receive buffer any connection has held so far, in bytes (for tests of
  // what an announced length may cost). Any thread.
  size_t receive_buffer_high_water() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::comm
