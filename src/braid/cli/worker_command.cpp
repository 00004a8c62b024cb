// `braid worker --server URL`: a host's agent for braid serve. It registers the host's slots,
// heartbeats every second, starts the ranks the server assigns (one `braid launch` per job,
// its ranks writing their event streams under BRAID_EVENTS_DIR), and sends back what they
// say: each rank's events, the job's output lines, its end (exit code and last error), and
// its files (metrics, config, checkpoint). A job it is told to cancel gets SIGTERM (the
// launcher's grace lets the ranks save), then is reported cancelled. A job placed on several
// workers runs as one `braid launch --nnodes` agent on each, meeting at the rendezvous the
// server chose (its store on the job's first worker) with the secret the server made.
//
// The server may be down for a while (restarted, kill -9 included): the jobs go on, and what
// they said waits here, each stream's position moved on only once the server has it; the
// next heartbeat that gets through re-attaches them. One thread: a poll loop over the jobs'
// output pipes, with the heartbeat and the sends on a timer.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/server_client.h"
#include "cli/stop_signal_wait.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "core/timer.h"
#include "launch/child_process.h"
#include "launch/output_prefixer.h"

namespace braid::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct WorkerFlags {
  ServerFlags server;
  std::string host;
  std::string address;  // where other hosts reach this one (default: what the server sees)
  int slots = 0;        // 0: the cores of this host
  std::string work_dir = "braid-worker";
};

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  BRAID_CHECK(n > 0, "braid worker: cannot read /proc/self/exe: ", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

// One job this worker runs.
struct Job {
  int64_t id = 0;
  fs::path dir;
  launch::ChildProcess proc;
  std::unique_ptr<launch::OutputPrefixer> out, err;
  std::vector<std::pair<int, std::string>> lines;  // not yet sent
  // Of each event stream: the bytes and the records the server has.
  std::map<std::string, int64_t> sent, records_sent;
  int64_t lines_sent = 0;  // output lines the server has
  bool cancelling = false, exited = false;
  int code = 0;
};

// "[rank 3] text" -> 3; the launcher's own lines -> -1.
int rank_of(std::string_view line) {
  if (line.rfind("[rank ", 0) != 0) return -1;
  return std::atoi(std::string(line.substr(6)).c_str());
}

class Agent {
 public:
  explicit Agent(const WorkerFlags& f) : f_(f), client_(f.server), exe_(self_exe()) {
    fs::create_directories(f_.work_dir);
    const int slots = f_.slots > 0
                          ? f_.slots
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    host_ = f_.host.empty() ? name : f_.host;
    const uint64_t memory = mem_available_bytes().value_or(0);
    id_ =
        client_
            .post("/api/v1/workers",
                  {{"host", host_}, {"slots", slots}, {"address", f_.address}, {"memory", memory}})
            .at("id")
            .get<int64_t>();
    std::printf("braid worker %lld (%s, %d slots, %s available) serving %s\n",
                static_cast<long long>(id_), host_.c_str(), slots, describe_bytes(memory).c_str(),
                client_.url().c_str());
    std::fflush(stdout);
  }

  // Until SIGINT/SIGTERM: the jobs still running then are stopped and reported failed.
  void run() {
    Stopwatch since_heartbeat, since_send;
    bool first = true;
    while (wait_for_stop_signal(0) == 0) {
      read_output(200);
      reap();
      if (first || since_heartbeat.elapsed() >= 1.0) {
        heartbeat();
        since_heartbeat = Stopwatch();
        first = false;
      }
      if (since_send.elapsed() >= 0.25) {
        try {
          send_all();
        } catch (const IoError& e) {
          log_warn("braid worker: ", e.what(), "; kept, sent again once it answers");
          server_down_ = true;
        }
        since_send = Stopwatch();
      }
    }
    for (auto& [id, job] : jobs_)
      if (!job->exited) ::kill(-job->proc.pid, SIGTERM);
    while (!jobs_.empty() && std::any_of(jobs_.begin(), jobs_.end(),
                                         [](const auto& j) { return !j.second->exited; })) {
      read_output(200);
      reap();
    }
    try {
      send_all();
    } catch (const std::exception& e) {
      log_warn("braid worker: could not send the last words of its jobs: ", e.what());
    }
  }

 private:
  void heartbeat() {
    json running = json::array();
    for (const auto& [id, job] : jobs_) running.push_back(id);
    json answer;
    try {
      answer = client_.post("/api/v1/workers/" + std::to_string(id_) + "/heartbeat",
                            {{"running", running}});
    } catch (const IoError& e) {
      if (!server_down_) log_warn("braid worker: ", e.what(), "; the jobs go on, and it retries");
      server_down_ = true;
      return;
    }
    if (server_down_) log_info("braid worker: the server answers again");
    server_down_ = false;
    for (const json& s : answer.value("start", json::array())) start(s);
    for (const json& c : answer.value("cancel", json::array())) {
      const auto it = jobs_.find(c.get<int64_t>());
      if (it != jobs_.end() && !it->second->cancelling && !it->second->exited) {
        it->second->cancelling = true;
        ::kill(-it->second->proc.pid, SIGTERM);
      }
    }
  }

  void start(const json& s) {
    const int64_t id = s.at("job").get<int64_t>();
    if (jobs_.count(id) != 0) return;
    auto job = std::make_unique<Job>();
    job->id = id;
    job->dir = fs::path(f_.work_dir) / ("job-" + std::to_string(id));
    const int nnodes = s.value("nnodes", 1);
    if (nnodes > 1 && (s.value("servers", 0) > 0 || s.value("rdzv_endpoint", "").empty())) {
      report_state(id, "failed", -1,
                   "placed on " + std::to_string(nnodes) +
                       " workers without a rendezvous, or as a parameter-server job (whose "
                       "roles run on one host): this server and worker do not match");
      return;
    }
    fs::remove_all(job->dir);
    fs::create_directories(job->dir / "events");
    {
      std::ofstream cfg(job->dir / "config.json");
      cfg << s.at("config").dump(2) << "\n";
    }
    launch::ChildSpec spec;
    spec.path = exe_;
    const int nproc = s.value("nproc", 1), servers = s.value("servers", 0);
    spec.argv = {exe_, "launch"};
    // One host's agent of a job over several: exactly nnodes hosts, none restarted, so a
    // lost host fails the job, as on one host.
    const std::string rdzv_id = "braid-serve-job-" + std::to_string(id);
    const std::vector<std::string> shape =
        nnodes > 1    ? std::vector<std::string>{"--nnodes",
                                                 std::to_string(nnodes) + ":" + std::to_string(nnodes),
                                                 "--nproc-per-node",
                                                 std::to_string(nproc),
                                                 "--rdzv-endpoint",
                                                 s.at("rdzv_endpoint").get<std::string>(),
                                                 "--rdzv-id",
                                                 rdzv_id}
        : servers > 0 ? std::vector<std::string>{"--servers", std::to_string(servers), "--workers",
                                                 std::to_string(nproc - servers)}
                      : std::vector<std::string>{"-n", std::to_string(nproc)};
    spec.argv.insert(spec.argv.end(), shape.begin(), shape.end());
    for (const std::string& a :
         {std::string("--"), exe_, std::string("train"), std::string("--config"),
          (job->dir / "config.json").string(), std::string("--out"), (job->dir / "run").string(),
          std::string("--overwrite")})
      spec.argv.push_back(a);
    for (char** e = environ; *e != nullptr; ++e)
      if (std::strncmp(*e, "BRAID_EVENTS_DIR=", 17) != 0 &&
          std::strncmp(*e, "BRAID_SECRET", 12) != 0)
        spec.env.emplace_back(*e);
    spec.env.push_back("BRAID_EVENTS_DIR=" + (job->dir / "events").string());
    if (nnodes > 1) spec.env.push_back("BRAID_SECRET=" + s.at("secret").get<std::string>());
    sigemptyset(&spec.mask);
    try {
      job->proc = launch::spawn_child(spec);
    } catch (const std::exception& e) {
      report_state(id, "failed", -1, std::string("could not start: ") + e.what());
      return;
    }
    Job* j = job.get();
    auto sink = [j](std::string_view batch) {
      size_t at = 0;
      while (at < batch.size()) {
        size_t end = batch.find('\n', at);
        if (end == std::string_view::npos) end = batch.size();
        const std::string_view line = batch.substr(at, end - at);
        j->lines.emplace_back(rank_of(line), std::string(line));
        at = end + 1;
      }
    };
    job->out = std::make_unique<launch::OutputPrefixer>("", sink);
    job->err = std::make_unique<launch::OutputPrefixer>("", sink);
    jobs_[id] = std::move(job);
    report_state(id, "running", 0, "");
  }

  void read_output(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<launch::OutputPrefixer*> to;
    for (auto& [id, job] : jobs_) {
      for (auto [fd, p] : {std::pair{job->proc.out_fd, job->out.get()},
                           std::pair{job->proc.err_fd, job->err.get()}})
        if (fd >= 0) {
          fds.push_back({fd, POLLIN, 0});
          to.push_back(p);
        }
    }
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      return;
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    char buf[65536];
    for (size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        to[i]->feed(std::string_view(buf, static_cast<size_t>(n)));
        continue;
      }
      to[i]->finish();  // end of the stream
      for (auto& [id, job] : jobs_)
        for (int* fd : {&job->proc.out_fd, &job->proc.err_fd})
          if (*fd == fds[i].fd) {
            ::close(*fd);
            *fd = -1;
          }
    }
  }

  void reap() {
    for (auto& [id, job] : jobs_) {
      if (job->exited) continue;
      int status = 0;
      if (::waitpid(job->proc.pid, &status, WNOHANG) != job->proc.pid) continue;
      job->exited = true;
      job->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }

  // New whole lines of each rank's event stream, and the job's output lines; a job that
  // ended and whose output is all read gets its files and its end sent, then is forgotten.
  void send_all() {
    if (server_down_) return;
    std::vector<int64_t> done;
    for (auto& [id, job] : jobs_) {
      send_events(*job);
      if (!job->lines.empty()) {
        json lines = json::array();
        for (const auto& [rank, line] : job->lines)
          lines.push_back({{"rank", rank}, {"line", line}});
        // Where the batch begins: sent again after a lost answer, it is stored once.
        client_.post("/api/v1/jobs/" + std::to_string(id) + "/logs",
                     {{"lines", lines}, {"worker", id_}, {"first", job->lines_sent}});
        job->lines_sent += static_cast<int64_t>(job->lines.size());
        job->lines.clear();
      }
      if (job->exited && job->proc.out_fd < 0 && job->proc.err_fd < 0) {
        upload_files(*job);
        const bool reported = job->cancelling ? report_state(id, "cancelled", job->code, "")
                              : job->code == 0
                                  ? report_state(id, "succeeded", 0, "")
                                  : report_state(id, "failed", job->code, job->err->error_line());
        if (reported) done.push_back(id);
      }
    }
    for (const int64_t id : done) jobs_.erase(id);
  }

  void send_events(Job& job) {
    const fs::path dir = job.dir / "events";
    if (!fs::exists(dir)) return;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("rank-", 0) != 0) continue;
      const int rank = std::atoi(name.c_str() + 5);
      std::ifstream in(entry.path(), std::ios::binary);
      int64_t& sent = job.sent[name];
      in.seekg(sent);
      std::string text{std::istreambuf_iterator<char>(in), {}};
      const size_t whole = text.rfind('\n');
      if (whole == std::string::npos) continue;
      std::vector<json> records;
      size_t at = 0;
      while (at <= whole) {
        const size_t end = text.find('\n', at);
        try {
          records.push_back(json::parse(text.substr(at, end - at)));
        } catch (const json::parse_error&) {  // not a record: sent as text, never dropped
          records.push_back({{"event", "unparsed"}, {"text", text.substr(at, end - at)}});
        }
        at = end + 1;
      }
      int64_t& records_sent = job.records_sent[name];
      client_.post("/api/v1/jobs/" + std::to_string(job.id) + "/events",
                   {{"rank", rank}, {"events", records}, {"first", records_sent}});
      sent += static_cast<int64_t>(whole + 1);
      records_sent += static_cast<int64_t>(records.size());
    }
  }

  void upload_files(const Job& job) {
    const fs::path run = job.dir / "run";
    std::vector<std::pair<fs::path, std::string>> files = {{run / "metrics.jsonl", "metrics.jsonl"},
                                                           {run / "config.json", "config.json"}};
    if (fs::is_directory(run / "checkpoint"))
      for (const auto& e : fs::directory_iterator(run / "checkpoint"))
        if (e.is_regular_file())
          files.emplace_back(e.path(), "checkpoint/" + e.path().filename().string());
    for (const auto& [path, name] : files) {
      if (!fs::is_regular_file(path)) continue;
      std::ifstream in(path, std::ios::binary);
      const std::string bytes{std::istreambuf_iterator<char>(in), {}};
      try {
        client_.put_bytes("/api/v1/jobs/" + std::to_string(job.id) + "/files/" + name, bytes);
      } catch (const Error& e) {
        log_warn("braid worker: job ", job.id, ": ", name, " not sent: ", e.what());
      }
    }
  }

  // False when the server could not be told (it is down): said again later.
  bool report_state(int64_t id, const std::string& state, int code, const std::string& message) {
    try {
      client_.post("/api/v1/jobs/" + std::to_string(id) + "/state",
                   {{"state", state}, {"exit_code", code}, {"message", message}, {"worker", id_}});
      return true;
    } catch (const IoError& e) {
      log_warn("braid worker: job ", id, ": could not report '", state, "': ", e.what());
      return false;
    } catch (const Error& e) {  // refused (the job was cancelled meanwhile): nothing to redo
      log_warn("braid worker: job ", id, ": '", state, "' refused: ", e.what());
      return true;
    }
  }

  WorkerFlags f_;
  ServerClient client_;
  std::string exe_, host_;
  int64_t id_ = 0;
  bool server_down_ = false;
  std::map<int64_t, std::unique_ptr<Job>> jobs_;
};

void run_worker(const WorkerFlags& f) {
  catch_stop_signals("braid worker");
  Agent agent(f);
  agent.run();
}

}  // namespace

void add_worker_command(CLI::App& app) {
  auto flags = std::make_shared<WorkerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "worker",
      "Run this host's agent for a braid serve job server: it starts the ranks the "
      "server assigns and streams their events and output back");
  cmd->add_option("--host", flags->host, "the name this host registers under (default: hostname)");
  cmd->add_option("--advertise-addr", flags->address,
                  "the address other hosts reach this one at, for jobs over several workers "
                  "(default: the address the server sees it call from)");
  cmd->add_option("--slots", flags->slots, "ranks this host runs at once (default: its cores)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--work-dir", flags->work_dir, "where the jobs' runs are written")
      ->capture_default_str();
  cmd->add_option("--server", flags->server.server,
                  "the job server, http(s)://HOST:PORT (BRAID_SERVER)");
  cmd->add_option("--token", flags->server.token, "an admin's token (BRAID_TOKEN)");
  cmd->add_option("--ca-cert", flags->server.ca_cert,
                  "HTTPS: the certificate to trust (BRAID_CA_CERT)");
  cmd->callback([flags] { run_worker(*flags); });
}

}  // namespace braid::cli
