// The API server's socket: the port is its own, and a crowd connecting at once is queued.
#include "serve/api_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "serve/job_store.h"
#include "temp_dir.h"

namespace braid::serve {
namespace {

using braid::testing::TempDir;

// cpp-httplib's default options set SO_REUSEPORT: a second server on the port started, and
// the kernel split the connections between the two.
TEST(ApiServer, ASecondServerOnTheSamePortIsRefused) {
  const TempDir tmp;
  JobStore first_store(tmp.file("first.db"));
  ApiOptions o;
  o.files_dir = tmp.file("files");
  ApiServer first(first_store, o);
  first.start();
  JobStore second_store(tmp.file("second.db"));
  o.port = first.port();
  ApiServer second(second_store, o);
  EXPECT_THROW(second.start(), Error);
}

// Two hundred clients connect at the same moment and each asks once. With the library's
// queue of 5 connections some of them failed (the kernel dropped their handshakes).
TEST(ApiServer, TwoHundredClientsConnectingAtOnceAreEachAnswered) {
  const TempDir tmp;
  JobStore store(tmp.file("jobs.db"));
  ApiOptions o;
  o.files_dir = tmp.file("files");
  ApiServer server(store, o);
  server.start();
  constexpr int kClients = 200;
  std::vector<int> status(kClients, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_connection_timeout(0, 200000);  // a dropped handshake is retried only after 1 s
      const auto r = c.Get("/api/v1/jobs");
      status[static_cast<size_t>(i)] = r ? r->status : -1;
    });
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kClients; ++i)
    EXPECT_EQ(status[static_cast<size_t>(i)], 401) << "client " << i;
}

}  // namespace
}  // namespace braid::serve
