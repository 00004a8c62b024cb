// The job server's client commands: braid submit, status, logs and cancel (serve's API
// through cli/server_client.h). Each prints a line a person reads, or the server's JSON
// with --json.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/server_client.h"
#include "core/error.h"
#include "train/config.h"

namespace braid::cli {
namespace {

using nlohmann::json;

void add_server_flags(CLI::App* cmd, ServerFlags& f) {
  cmd->add_option("--server", f.server, "the job server, http(s)://HOST:PORT (BRAID_SERVER)");
  cmd->add_option("--token", f.token, "your token (BRAID_TOKEN)");
  cmd->add_option("--ca-cert", f.ca_cert, "HTTPS: the certificate to trust (BRAID_CA_CERT)");
}

std::string job_line(const json& j) {
  char line[512];
  std::snprintf(line, sizeof line, "%6lld  %-10s %3d ranks  %-8s %s%s%s",
                static_cast<long long>(j.value("id", int64_t{0})),
                j.value("state", std::string()).c_str(), j.value("ranks", 0),
                j.value("user", std::string()).c_str(), j.value("name", std::string()).c_str(),
                j.value("message", std::string()).empty() ? "" : "  -- ",
                j.value("message", std::string()).c_str());
  return line;
}

bool final_state(const std::string& s) {
  return s == "succeeded" || s == "failed" || s == "cancelled";
}

struct SubmitFlags {
  ServerFlags server;
  std::string config;
  int ranks = 1;
  int servers = 0;
  std::string name;
  int priority = 0;
  bool json_out = false;
};

void run_submit(const SubmitFlags& f) {
  const json config = train::read_config_file(f.config);
  train::config_from_json(config);  // refused here, before the server, with the file's name
  ServerClient client(f.server);
  const json job = client.post("/api/v1/jobs", {{"config", config},
                                                {"ranks", f.ranks},
                                                {"servers", f.servers},
                                                {"name", f.name.empty() ? f.config : f.name},
                                                {"priority", f.priority}});
  if (f.json_out)
    std::printf("%s\n", job.dump(2).c_str());
  else
    std::printf("job %lld %s (%d ranks)\n", static_cast<long long>(job.value("id", int64_t{0})),
                job.value("state", std::string()).c_str(), f.ranks);
}

struct JobFlags {
  ServerFlags server;
  int64_t job = 0;
  bool json_out = false;
  bool follow = false;
};

void run_status(const JobFlags& f) {
  ServerClient client(f.server);
  if (f.job == 0) {
    const json list = client.get("/api/v1/jobs");
    if (f.json_out) return (void)std::printf("%s\n", list.dump(2).c_str());
    std::printf("%6s  %-10s %9s  %-8s %s\n", "job", "state", "", "user", "name");
    for (const json& j : list.value("jobs", json::array()))
      std::printf("%s\n", job_line(j).c_str());
    return;
  }
  const json j = client.get("/api/v1/jobs/" + std::to_string(f.job));
  if (f.json_out) return (void)std::printf("%s\n", j.dump(2).c_str());
  std::printf("%s\n", job_line(j).c_str());
  for (const json& h : j.value("health", json::array())) {
    std::printf("  rank %d: %s", h.value("rank", 0),
                h.value("last_event", std::string("-")).c_str());
    if (h.contains("step")) std::printf(" at step %lld", h["step"].get<long long>());
    if (h.contains("comm_exposed_ms"))
      std::printf(", %.2f ms a step waiting on communication", h["comm_exposed_ms"].get<double>());
    std::printf("\n");
  }
}

void run_logs(const JobFlags& f) {
  ServerClient client(f.server);
  int64_t after = 0;
  for (;;) {
    const json page = client.get("/api/v1/jobs/" + std::to_string(f.job) +
                                 "/logs?after=" + std::to_string(after));
    const json& lines = page.at("lines");
    for (const json& l : lines) {
      std::printf("%s\n", l.value("line", std::string()).c_str());
      after = l.value("seq", after);
    }
    std::fflush(stdout);
    if (!lines.empty()) continue;  // more may be waiting
    if (!f.follow || final_state(page.value("state", std::string()))) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

void run_cancel(const JobFlags& f) {
  ServerClient client(f.server);
  const json j = client.post("/api/v1/jobs/" + std::to_string(f.job) + "/cancel", json::object());
  std::printf("job %lld %s\n", static_cast<long long>(f.job),
              j.value("state", std::string()).c_str());
}

}  // namespace

void add_job_commands(CLI::App& app) {
  auto submit = std::make_shared<SubmitFlags>();
  CLI::App* cmd = app.add_subcommand("submit", "Queue a training job on a braid serve job server");
  cmd->add_option("config", submit->config, "the job's config (braid train's JSON)")->required();
  cmd->add_option("-n,--ranks", submit->ranks, "ranks of the job")->check(CLI::Range(1, 4096));
  cmd->add_option("--servers", submit->servers,
                  "strategies ps and fedavg: how many of the ranks are parameter servers")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--name", submit->name, "a name to show (default: the config's path)");
  cmd->add_option("--priority", submit->priority, "higher runs first (-1000 to 1000)")
      ->check(CLI::Range(-1000, 1000));
  cmd->add_flag("--json", submit->json_out, "print the server's answer as JSON");
  add_server_flags(cmd, submit->server);
  cmd->callback([submit] { run_submit(*submit); });

  auto status = std::make_shared<JobFlags>();
  cmd = app.add_subcommand("status", "Your jobs on a braid serve job server, or one of them");
  cmd->add_option("job", status->job, "a job's number (none: the list)");
  cmd->add_flag("--json", status->json_out, "print the server's answer as JSON");
  add_server_flags(cmd, status->server);
  cmd->callback([status] { run_status(*status); });

  auto logs = std::make_shared<JobFlags>();
  cmd = app.add_subcommand("logs", "A job's output lines, every rank's");
  cmd->add_option("job", logs->job, "the job's number")->required();
  cmd->add_flag("-f,--follow", logs->follow, "keep printing until the job ends");
  add_server_flags(cmd, logs->server);
  cmd->callback([logs] { run_logs(*logs); });

  auto cancel = std::make_shared<JobFlags>();
  cmd = app.add_subcommand("cancel", "Cancel a queued or running job");
  cmd->add_option("job", cancel->job, "the job's number")->required();
  add_server_flags(cmd, cancel->server);
  cmd->callback([cancel] { run_cancel(*cancel); });
}

}  // namespace braid::cli
