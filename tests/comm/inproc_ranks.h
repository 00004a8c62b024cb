// Test harness: run the ranks of a job as threads over the in-process transport. A rank
// whose function throws closes its transport (as a crashing process would), so its peers
// fail promptly instead of waiting out their deadlines; each rank's exception comes back
// to the test.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/group.h"
#include "comm/inproc_transport.h"

namespace braid::comm::testing {

// Long enough never to fire on a loaded machine; a bug still fails instead of hanging.
inline constexpr std::chrono::milliseconds kTestTimeout{60'000};

inline std::vector<std::exception_ptr> run_transports(
    int size, const std::function<void(int rank, const std::shared_ptr<Transport>&)>& fn,
    size_t max_buffered = size_t{256} << 20) {
  auto transports = make_inproc_transports(size, max_buffered);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      const auto& t = transports[static_cast<size_t>(r)];
      try {
        fn(r, t);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        static_cast<InprocTransport&>(*t).close("its rank threw");
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Each rank gets the world group of its transport.
inline std::vector<std::exception_ptr> run_group(int size, const std::function<void(Group&)>& fn,
                                                 std::chrono::milliseconds timeout = kTestTimeout) {
  return run_transports(size, [&](int, const std::shared_ptr<Transport>& t) {
    auto g = Group::world(t, GroupOptions{timeout});
    fn(*g);
  });
}

// The message of an exception_ptr ("" when null).
inline std::string message(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// Rethrows the first rank's error, prefixed with its rank, for ASSERT_NO_THROW.
inline void rethrow_first(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r)
    if (errors[r])
      throw std::runtime_error("rank " + std::to_string(r) + ": " + message(errors[r]));
}

}  // namespace braid::comm::testing
