// The harness of the job server's CLI tests: a real `braid serve` in the background, real
// `braid worker`s (in a network namespace too), and a client's calls.
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "run_braid.h"
#include "temp_dir.h"

namespace braid::testing::serve {

using nlohmann::json;

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A braid process in the background, its output in a file (a pipe could fill and block it).
// `prefix` goes before braid on its command line (`netns-cluster.sh exec 1`: run it in a
// network namespace; it ends in an exec, so the pid is braid's own).
class Background {
 public:
  Background(const std::vector<std::string>& args, const std::string& log,
             const std::vector<std::string>& env = {}, const std::vector<std::string>& prefix = {})
      : log_(log) {
    std::vector<std::string> line = prefix;
    line.emplace_back(BRAID_BINARY);
    line.insert(line.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv;
      for (const std::string& a : line) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Background() { stop(SIGKILL); }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  void stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string output() const { return read_file(log_); }
  // Waits (up to 30 s) for `part` in the output.
  bool wait_for(const std::string& part) const {
    for (int i = 0; i < 300; ++i) {
      if (output().find(part) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

// How a Server is started: where it listens, and on which command line.
struct ServerOptions {
  int port = 0;  // 0: any
  std::string max_body_mb = "256";
  std::string worker_timeout = "10";
  std::string host = "127.0.0.1";
  std::vector<std::string> prefix;  // before braid (a network namespace's exec)
  std::vector<std::string> extra;   // more flags
  std::string log = "serve.log";    // its output, in the test's folder (one per start)
};

// A server in `dir`, and what a client needs to talk to it.
struct Server {
  Server(const TempDir& tmp, const std::string& dir, const ServerOptions& o)
      : options(o), process(args(dir, o), tmp.file(o.log), {}, o.prefix) {
    const std::string listening = "listening on http://" + o.host + ":";
    if (!process.wait_for(listening)) return;
    const std::string out = process.output();
    this->port = std::stoi(out.substr(out.rfind(listening) + listening.size()));
    url = "http://" + o.host + ":" + std::to_string(this->port);
    admin = read_file(dir + "/admin-token");
    admin.erase(admin.find_last_not_of('\n') + 1);
  }
  Server(const TempDir& tmp, const std::string& dir, int port = 0,
         const std::string& max_body_mb = "256", const std::string& worker_timeout = "10")
      : Server(tmp, dir, options_of(port, max_body_mb, worker_timeout)) {}

  static ServerOptions options_of(int port, const std::string& max_body_mb,
                                  const std::string& worker_timeout) {
    ServerOptions o;
    o.port = port;
    o.max_body_mb = max_body_mb;
    o.worker_timeout = worker_timeout;
    return o;
  }

  static std::vector<std::string> args(const std::string& dir, const ServerOptions& o) {
    std::vector<std::string> a = {"serve",
                                  "--data-dir",
                                  dir,
                                  "--host",
                                  o.host,
                                  "--port",
                                  std::to_string(o.port),
                                  "--max-body-mb",
                                  o.max_body_mb,
                                  "--worker-timeout",
                                  o.worker_timeout};
    a.insert(a.end(), o.extra.begin(), o.extra.end());
    return a;
  }
  std::string prefix_line() const {
    std::string line;
    for (const std::string& p : options.prefix) line += p + " ";
    return line;
  }
  // A client command against this server as `token` (where the server is: its namespace).
  braid::testing::BraidResult braid(const std::string& args, const std::string& token) const {
    return run_braid(args, "BRAID_SERVER=" + url + " BRAID_TOKEN=" + token + " " + prefix_line());
  }
  json get(const std::string& path, const std::string& token, int* status = nullptr) const {
    httplib::Client c(url);
    c.set_bearer_token_auth(token.c_str());
    const auto r = c.Get(path.c_str());
    if (status) *status = r ? r->status : -1;
    const json body = r ? json::parse(r->body, nullptr, false) : json();
    return body.is_object() ? body : json::object();  // unreachable or not JSON: nothing
  }
  // Job `id`'s record: through the API, or `braid status --json` in the server's namespace.
  json job(int64_t id, const std::string& token) const {
    if (options.prefix.empty()) return get("/api/v1/jobs/" + std::to_string(id), token);
    const auto status = braid("status " + std::to_string(id) + " --json", token);
    const json body = json::parse(status.output, nullptr, false);
    return body.is_object() ? body : json::object();
  }
  // A `braid worker` of this server with `slots`, writing under tmp's `dir` (its output in
  // dir.log), registered as `host` (default: the hostname), started after `prefix`.
  std::unique_ptr<Background> worker(const TempDir& tmp, int slots, const std::string& dir,
                                     const std::string& host = "",
                                     const std::vector<std::string>& prefix = {}) const {
    std::vector<std::string> args = {"worker", "--slots", std::to_string(slots), "--work-dir",
                                     tmp.file(dir)};
    if (!host.empty()) args.insert(args.end(), {"--host", host});
    return std::make_unique<Background>(
        args, tmp.file(dir + ".log"),
        std::vector<std::string>{"BRAID_SERVER=" + url, "BRAID_TOKEN=" + admin}, prefix);
  }
  // Polls job `id` until it is in a final state (`seconds` at most); its record.
  json wait_final(int64_t id, const std::string& token, int seconds = 120) const {
    json j;
    for (int i = 0; i < seconds * 10; ++i) {
      j = job(id, token);
      const std::string s = j.value("state", "");
      if (s == "succeeded" || s == "failed" || s == "cancelled") return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return j;
  }

  ServerOptions options;
  Background process;
  int port = 0;
  std::string url, admin;
};

inline std::string job_config(const TempDir& tmp, const std::string& name, const json& config) {
  const std::string path = tmp.file(name);
  std::ofstream(path) << config.dump();
  return path;
}

// The last "eval" record of a metrics.jsonl's text.
inline json last_eval(const std::string& text) {
  json last = json::object();
  size_t at = 0;
  for (size_t end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
    const json r = json::parse(text.substr(at, end - at));
    if (r.value("event", "") == "eval") last = r;
  }
  return last;
}

inline int64_t submitted_id(const std::string& output) {
  const size_t at = output.find("job ");
  return at == std::string::npos ? -1 : std::stoll(output.substr(at + 4));
}

}  // namespace braid::testing::serve
