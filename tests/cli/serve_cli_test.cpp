// braid serve, braid worker and the client commands as a user runs them: a real server and
// real workers on this host, real training jobs, a kill -9 of the server mid-job, and the
// API's refusals (no token, a wrong one, another user's job, a body too large or not JSON).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fashion_mnist_data.h"
#include "serve_harness.h"

namespace {

using braid::testing::run_braid;
using braid::testing::TempDir;
using namespace braid::testing::serve;

const json kMlp = {{"model", "mlp"},   {"max_steps", 30}, {"log_every", 10},
                   {"eval_every", 15}, {"threads", 1},    {"seed", 3}};

// Submits a 2-rank job that would run for hours, and returns its id once its first events
// have reached the server (-1 if the submission failed).
int64_t submit_endless_job(const Server& server, const TempDir& tmp) {
  json config = kMlp;
  config["max_steps"] = 100000;
  config["epochs"] = 1000;
  const auto submit =
      server.braid("submit " + job_config(tmp, "job.json", config) + " -n 2", server.admin);
  EXPECT_EQ(submit.code, 0) << submit.output;
  if (submit.code != 0) return -1;
  const int64_t id = submitted_id(submit.output);
  for (int i = 0;
       i < 100 &&
       server.get("/api/v1/jobs/" + std::to_string(id), server.admin).value("events", 0) == 0;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return id;
}

// A DDP job submitted to the server runs on a worker, streams every rank's events and the
// output, leaves its files on the server, and reaches the accuracy of the same run started
// by hand.
TEST(ServeCli, ADdpJobRunsOnAWorkerAsTheSameRunByHand) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const Server server(tmp, tmp.file("data"));
  ASSERT_GT(server.port, 0) << server.process.output();
  const auto worker = server.worker(tmp, 2, "w");
  const auto submit =
      server.braid("submit " + job_config(tmp, "job.json", kMlp) + " -n 2", server.admin);
  ASSERT_EQ(submit.code, 0) << submit.output;
  const int64_t id = submitted_id(submit.output);
  const json job = server.wait_final(id, server.admin);
  ASSERT_EQ(job.value("state", ""), "succeeded") << job.dump() << worker->output();
  ASSERT_EQ(job.at("health").size(), 2u);
  for (const json& h : job.at("health")) {
    EXPECT_EQ(h.value("last_event", ""), "stopped") << h.dump();
    EXPECT_EQ(h.value("step", 0), 30) << h.dump();
  }
  // Every record of each rank's stream, once.
  const json events = server.get("/api/v1/jobs/" + std::to_string(id) + "/events", server.admin);
  int stopped = 0, evals = 0;
  for (const json& e : events.at("events")) {
    stopped += e["record"].value("event", "") == "stopped";
    evals += e["record"].value("event", "") == "eval" && e.value("rank", -1) == 0;
  }
  EXPECT_EQ(stopped, 2);
  EXPECT_EQ(evals, 2) << "steps 15 and 30";
  const auto logs = server.braid("logs " + std::to_string(id), server.admin);
  EXPECT_NE(logs.output.find("[rank 0] done: 30 steps"), std::string::npos) << logs.output;

  // The same run by hand: the same final evaluation, to the bit.
  const auto by_hand =
      run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train --config " +
                tmp.file("job.json") + " --out " + tmp.file("by-hand"));
  ASSERT_EQ(by_hand.code, 0) << by_hand.output;
  const std::string metrics = read_file(tmp.file("by-hand/metrics.jsonl"));
  const std::string served =
      read_file(tmp.file("data/files/" + std::to_string(id) + "/metrics.jsonl"));
  ASSERT_FALSE(served.empty()) << "the worker sent no metrics.jsonl";
  EXPECT_EQ(last_eval(served).value("loss", -1.0), last_eval(metrics).value("loss", -2.0));
  EXPECT_EQ(last_eval(served).value("accuracy", -1.0), last_eval(metrics).value("accuracy", -2.0));
  // And downloadable through the API.
  httplib::Client c(server.url);
  c.set_bearer_token_auth(server.admin.c_str());
  const auto file =
      c.Get(("/api/v1/jobs/" + std::to_string(id) + "/files/checkpoint/model.safetensors").c_str());
  ASSERT_TRUE(file);
  EXPECT_EQ(file->status, 200);
  EXPECT_EQ(file->body, read_file(tmp.file("w/job-" + std::to_string(id) +
                                           "/run/checkpoint/model.safetensors")));
}

// A federated-averaging job: one parameter server and two workers (the clients split
// among them by the config's rule), on a worker, with the result of the same job by hand.
TEST(ServeCli, AFedAvgJobRunsOnAWorkerAsTheSameRunByHand) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const Server server(tmp, tmp.file("data"));
  ASSERT_GT(server.port, 0) << server.process.output();
  const auto worker = server.worker(tmp, 3, "w");
  const json config = {{"model", "mlp"},
                       {"strategy", "fedavg"},
                       {"threads", 1},
                       {"batch", 32},
                       {"eval_batches", 4},
                       {"eval_every", 1},
                       {"fedavg", {{"clients", 40}, {"rounds", 2}, {"fraction", 0.1}}}};
  const std::string file = job_config(tmp, "fedavg.json", config);
  // Without its servers it is refused, saying why.
  const auto refused = server.braid("submit " + file + " -n 3", server.admin);
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.output.find("runs parameter servers"), std::string::npos) << refused.output;
  const auto submit = server.braid("submit " + file + " -n 3 --servers 1", server.admin);
  ASSERT_EQ(submit.code, 0) << submit.output;
  const int64_t id = submitted_id(submit.output);
  const json job = server.wait_final(id, server.admin);
  ASSERT_EQ(job.value("state", ""), "succeeded") << job.dump() << worker->output();
  const auto by_hand = run_braid("launch --servers 1 --workers 2 -- " + std::string(BRAID_BINARY) +
                                 " train --config " + file + " --out " + tmp.file("by-hand"));
  ASSERT_EQ(by_hand.code, 0) << by_hand.output;
  const std::string served =
      read_file(tmp.file("data/files/" + std::to_string(id) + "/metrics.jsonl"));
  const std::string metrics = read_file(tmp.file("by-hand/metrics.jsonl"));
  ASSERT_FALSE(served.empty()) << "the worker sent no metrics.jsonl";
  EXPECT_EQ(last_eval(served).value("accuracy", -1.0), last_eval(metrics).value("accuracy", -2.0));
  EXPECT_EQ(last_eval(served).value("loss", -1.0), last_eval(metrics).value("loss", -2.0));
}

// The lines of a file.
std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The server killed with SIGKILL at 10 random moments while a job runs and more are
// submitted, started again on its port each time: no submitted job is lost, every job
// finishes (its worker re-attaches it), and every rank's event stream is stored whole and
// once, as the worker's ranks wrote it (a batch whose answer died with the server is sent
// again and must not be stored twice).
TEST(ServeCli, JobsOutliveTenKillNinesOfTheServerAtRandomMoments) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const unsigned seed = std::random_device{}();
  std::printf("kill moments from seed %u\n", seed);
  std::mt19937 random(seed);
  ServerOptions options;
  options.log = "serve-0.log";
  auto server = std::make_unique<Server>(tmp, tmp.file("data"), options);
  ASSERT_GT(server->port, 0) << server->process.output();
  options.port = server->port;
  const std::string admin = server->admin;
  const auto worker = server->worker(tmp, 3, "w");
  json config = kMlp;
  config["max_steps"] = 400;
  config["epochs"] = 100;
  config["log_every"] = 5;
  config["batch"] = 16;  // steps of little compute,
  config["eval_every"] = 100;
  config["eval_batches"] = 2;
  config["slow_step_ms"] = 20;  // 8 s of them: the kills land while it runs
  const auto submit =
      server->braid("submit " + job_config(tmp, "long.json", config) + " -n 2", admin);
  ASSERT_EQ(submit.code, 0) << submit.output;
  std::vector<int64_t> ids = {submitted_id(submit.output)};
  const std::string short_job = job_config(tmp, "short.json", kMlp);
  for (int kill = 1; kill <= 10; ++kill) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(100, 900)(random)));
    if (kill % 3 == 1) {  // a job submitted just before a kill is kept too
      const auto more = server->braid("submit " + short_job + " -n 1", admin);
      ASSERT_EQ(more.code, 0) << "kill " << kill << ": " << more.output;
      ids.push_back(submitted_id(more.output));
    }
    server->process.stop(SIGKILL);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 500)(random)));
    options.log = "serve-" + std::to_string(kill) + ".log";
    server = std::make_unique<Server>(tmp, tmp.file("data"), options);
    ASSERT_EQ(server->port, options.port) << server->process.output();
  }
  const auto kills_done = std::chrono::steady_clock::now();
  for (const int64_t id : ids) {
    const json job = server->wait_final(id, admin);
    std::printf(
        "job %lld final %.1f s after the last kill\n", static_cast<long long>(id),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - kills_done).count());
    ASSERT_EQ(job.value("state", ""), "succeeded") << job.dump() << worker->output();
    // Every rank's stream as its rank wrote it: each record once, in order.
    const json events =
        server->get("/api/v1/jobs/" + std::to_string(id) + "/events?after=0&limit=100000", admin);
    for (int rank = 0; rank < job.value("ranks", 0); ++rank) {
      std::vector<json> stored, written;
      for (const json& e : events.at("events"))
        if (e.value("rank", -1) == rank) stored.push_back(e.at("record"));
      for (const std::string& line : lines_of(tmp.file(
               "w/job-" + std::to_string(id) + "/events/rank-" + std::to_string(rank) + ".jsonl")))
        written.push_back(json::parse(line));
      ASSERT_FALSE(written.empty()) << "job " << id << " rank " << rank;
      EXPECT_EQ(stored, written) << "job " << id << " rank " << rank << ": " << stored.size()
                                 << " records stored, " << written.size() << " written";
    }
    const auto logs = server->braid("logs " + std::to_string(id), admin);
    const std::string done = "[rank 0] done: " + std::to_string(id == ids[0] ? 400 : 30);
    const size_t at = logs.output.find(done);
    EXPECT_NE(at, std::string::npos) << logs.output;
    EXPECT_EQ(logs.output.find(done, at + 1), std::string::npos) << "an output line twice";
  }
  EXPECT_NE(worker->output().find("the server answers again"), std::string::npos)
      << "no kill landed while the jobs ran: " << worker->output();
}

// Each refusal has its status, and writes nothing.
TEST(ServeCli, TheApiRefusesWhatItMustAndWritesNothing) {
  const TempDir tmp;
  const Server server(tmp, tmp.file("data"), 0, "1");
  ASSERT_GT(server.port, 0) << server.process.output();
  httplib::Client admin(server.url);
  admin.set_bearer_token_auth(server.admin.c_str());
  const auto made = admin.Post("/api/v1/users", R"({"name": "alice"})", "application/json");
  ASSERT_TRUE(made);
  ASSERT_EQ(made->status, 201) << made->body;
  const std::string alice = json::parse(made->body).at("token");
  const json job = {{"config", kMlp}, {"ranks", 1}, {"name", "<script>alert(1)</script>"}};
  const auto submitted = admin.Post("/api/v1/jobs", job.dump(), "application/json");
  ASSERT_TRUE(submitted);
  ASSERT_EQ(submitted->status, 201) << submitted->body;
  const int64_t id = json::parse(submitted->body).at("id");

  auto status_of = [&](const std::string& token, const std::string& method, const std::string& path,
                       const std::string& body) {
    httplib::Client c(server.url);
    if (!token.empty()) c.set_bearer_token_auth(token.c_str());
    const auto r =
        method == "GET" ? c.Get(path.c_str()) : c.Post(path.c_str(), body, "application/json");
    return r ? r->status : -1;
  };
  EXPECT_EQ(status_of("", "GET", "/api/v1/jobs", ""), 401);
  EXPECT_EQ(status_of(alice + "x", "GET", "/api/v1/jobs", ""), 401);
  EXPECT_EQ(status_of(alice, "GET", "/api/v1/jobs/" + std::to_string(id), ""), 404)
      << "another user's job";
  EXPECT_EQ(status_of(alice, "POST", "/api/v1/jobs/" + std::to_string(id) + "/cancel", "{}"), 404);
  EXPECT_EQ(status_of(alice, "POST", "/api/v1/users", R"({"name": "mallory"})"), 403);
  EXPECT_EQ(status_of(alice, "POST", "/api/v1/jobs", "{not json"), 400);
  EXPECT_EQ(status_of(alice, "POST", "/api/v1/jobs", R"({"config": {"modle": "mlp"}})"), 400);
  EXPECT_EQ(status_of(alice, "POST", "/api/v1/jobs", R"({"config": {"model": "mlp"}, "ranks": 0})"),
            400);
  EXPECT_EQ(status_of(alice, "POST", "/api/v1/jobs",
                      R"({"config": {"model": "mlp"}, "priority": "high"})"),
            400)
      << "a field of the wrong type";
  EXPECT_EQ(status_of(alice, "POST", "/api/v1/jobs", R"([1, 2])"), 400) << "not an object";
  const std::string huge =
      R"({"config": {"model": "mlp"}, "name": ")" + std::string(2 << 20, 'a') + "\"}";
  EXPECT_EQ(status_of(alice, "POST", "/api/v1/jobs", huge), 413);
  // A job's file names stay in its folder.
  for (const char* name : {"..", "a..b", "checkpoint/x/y", "x%2F..%2Fy", "a b"}) {
    const auto put = admin.Put(("/api/v1/jobs/" + std::to_string(id) + "/files/" + name).c_str(),
                               "bytes", "application/octet-stream");
    ASSERT_TRUE(put);
    EXPECT_EQ(put->status, 400) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("data/files"))) << "a file was written";
  // Nothing was written: alice has no job, the admin one, and the name is kept as text.
  EXPECT_TRUE(server.get("/api/v1/jobs", alice).at("jobs").empty());
  const json all = server.get("/api/v1/jobs", server.admin).at("jobs");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].value("name", ""), "<script>alert(1)</script>");
  // Cancelling a queued job (no worker here) ends it at once; again is a 409.
  EXPECT_EQ(status_of(server.admin, "POST", "/api/v1/jobs/" + std::to_string(id) + "/cancel", "{}"),
            200);
  EXPECT_EQ(server.get("/api/v1/jobs/" + std::to_string(id), server.admin).value("state", ""),
            "cancelled");
  EXPECT_EQ(status_of(server.admin, "POST", "/api/v1/jobs/" + std::to_string(id) + "/cancel", "{}"),
            409);
}

// A running job cancelled: the worker stops its ranks and says so.
TEST(ServeCli, CancellingARunningJobStopsItsRanks) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const Server server(tmp, tmp.file("data"));
  ASSERT_GT(server.port, 0) << server.process.output();
  const auto worker = server.worker(tmp, 2, "w");
  const int64_t id = submit_endless_job(server, tmp);
  ASSERT_GT(id, 0);
  const auto cancel = server.braid("cancel " + std::to_string(id), server.admin);
  ASSERT_EQ(cancel.code, 0) << cancel.output;
  const json job = server.wait_final(id, server.admin);
  EXPECT_EQ(job.value("state", ""), "cancelled") << job.dump() << worker->output();
  EXPECT_EQ(job.value("message", ""), "cancelled by admin");
}

// A worker killed with SIGKILL takes its ranks with it (they die with their launcher); the
// server, no longer hearing it, fails its job and names it.
TEST(ServeCli, AJobWhoseWorkerIsKilledFailsNamingTheWorker) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const Server server(tmp, tmp.file("data"), 0, "256", "2");
  ASSERT_GT(server.port, 0) << server.process.output();
  const auto worker = server.worker(tmp, 2, "w", "doomed");
  const int64_t id = submit_endless_job(server, tmp);
  ASSERT_GT(id, 0);
  worker->stop(SIGKILL);
  const json job = server.wait_final(id, server.admin);
  EXPECT_EQ(job.value("state", ""), "failed") << job.dump();
  EXPECT_NE(job.value("message", "").find("(doomed) unheard for"), std::string::npos) << job.dump();
}

// A worker killed and started again at once (within the server's timeout) no longer has the
// job's ranks: its first heartbeat says so, and the server fails the job naming the restart,
// rather than wait forever for ranks that are gone.
TEST(ServeCli, AJobWhoseWorkerRestartedUnderItFailsSayingSo) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const Server server(tmp, tmp.file("data"), 0, "256", "60");
  ASSERT_GT(server.port, 0) << server.process.output();
  auto worker = server.worker(tmp, 2, "w", "phoenix");
  const int64_t id = submit_endless_job(server, tmp);
  ASSERT_GT(id, 0);
  worker->stop(SIGKILL);
  worker = server.worker(tmp, 2, "w2", "phoenix");
  const json job = server.wait_final(id, server.admin, 30);
  EXPECT_EQ(job.value("state", ""), "failed") << job.dump() << worker->output();
  EXPECT_NE(job.value("message", "").find("(phoenix) no longer runs this job's ranks"),
            std::string::npos)
      << job.dump();
}

}  // namespace
