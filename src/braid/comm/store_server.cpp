// StoreServer: one background thread runs an event loop over the listener and every
// client with poll(), so no client (silent, slow or malicious) can hold up another.
//
// How it works: each connection moves through hello -> proof -> serving. The first two
// run the AuthHandshake of comm/auth.h without blocking, under an auth deadline; nothing
// a client sends is parsed as a request until its proof checks out. Serving reads one
// length-prefixed request, answers it, and reads the next only once the answer is
// flushed, so each client has at most one request in memory. The length is checked
// against the per-connection limit, and the body's buffer grows geometrically with the
// bytes that actually arrive: a client that announces 128 MiB and sends ten bytes costs
// 64 KiB, not 128 MiB. A get/wait whose keys are missing parks its client with the client's
// deadline; every mutation re-checks the parked clients, and the poll timeout is the
// nearest deadline, when the client is answered "timeout". stop() writes an eventfd the
// loop polls, then joins; closing the sockets turns clients' calls into IoError.
// Warnings about clients are rate-limited (a port scanner or a job with the wrong secret
// could otherwise fill the log): one per interval, then a count of what was held back.
//
// Invariant: everything but `wake` and `thread` belongs to the loop thread once it runs.
#include "comm/store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "comm/auth.h"
#include "comm/socket.h"
#include "comm/store_protocol.h"
#include "core/error.h"
#include "core/log.h"

namespace braid::comm {

namespace {

// Long enough for a slow network, short enough that a stuck connection is soon dropped.
constexpr auto kAuthTimeout = std::chrono::seconds(30);
// A client timeout beyond ten years counts as none, so time arithmetic cannot overflow.
constexpr int64_t kMaxTimeoutMs = int64_t{10} * 365 * 24 * 3600 * 1000;
constexpr auto kAcceptPauseOnFdLimit = std::chrono::milliseconds(100);
// A message's buffer starts at most this big and doubles as bytes arrive.
constexpr size_t kFirstReadBytes = size_t{64} << 10;

enum class Phase { hello, proof, serving };

struct Client {
  Socket socket;
  std::string peer;
  Phase phase = Phase::hello;
  std::unique_ptr<AuthHandshake> auth;  // until the proof checks out
  Clock::time_point auth_deadline;
  // The message being read: `in_want` bytes, of which `in_have` arrived; `in` grows with
  // them (make_room), never to the announced size up front.
  Bytes in;
  size_t in_want = 0;
  size_t in_have = 0;
  bool in_body = false;  // serving: reading a body (else its length prefix)
  // Bytes queued for the client.
  Bytes out;
  size_t out_done = 0;
  // A get/wait waiting for its keys.
  std::optional<StoreRequest> parked;
  Clock::time_point park_deadline = Clock::time_point::max();
  bool dead = false;

  bool has_output() const { return out_done < out.size(); }
  bool reading() const { return phase != Phase::serving || (!parked && !has_output()); }
  void expect(size_t bytes) {
    if (in.capacity() > kFirstReadBytes) in = Bytes();  // release a large request's memory
    in.resize(std::min(bytes, kFirstReadBytes));
    in_want = bytes;
    in_have = 0;
  }
  // Room for the next read: double what is there, at most what the message still needs.
  void make_room() {
    if (in_have < in.size()) return;
    in.resize(std::min(in_want, std::max(2 * in.size(), kFirstReadBytes)));
  }
  void queue(std::span<const uint8_t> bytes) {
    if (!has_output()) {
      out.clear();
      out_done = 0;
    }
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
};

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

}  // namespace

struct StoreServer::Impl {
  StoreServerOptions options;
  Socket listener;
  uint16_t port = 0;
  int wake = -1;
  std::thread thread;
  bool stopped = false;

  // Loop state.
  std::map<std::string, Bytes> values;
  std::vector<std::unique_ptr<Client>> clients;
  Clock::time_point accept_paused_until{};
  std::atomic<size_t> in_high_water{0};
  // Rate limiting of warnings: none logged before `warn_quiet_until`, only counted.
  Clock::time_point warn_quiet_until{};
  size_t warnings_held = 0;
  std::string last_held;

  void run();
  void accept_all();
  void on_events(Client& c, short revents);
  void read_some(Client& c);
  void advance(Client& c);
  void flush(Client& c);
  void handle(Client& c, StoreRequest request);
  void reply(Client& c, const StoreResponse& response);
  bool ready(const StoreRequest& r) const;
  void answer_parked(Client& c);
  void wake_parked();
  void expire(Clock::time_point now);
  void drop(Client& c, const std::string& why, bool warn);
  void warn(const std::string& message);
  void report_held_warnings(Clock::time_point now, bool final);
};

StoreServer::StoreServer(StoreServerOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.secret.empty())
    BRAID_THROW(Error,
                "store server: the job's secret is empty; set BRAID_SECRET or "
                "BRAID_SECRET_FILE (e.g. `openssl rand -hex 32`)");
  impl_->options = std::move(options);
  impl_->listener = listen_tcp(impl_->options.host, impl_->options.port);
  impl_->port = impl_->listener.local_port();
  impl_->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl_->wake < 0) BRAID_THROW(IoError, "store server: eventfd failed: ", std::strerror(errno));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

StoreServer::~StoreServer() {
  stop();
  if (impl_->wake >= 0) ::close(impl_->wake);
}

uint16_t StoreServer::port() const { return impl_->port; }

size_t StoreServer::receive_buffer_high_water() const {
  return impl_->in_high_water.load(std::memory_order_relaxed);
}

std::string StoreServer::address() const {
  const std::string& h = impl_->options.host;
  return (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(port());
}

void StoreServer::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  const uint64_t one = 1;
  // The eventfd counter cannot overflow from one write; EINTR is the only retry case.
  while (::write(impl_->wake, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

void StoreServer::Impl::run() {
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = Clock::now();
    // The nearest deadline bounds the wait.
    auto next = Clock::time_point::max();
    for (const auto& c : clients) {
      if (c->phase != Phase::serving) next = std::min(next, c->auth_deadline);
      if (c->parked) next = std::min(next, c->park_deadline);
    }
    const bool accepting = now >= accept_paused_until;
    if (!accepting) next = std::min(next, accept_paused_until);
    if (warnings_held > 0) next = std::min(next, warn_quiet_until);
    int timeout = -1;
    if (next != Clock::time_point::max()) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
      timeout = ms <= 0 ? 0 : ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms);
    }

    fds.clear();
    fds.push_back({wake, POLLIN, 0});
    fds.push_back({listener.fd(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const auto& c : clients) {
      short events = POLLRDHUP;
      if (c->reading()) events |= POLLIN;
      if (c->has_output()) events |= POLLOUT;
      fds.push_back({c->socket.fd(), events, 0});
    }
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      report_held_warnings(Clock::now(), true);
      log_warn("store server on port ", port, ": poll failed (", std::strerror(errno),
               "); the server stops");
      break;
    }
    if (n > 0) {
      if (fds[0].revents) break;  // stop()
      // Only the clients polled above have an entry; accept_all appends after them.
      const size_t polled = clients.size();
      for (size_t i = 0; i < polled; ++i)
        if (fds[i + 2].revents && !clients[i]->dead) on_events(*clients[i], fds[i + 2].revents);
      if (fds[1].revents) accept_all();
    }
    expire(Clock::now());
    std::erase_if(clients, [](const auto& c) { return c->dead; });
    report_held_warnings(Clock::now(), false);
  }
  report_held_warnings(Clock::now(), true);
  clients.clear();  // closes every connection: clients see EOF
  listener.close();
}

void StoreServer::Impl::accept_all() {
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        warn(detail::concat("store server on port ", port, ": cannot accept a connection (",
                            std::strerror(err), "); raise the open-file limit (ulimit -n)"));
        accept_paused_until = Clock::now() + kAcceptPauseOnFdLimit;
      }
      return;  // EAGAIN: accepted everything pending
    }
    auto c = std::make_unique<Client>();
    c->socket = Socket(fd);
    c->peer = c->socket.peer_address();
    try {
      c->socket.set_nodelay();
      c->auth = std::make_unique<AuthHandshake>(options.secret, AuthRole::server, kStoreAuthPurpose,
                                                c->peer);
    } catch (const std::exception& e) {
      warn(detail::concat("store server on port ", port, ": dropping connection from ", c->peer,
                          ": ", e.what()));
      continue;
    }
    c->auth_deadline = Clock::now() + kAuthTimeout;
    c->queue(c->auth->hello());
    c->expect(kAuthHelloBytes);
    clients.push_back(std::move(c));
    flush(*clients.back());
  }
}

void StoreServer::Impl::on_events(Client& c, short revents) {
  try {
    if (revents & POLLOUT) flush(c);
    if (!c.dead && c.reading() && (revents & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)))
      read_some(c);
    // Not reading (parked, or a reply pending) and the client hung up: nobody to answer.
    if (!c.dead && !c.reading() && (revents & (POLLHUP | POLLERR | POLLRDHUP)))
      drop(c, c.parked ? "disconnected while waiting for keys" : "disconnected", false);
  } catch (const std::exception& e) {
    // Broken protocol, failed authentication, or a reset: this client only.
    drop(c, e.what(), true);
  }
}

void StoreServer::Impl::read_some(Client& c) {
  while (!c.dead && c.reading()) {
    c.make_room();
    if (c.in.capacity() > in_high_water.load(std::memory_order_relaxed))
      in_high_water.store(c.in.capacity(), std::memory_order_relaxed);
    const ssize_t n = ::recv(c.socket.fd(), c.in.data() + c.in_have, c.in.size() - c.in_have, 0);
    if (n == 0) {
      const bool between = c.phase == Phase::serving && !c.in_body && c.in_have == 0;
      if (between) {
        drop(c, "disconnected", false);
      } else {
        drop(c,
             c.phase == Phase::serving
                 ? "disconnected in the middle of a request"
                 : "disconnected during authentication (does it have the job's secret?)",
             true);
      }
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      drop(c, std::string("connection failed: ") + std::strerror(errno), true);
      return;
    }
    c.in_have += static_cast<size_t>(n);
    if (c.in_have == c.in_want) advance(c);
  }
}

// A complete message has arrived for the client's current stage.
void StoreServer::Impl::advance(Client& c) {
  switch (c.phase) {
    case Phase::hello: {
      const auto proof = c.auth->respond(c.in);
      c.queue(proof);
      c.phase = Phase::proof;
      c.expect(kAuthProofBytes);
      flush(c);
      return;
    }
    case Phase::proof:
      c.auth->verify(c.in);
      c.auth.reset();
      c.phase = Phase::serving;
      c.expect(kStoreLengthBytes);
      log_debug("store server: ", c.peer, " authenticated");
      return;
    case Phase::serving:
      if (!c.in_body) {
        const size_t body = parse_store_length(c.in, SIZE_MAX, "store request");
        if (body > options.max_request_bytes)
          BRAID_THROW(Error, "it announced a request of ", body, " bytes, over the limit of ",
                      options.max_request_bytes,
                      " bytes per connection (StoreServerOptions::max_request_bytes); the "
                      "store holds small facts: keys up to ",
                      kMaxStoreKeyBytes, " bytes, values up to ", kMaxStoreValueBytes, " bytes");
        c.in_body = true;
        c.expect(body);
        if (body > 0) return;
        // An empty body is malformed; let the parser say so.
      }
      StoreRequest request = parse_request(c.in);
      c.in_body = false;
      c.expect(kStoreLengthBytes);
      handle(c, std::move(request));
      return;
  }
}

void StoreServer::Impl::flush(Client& c) {
  while (c.has_output()) {
    const ssize_t n = ::send(c.socket.fd(), c.out.data() + c.out_done, c.out.size() - c.out_done,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    drop(c, std::string("connection failed while answering: ") + std::strerror(errno),
         c.phase != Phase::serving);
    return;
  }
  // Release a large reply's memory once it is sent.
  c.out = Bytes();
  c.out_done = 0;
}

void StoreServer::Impl::reply(Client& c, const StoreResponse& response) {
  c.queue(encode_response(response));
  flush(c);
}

bool StoreServer::Impl::ready(const StoreRequest& r) const {
  for (const auto& k : r.keys)
    if (!values.count(k)) return false;
  return true;
}

void StoreServer::Impl::answer_parked(Client& c) {
  StoreRequest r = std::move(*c.parked);
  c.parked.reset();
  StoreResponse response;
  if (r.op == StoreOp::get) response.value = values.at(r.keys[0]);
  reply(c, response);
}

void StoreServer::Impl::wake_parked() {
  for (auto& c : clients)
    if (!c->dead && c->parked && ready(*c->parked)) answer_parked(*c);
}

void StoreServer::Impl::expire(Clock::time_point now) {
  for (auto& c : clients) {
    if (c->dead) continue;
    if (c->phase != Phase::serving && now >= c->auth_deadline) {
      drop(*c, "did not authenticate within " + std::to_string(kAuthTimeout.count()) + " s", true);
    } else if (c->parked && now >= c->park_deadline) {
      log_debug("store server: ", store_op_name(c->parked->op), " of ",
                quoted_keys(c->parked->keys), " from ", c->peer, " timed out");
      c->parked.reset();
      StoreResponse response;
      response.status = StoreStatus::timeout;
      reply(*c, response);
    }
  }
}

void StoreServer::Impl::drop(Client& c, const std::string& why, bool warn) {
  if (c.dead) return;
  if (warn) {
    this->warn(
        detail::concat("store server on port ", port, ": dropping client ", c.peer, ": ", why));
  } else {
    log_debug("store server: client ", c.peer, " ", why);
  }
  c.dead = true;
  c.parked.reset();
  c.socket.close();
  c.in = Bytes();
  c.out = Bytes();
  c.out_done = 0;
}

void StoreServer::Impl::warn(const std::string& message) {
  const auto now = Clock::now();
  if (now < warn_quiet_until) {
    ++warnings_held;
    last_held = message;
    return;
  }
  log_warn(message);
  warn_quiet_until = now + options.warning_interval;
}

// Says how many warnings were held back once their interval is over (or, `final`, now).
void StoreServer::Impl::report_held_warnings(Clock::time_point now, bool final) {
  if (warnings_held == 0 || (!final && now < warn_quiet_until)) return;
  log_warn("store server on port ", port, ": ", warnings_held, " more warning",
           warnings_held == 1 ? "" : "s", " in the last ",
           std::chrono::duration<double>(options.warning_interval).count(),
           " s, not shown one by one; the last: ", last_held);
  warnings_held = 0;
  last_held.clear();
  warn_quiet_until = now + options.warning_interval;
}

void StoreServer::Impl::handle(Client& c, StoreRequest r) {
  const std::string key = r.keys.empty() ? std::string() : r.keys[0];
  StoreResponse response;
  auto refuse = [&](std::string message) {
    response.status = StoreStatus::error;
    response.value.assign(message.begin(), message.end());
  };
  bool changed = false;
  switch (r.op) {
    case StoreOp::set:
      values[key] = std::move(r.values[0]);
      changed = true;
      break;
    case StoreOp::add: {
      int64_t v = 0;
      if (auto it = values.find(key); it != values.end()) {
        const char* first = reinterpret_cast<const char*>(it->second.data());
        const char* last = first + it->second.size();
        const auto [end, ec] = std::from_chars(first, last, v);
        if (ec != std::errc() || end != last || first == last) {
          refuse("store key '" + key + "' does not hold an integer, so add() cannot update it");
          break;
        }
      }
      if (__builtin_add_overflow(v, r.delta, &v)) {
        refuse("add() on store key '" + key + "' would overflow a 64-bit integer");
        break;
      }
      const std::string s = std::to_string(v);
      values[key] = Bytes(s.begin(), s.end());
      response.number = v;
      changed = true;
      break;
    }
    case StoreOp::compare_set: {
      auto it = values.find(key);
      const bool matches = it == values.end() ? r.values[0].empty() : r.values[0] == it->second;
      if (matches) {
        values[key] = std::move(r.values[1]);
        changed = true;
      }
      if (auto now = values.find(key); now != values.end()) response.value = now->second;
      break;
    }
    case StoreOp::remove:
      response.number = values.erase(key) > 0 ? 1 : 0;
      break;
    case StoreOp::get:
    case StoreOp::wait:
      if (ready(r)) {
        if (r.op == StoreOp::get) response.value = values.at(key);
        break;
      }
      if (r.timeout_ms == 0) {
        response.status = StoreStatus::timeout;
        break;
      }
      c.park_deadline = r.timeout_ms < 0 || r.timeout_ms > kMaxTimeoutMs
                            ? Clock::time_point::max()
                            : Clock::now() + std::chrono::milliseconds(r.timeout_ms);
      c.parked = std::move(r);
      return;
  }
  reply(c, response);
  if (changed) wake_parked();
}

}  // namespace braid::comm
