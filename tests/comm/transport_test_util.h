// Helpers for the transport tests: ranks as threads over a MemoryStore, ranks as forked
// processes over a real TCP store, and deterministic payloads to check bytes against.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/memory_store.h"
#include "comm/secret.h"
#include "comm/store_server.h"
#include "comm/tcp_store.h"
#include "comm/transport.h"

namespace braid::comm::testing {

using namespace std::chrono_literals;

inline Deadline soon() { return Deadline::after(60s); }

inline bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// Byte i of the message `seed` (say sender, receiver and size mixed), never all zero.
inline std::vector<uint8_t> pattern(uint64_t seed, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

// Runs fn(rank) for rank in [0, n) on n threads; rethrows the first exception.
inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

using World = std::vector<std::shared_ptr<Transport>>;
using Connect = std::function<std::shared_ptr<Transport>(Store&, int rank, int size)>;

// n transports, one per thread-rank, connected through one MemoryStore.
inline World connect_world(const Connect& connect, int n) {
  MemoryStore store;
  World world(static_cast<size_t>(n));
  run_threads(n, [&](int r) { world[static_cast<size_t>(r)] = connect(store, r, n); });
  return world;
}

inline Secret test_secret() { return Secret::from_hex(std::string(64, '5')); }

// Ranks first..n-1 as forked processes (by default 1..n-1, rank 0 being the test process).
// Construct it while the test process has one thread (fork copies only the caller). Each
// child waits for the store's port on a pipe, connects, runs child(rank, store) and exits
// 0, or prints the error and exits 1. The parent hosts the store (after forking, so no
// thread is copied).
class ForkedRanks {
 public:
  using Child = std::function<void(int rank, Store& store)>;
  ForkedRanks(int n, const Child& child, int first = 1) : n_(n), first_(first) {
    for (int r = first; r < n; ++r) {
      int fds[2];
      if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("fork failed");
      if (pid == 0) {
        ::close(fds[1]);
        int code = 1;
        try {
          uint16_t port = 0;
          if (::read(fds[0], &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port)))
            throw std::runtime_error("no store port from the parent");
          auto store = connect_store("127.0.0.1", port, test_secret(), soon());
          child(r, *store);
          code = 0;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "forked rank %d failed: %s\n", r, e.what());
        }
        std::fflush(nullptr);
        ::_exit(code);
      }
      ::close(fds[0]);
      pids_.push_back(pid);
      pipes_.push_back(fds[1]);
    }
    StoreServerOptions options;
    options.secret = test_secret();
    server_ = std::make_unique<StoreServer>(options);
    const uint16_t port = server_->port();
    for (const int fd : pipes_) {
      if (::write(fd, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port)))
        throw std::runtime_error("cannot hand the store port to a child");
      ::close(fd);
    }
    store_ = connect_store("127.0.0.1", port, test_secret(), soon());
  }
  ~ForkedRanks() { kill_all(); }
  ForkedRanks(const ForkedRanks&) = delete;
  ForkedRanks& operator=(const ForkedRanks&) = delete;

  Store& store() { return *store_; }
  pid_t pid(int rank) const { return pids_[static_cast<size_t>(rank - first_)]; }
  // SIGKILL, left unreaped (a zombie) until join() or the destructor: a peer must notice
  // the death without anyone's help.
  void kill(int rank) { ::kill(pid(rank), SIGKILL); }
  // SIGKILL to every child still running, and reaps it.
  void kill_all() {
    for (pid_t& pid : pids_)
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        pid = -1;
      }
  }
  // Waits for every child; true when all exited 0.
  bool join() {
    bool ok = true;
    for (auto& pid : pids_) {
      if (pid <= 0) continue;
      int status = 0;
      ::waitpid(pid, &status, 0);
      ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
      pid = -1;
    }
    return ok;
  }

 private:
  int n_;
  int first_;
  std::vector<pid_t> pids_;
  std::vector<int> pipes_;
  std::unique_ptr<StoreServer> server_;
  std::shared_ptr<Store> store_;
};

// A child's check: throws (so the child exits 1 with the message) unless cond holds.
inline void require(bool cond, const std::string& what) {
  if (!cond) throw std::runtime_error("check failed: " + what);
}

}  // namespace braid::comm::testing
