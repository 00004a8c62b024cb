// `braid bench serve`: the job server under the load issue 31 sizes it for. A real server
// (serve/api_server.h over a fresh database, real sockets) receives the event streams of
// J jobs x R ranks, each rank sending a batch of one step's events every 1/rate s as a
// worker does, while C clients ask for a job's status as fast as they can. It reports the
// status calls' latency (p50, p99, max) and counts the events the database holds against
// those sent: none may be dropped.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/timer.h"
#include "serve/api_server.h"
#include "serve/job_store.h"

namespace braid::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ServeBenchFlags {
  int jobs = 4, ranks = 4, clients = 100;
  double rate = 10;  // steps a second per rank, one event batch each
  double seconds = 10;
  double client_rate = 0;  // status calls a second per client; 0: as fast as answered
  double warmup = 1;       // seconds of calls not counted: every client connecting at once
  bool json_out = false;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

void run_serve_bench(const ServeBenchFlags& f) {
  const fs::path dir =
      fs::temp_directory_path() / ("braid-bench-serve-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  serve::JobStore store((dir / "jobs.db").string());
  const std::string token = store.bootstrap_admin()->second;
  serve::ApiOptions o;
  o.requests_per_second = 1e6;  // the bench measures the server, not its limiter
  o.burst = 1e6;
  o.files_dir = (dir / "files").string();
  serve::ApiServer server(store, o);
  server.start();
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  std::vector<int64_t> jobs;
  const int64_t user = store.user_for_token(token)->id;
  for (int j = 0; j < f.jobs; ++j)
    jobs.push_back(store.submit(user, "bench", json{{"model", "mlp"}}, f.ranks, 0, 0).id);

  std::atomic<bool> stop{false};
  std::atomic<int64_t> sent{0}, failed_posts{0};
  std::mutex failures_mu;
  std::map<std::string, int64_t> failures;  // why calls failed, as the client saw it
  const auto why = [](const httplib::Result& r) {
    return r ? "HTTP " + std::to_string(r->status) : httplib::to_string(r.error());
  };
  const auto note_failure = [&](const httplib::Result& r) {
    ++failed_posts;
    const std::lock_guard lock(failures_mu);
    ++failures["event post: " + why(r)];
  };
  std::vector<std::thread> threads;
  for (const int64_t job : jobs)
    for (int rank = 0; rank < f.ranks; ++rank)
      threads.emplace_back([&, job, rank] {
        httplib::Client c(url);
        c.set_bearer_token_auth(token.c_str());
        c.set_keep_alive(true);
        c.set_tcp_nodelay(true);
        const double period = 1.0 / f.rate;
        const Stopwatch clock;
        for (int64_t step = 1; !stop; ++step) {
          const json batch = {{"rank", rank},
                              {"events", json::array({json{{"event", "train"},
                                                           {"step", step},
                                                           {"loss", 1.0 / step},
                                                           {"samples/s", 1000.0},
                                                           {"step_ms", 30.0},
                                                           {"comm_exposed_ms", 2.0},
                                                           {"rank", rank}}})}};
          const auto r = c.Post(("/api/v1/jobs/" + std::to_string(job) + "/events").c_str(),
                                batch.dump(), "application/json");
          if (r && r->status == 200)
            ++sent;
          else
            note_failure(r);
          const double next = static_cast<double>(step) * period;
          const double wait = next - clock.elapsed();
          if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        }
      });
  std::mutex mu;
  std::vector<double> latencies;
  std::atomic<int64_t> failed_reads{0};
  for (int k = 0; k < f.clients; ++k)
    threads.emplace_back([&, k] {
      httplib::Client c(url);
      c.set_bearer_token_auth(token.c_str());
      c.set_keep_alive(true);
      c.set_tcp_nodelay(true);
      std::vector<double> mine;
      const std::string path =
          "/api/v1/jobs/" + std::to_string(jobs[static_cast<size_t>(k) % jobs.size()]);
      const Stopwatch clock;
      for (int64_t call = 1; !stop; ++call) {
        const Stopwatch w;
        const bool counted = clock.elapsed() >= f.warmup;
        const auto r = c.Get(path.c_str());
        if (r && r->status == 200) {
          if (counted) mine.push_back(w.elapsed() * 1e3);
        } else {
          ++failed_reads;
          const std::lock_guard lock(failures_mu);
          ++failures["status call: " + why(r)];
        }
        if (f.client_rate <= 0) continue;
        const double wait = static_cast<double>(call) / f.client_rate - clock.elapsed();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      }
      const std::lock_guard lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(f.warmup + f.seconds));
  stop = true;
  for (std::thread& t : threads) t.join();
  int64_t stored = 0;
  for (const int64_t job : jobs) stored += store.event_count(job);
  server.stop();
  fs::remove_all(dir);
  const json out = {{"jobs", f.jobs},
                    {"ranks", f.ranks},
                    {"steps_per_s", f.rate},
                    {"clients", f.clients},
                    {"client_rate", f.client_rate},
                    {"seconds", f.seconds},
                    {"warmup_seconds", f.warmup},
                    {"status_calls", latencies.size()},
                    {"status_p50_ms", percentile(latencies, 0.5)},
                    {"status_p99_ms", percentile(latencies, 0.99)},
                    {"status_max_ms", percentile(latencies, 1.0)},
                    {"failed_status_calls", failed_reads.load()},
                    {"events_sent", sent.load()},
                    {"events_stored", stored},
                    {"failed_event_posts", failed_posts.load()},
                    {"failures", failures}};
  if (f.json_out) {
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf(
      "%d clients asking a job's status (%s) while %d jobs x %d ranks send %.0f steps/s each, %.0f "
      "s:\n"
      "  status: %zu calls, p50 %.2f ms, p99 %.2f ms, max %.2f ms, %lld failed\n"
      "  events: %lld sent, %lld stored (%lld dropped), %lld posts failed\n",
      f.clients,
      f.client_rate > 0 ? (std::to_string(f.client_rate) + " a second each").c_str()
                        : "each as soon as answered",
      f.jobs, f.ranks, f.rate, f.seconds, latencies.size(), percentile(latencies, 0.5),
      percentile(latencies, 0.99), percentile(latencies, 1.0),
      static_cast<long long>(failed_reads.load()), static_cast<long long>(sent.load()),
      static_cast<long long>(stored), static_cast<long long>(sent.load() - stored),
      static_cast<long long>(failed_posts.load()));
  for (const auto& [what, count] : failures)
    std::printf("  failed: %lld x %s\n", static_cast<long long>(count), what.c_str());
}

}  // namespace

void add_serve_bench(CLI::App& bench) {
  auto f = std::make_shared<ServeBenchFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "serve", "The job server under load: status latency while jobs stream their events");
  cmd->add_option("--jobs", f->jobs, "jobs streaming events")->check(CLI::Range(1, 64));
  cmd->add_option("--ranks", f->ranks, "ranks per job")->check(CLI::Range(1, 64));
  cmd->add_option("--rate", f->rate, "steps a second per rank")->check(CLI::Range(0.1, 1000.0));
  cmd->add_option("--clients", f->clients, "clients asking for a job's status")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--seconds", f->seconds, "how long, after the warm-up")
      ->check(CLI::Range(1.0, 3600.0));
  cmd->add_option("--warmup", f->warmup,
                  "seconds first, not counted in the latencies (every client connects at once)")
      ->check(CLI::Range(0.0, 60.0));
  cmd->add_option("--client-rate", f->client_rate,
                  "status calls a second per client (0: each as soon as the last is answered)")
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_flag("--json", f->json_out, "one JSON object instead of lines");
  cmd->callback([f] { run_serve_bench(*f); });
}

}  // namespace braid::cli
