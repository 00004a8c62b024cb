// connect_store(): the Store client of StoreServer.
//
// Each call borrows an authenticated connection from a small pool, sends one request and
// reads its answer (store_protocol.h). A call that finds every connection busy opens
// another, so a get() parked on the server never holds up a set() from another thread of
// the same process (which could otherwise deadlock a rendezvous). Once any connection
// sees the server go away, the store is marked lost and every later call fails at once.
#include "comm/tcp_store.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "comm/auth.h"
#include "comm/socket.h"
#include "comm/store_protocol.h"
#include "core/error.h"

namespace braid::comm {

namespace {

// How long a get/wait reads past its own deadline before it blames the server: the
// server answers "timeout" at the deadline, so this only covers a stuck server.
constexpr auto kReplyGrace = std::chrono::seconds(10);
// For connections opened after the first, when the server is known to be up.
constexpr auto kExtraConnectTimeout = std::chrono::seconds(10);

std::string quoted_keys(std::span<const std::string> keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

class TcpStore : public Store {
 public:
  TcpStore(std::string host, uint16_t port, const Secret& secret, Deadline deadline,
           StoreClientOptions options)
      : host_(std::move(host)),
        port_(port),
        secret_(secret),
        options_(options),
        address_((host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" +
                 std::to_string(port)) {
    idle_.push_back(open(deadline));
  }

  using Store::get;
  using Store::set;

  void set(const std::string& key, std::span<const uint8_t> value) override {
    StoreRequest r{StoreOp::set, {key}, {Bytes(value.begin(), value.end())}};
    call(r, Deadline::never());
  }

  Bytes get(const std::string& key, Deadline deadline) override {
    StoreRequest r{StoreOp::get, {key}, {}};
    return call(r, deadline).value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    StoreRequest r{StoreOp::add, {key}, {}, delta};
    return call(r, Deadline::never()).number;
  }

  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override {
    StoreRequest r{
        StoreOp::compare_set,
        {key},
        {Bytes(expected.begin(), expected.end()), Bytes(desired.begin(), desired.end())}};
    return call(r, Deadline::never()).value;
  }

  void wait(std::span<const std::string> keys, Deadline deadline) override {
    StoreRequest r{StoreOp::wait, std::vector<std::string>(keys.begin(), keys.end()), {}};
    call(r, deadline);
  }

  bool remove(const std::string& key) override {
    StoreRequest r{StoreOp::remove, {key}, {}};
    return call(r, Deadline::never()).number != 0;
  }

 private:
  Socket open(Deadline deadline) const {
    Socket s = connect_tcp(host_, port_, deadline);
    s.set_nodelay();
    authenticate(s, secret_, AuthRole::client, kStoreAuthPurpose, deadline);
    return s;
  }

  Socket borrow() {
    {
      std::lock_guard lock(mutex_);
      if (!lost_.empty())
        BRAID_THROW(IoError, "store at ", address_, ": the connection to the server was lost (",
                    lost_, ")");
      if (!idle_.empty()) {
        Socket s = std::move(idle_.back());
        idle_.pop_back();
        return s;
      }
    }
    try {
      return open(Deadline::after(
          std::min<std::chrono::milliseconds>(kExtraConnectTimeout, options_.call_timeout)));
    } catch (const AuthError&) {
      throw;
    } catch (const Error& e) {
      mark_lost(e.what());
      BRAID_THROW(IoError, "store at ", address_, ": cannot open another connection: ", e.what());
    }
  }

  void mark_lost(const std::string& why) {
    std::lock_guard lock(mutex_);
    if (lost_.empty()) lost_ = why;
  }

  // One request and its response. `deadline` is the caller's, for get and wait only.
  StoreResponse call(StoreRequest& request, Deadline deadline) {
    const bool waits = request.op == StoreOp::get || request.op == StoreOp::wait;
    request.timeout_ms = !waits ? -1 : deadline.is_never() ? -1 : deadline.remaining_ms();
    const Bytes message = encode_request(request);  // Error on oversized keys or values
    const Deadline io =
        !waits ? Deadline::after(options_.call_timeout)
        : deadline.is_never()
            ? Deadline::never()
            : Deadline::after(std::chrono::milliseconds(deadline.remaining_ms()) + kReplyGrace);
    const std::string what = "store " + std::string(store_op_name(request.op)) + " to " + address_;
    Socket s = borrow();
    StoreResponse response;
    try {
      s.write_all(message.data(), message.size(), io, what);
      uint8_t prefix[kStoreLengthBytes];
      s.read_exact(prefix, sizeof(prefix), io, what);
      const Bytes body =
          read_announced(s, parse_store_length(prefix, kMaxStoreResponseBytes, what), io, what);
      response = parse_response(body);
    } catch (const TimeoutError&) {
      throw;  // the server is stuck, not gone; this connection is dropped with `s`
    } catch (const IoError& e) {
      mark_lost(e.what());
      throw;
    } catch (const Error& e) {
      mark_lost(e.what());
      BRAID_THROW(IoError, what, ": the server sent a malformed response: ", e.what());
    }
    {
      std::lock_guard lock(mutex_);
      idle_.push_back(std::move(s));
    }
    switch (response.status) {
      case StoreStatus::ok:
        return response;
      case StoreStatus::timeout:
        BRAID_THROW(TimeoutError, "store at ", address_, ": waited ", deadline.waited_seconds(),
                    " s for ", quoted_keys(request.keys), " and they were not all set");
      case StoreStatus::error:
        BRAID_THROW(Error, "store at ", address_, ": ",
                    std::string(response.value.begin(), response.value.end()));
    }
    BRAID_THROW(Error, "store at ", address_, ": unknown response status");
  }

  const std::string host_;
  const uint16_t port_;
  const Secret secret_;
  const StoreClientOptions options_;
  const std::string address_;
  std::mutex mutex_;
  std::vector<Socket> idle_;  // guarded by mutex_
  std::string lost_;          // guarded by mutex_; non-empty once the server is gone
};

}  // namespace

std::shared_ptr<Store> connect_store(const std::string& host, uint16_t port, const Secret& secret,
                                     Deadline deadline, StoreClientOptions options) {
  if (secret.empty())
    BRAID_THROW(Error, "store at ", host, ":", port,
                ": the job's secret is empty; set BRAID_SECRET or BRAID_SECRET_FILE to the "
                "secret the store was started with");
  return std::make_shared<TcpStore>(host, port, secret, deadline, options);
}

}  // namespace braid::comm
