#include "serve/api_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "serve/auth.h"
#include "serve/dashboard_html.h"
#include "serve/gang_scheduler.h"
#include "train/config.h"

namespace braid::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "application/json" alone would be compressed by Debian's cpp-httplib (built with Brotli)
// whenever a browser accepts "br", at Brotli's slowest setting: a page of 20,000 events took
// 4.7 s instead of 0.15 s. The charset parameter (valid for JSON) keeps answers as they are.
constexpr const char* kJson = "application/json; charset=utf-8";
constexpr int kListenBacklog = 1024;

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), kJson);
}

void error(httplib::Response& res, int status, const std::string& what) {
  reply(res, status, {{"error", what}});
}

// The body as a JSON object; a 400 naming what is wrong otherwise.
std::optional<json> json_body(const httplib::Request& req, httplib::Response& res) {
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::parse_error& e) {
    error(res, 400, std::string("the body is not valid JSON: ") + e.what());
    return std::nullopt;
  }
  if (!body.is_object()) {
    error(res, 400, "the body must be a JSON object");
    return std::nullopt;
  }
  return body;
}

int64_t int_param(const httplib::Request& req, const char* name, int64_t fallback, int64_t lo,
                  int64_t hi) {
  if (!req.has_param(name)) return fallback;
  try {
    const int64_t v = std::stoll(req.get_param_value(name));
    return std::clamp(v, lo, hi);
  } catch (const std::exception&) {
    return fallback;
  }
}

// ?after=SEQ&limit=N of a stream's page: the records after SEQ, at most N (10,000 by default).
struct Page {
  int64_t after;
  int limit;
};
Page page_of(const httplib::Request& req) {
  return {int_param(req, "after", 0, 0, INT64_MAX),
          static_cast<int>(int_param(req, "limit", 10000, 1, 100000))};
}

// A job's file name: letters, digits, '.', '_', '-', and one optional "checkpoint/" folder;
// nothing that could leave the job's folder.
bool valid_file_name(const std::string& name) {
  constexpr std::string_view kFolder = "checkpoint/";
  std::string_view base = name;
  if (base.rfind(kFolder, 0) == 0) base.remove_prefix(kFolder.size());
  if (base.empty() || base.size() > 128 || base.find("..") != std::string_view::npos) return false;
  return std::all_of(base.begin(), base.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
  });
}

// What a rank's last event says of it, into its row of the health table.
void fold(json& row, const json& record) {
  row["last_event"] = record.value("event", "");
  if (record.contains("time")) row["last_seen"] = record["time"];
  for (const char* key : {"step", "comm_exposed_ms", "step_ms"})
    if (record.contains(key)) row[key] = record[key];
}

}  // namespace

struct ApiServer::Thread {
  std::thread thread;
  // Once a second: a lost worker's jobs fail even when no other worker calls.
  std::thread ticker;
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;
};

ApiServer::ApiServer(JobStore& store, ApiOptions options)
    : store_(store),
      options_(std::move(options)),
      limiter_(options_.requests_per_second, options_.burst) {
  const bool tls = !options_.tls_cert.empty() || !options_.tls_key.empty();
  if (tls) {
    BRAID_CHECK(!options_.tls_cert.empty() && !options_.tls_key.empty(),
                "braid serve: TLS needs both --tls-cert and --tls-key (PEM files)");
    for (const std::string& f : {options_.tls_cert, options_.tls_key})
      BRAID_CHECK(fs::exists(f), "braid serve: TLS file '", f, "' does not exist");
    auto ssl =
        std::make_unique<httplib::SSLServer>(options_.tls_cert.c_str(), options_.tls_key.c_str());
    BRAID_CHECK(ssl->is_valid(), "braid serve: OpenSSL refused the certificate '",
                options_.tls_cert, "' or its key '", options_.tls_key,
                "' (PEM files, the key unencrypted and matching the certificate)");
    http_ = std::move(ssl);
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  http_->set_payload_max_length(options_.max_body_bytes);
  // A connection holds a pool thread while it is kept alive: enough threads for a hundred
  // dashboards and the workers, each connection kept (a client reconnecting after every few
  // requests overflowed cpp-httplib's listen backlog of 5: its SYNs were dropped and
  // retried after 1 s, 3 s: a p99 of a second in braid bench serve).
  http_->new_task_queue = [] { return new httplib::ThreadPool(256); };
  http_->set_keep_alive_max_count(1000000);
  // Small answers on kept connections: without it, Nagle and the peer's delayed ACK hold
  // each one 40 ms.
  http_->set_tcp_nodelay(true);
  // cpp-httplib's own options set SO_REUSEPORT, so a second server on the same port would
  // start and take half the connections; SO_REUSEADDR alone lets a restarted server listen
  // while its predecessor's connections linger in TIME_WAIT.
  http_->set_socket_options([this](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket_ = sock;
  });
  add_routes();
}

ApiServer::~ApiServer() { stop(); }

void ApiServer::start() {
  port_ = options_.port == 0
              ? http_->bind_to_any_port(options_.host)
              : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  BRAID_CHECK(port_ > 0, "braid serve: cannot listen on ", options_.host, ":", options_.port,
              " (in use, or not an address of this host); choose another --port or --host");
  // Debian's cpp-httplib is built with a listen backlog of 5: a hundred clients connecting
  // at once overflowed it, and their first calls failed a second later. Listening again
  // on a bound socket sets its queue's length.
  if (listen_socket_ >= 0 && ::listen(listen_socket_, kListenBacklog) != 0)
    log_warn("braid serve: cannot lengthen the listen queue to ", kListenBacklog, " (",
             std::strerror(errno), "); clients connecting at once may see their first call fail");
  thread_ = std::make_unique<Thread>();
  thread_->thread = std::thread([this] { http_->listen_after_bind(); });
  thread_->ticker = std::thread([this] {
    std::unique_lock lock(thread_->mu);
    while (!thread_->wake.wait_for(lock, std::chrono::seconds(1),
                                   [this] { return thread_->stopping; })) {
      lock.unlock();
      try {
        schedule(unix_now());
      } catch (const std::exception& e) {
        log_warn("braid serve: placing jobs: ", e.what());
      }
      lock.lock();
    }
  });
}

void ApiServer::stop() {
  if (!thread_) return;
  {
    const std::lock_guard lock(thread_->mu);
    thread_->stopping = true;
  }
  thread_->wake.notify_all();
  thread_->ticker.join();
  http_->stop();
  thread_->thread.join();
  thread_.reset();
}

void ApiServer::note_events(int64_t job, int rank, const std::vector<json>& records) {
  const std::lock_guard lock(health_mu_);
  auto it = health_.find(job);
  if (it == health_.end() || rank < 0 || static_cast<size_t>(rank) >= it->second.size()) return;
  for (const json& r : records) fold(it->second[static_cast<size_t>(rank)], r);
}

json ApiServer::health(const JobRecord& job) {
  {
    const std::lock_guard lock(health_mu_);
    if (const auto it = health_.find(job.id); it != health_.end()) return it->second;
  }
  std::vector<json> rows(static_cast<size_t>(job.ranks));
  for (int r = 0; r < job.ranks; ++r) rows[static_cast<size_t>(r)] = {{"rank", r}};
  // Every rank's last records are among the last thousand (each rank sends one every
  // log_every steps, as often as the others).
  const int64_t count = store_.event_count(job.id);
  for (const EventRecord& e : store_.events_since(job.id, std::max<int64_t>(0, count - 1024), 1024))
    if (e.rank >= 0 && e.rank < job.ranks) fold(rows[static_cast<size_t>(e.rank)], e.record);
  const std::lock_guard lock(health_mu_);
  // Bounded: the oldest jobs' rows go first (read again from the database if asked for).
  while (health_.size() >= kHealthCacheJobs) health_.erase(health_.begin());
  return health_.try_emplace(job.id, std::move(rows)).first->second;
}

void ApiServer::schedule(double now) {
  const std::lock_guard lock(schedule_mu_);
  // A worker unheard for worker_timeout_s has lost its jobs.
  std::vector<WorkerSlots> live;
  std::vector<JobRecord> placed =
      store_.jobs_in({JobState::starting, JobState::running, JobState::cancelling});
  for (const WorkerRecord& w : store_.workers()) {
    if (now - w.last_heartbeat > options_.worker_timeout_s) {
      for (const JobRecord& j : placed)
        for (const HostRanks& h : j.placement)
          if (h.worker == w.id)
            store_.transition(j.id, {JobState::starting, JobState::running, JobState::cancelling},
                              JobState::failed, now,
                              "worker " + std::to_string(w.id) + " (" + w.host + ") unheard for " +
                                  std::to_string(static_cast<int>(now - w.last_heartbeat)) +
                                  " s: its ranks are lost",
                              -1);
      continue;
    }
    int used = 0;
    for (const JobRecord& j : placed)
      for (const HostRanks& h : j.placement)
        if (h.worker == w.id) used += h.ranks;
    live.push_back({w.id, w.slots - used});
  }
  std::vector<QueuedJob> queue;
  for (const JobRecord& j : store_.jobs_in({JobState::queued}))
    queue.push_back({.id = j.id,
                     .ranks = j.ranks,
                     .priority = j.priority,
                     .submitted = j.submitted,
                     .one_host = j.servers > 0});
  std::set<std::string> endpoints_taken;
  for (const JobRecord& j : placed)
    if (!j.rendezvous.endpoint.empty()) endpoints_taken.insert(j.rendezvous.endpoint);
  for (const JobPlacement& p : place_jobs(queue, live)) {
    std::vector<HostRanks> hosts;
    for (const HostShare& h : p.hosts) hosts.push_back({h.worker, h.ranks});
    Rendezvous meet;
    if (hosts.size() > 1) {
      // The job's store listens on its first worker, at a port no other placed job holds.
      const auto first = store_.worker(hosts[0].worker);
      const std::string address = first && !first->address.empty() ? first->address : "127.0.0.1";
      for (int port = options_.rdzv_port_first; port <= options_.rdzv_port_last; ++port) {
        const std::string endpoint = address + ":" + std::to_string(port);
        if (endpoints_taken.insert(endpoint).second) {
          meet.endpoint = endpoint;
          break;
        }
      }
      if (meet.endpoint.empty()) {
        log_warn("braid serve: job ", p.job, " waits: every rendezvous port from ",
                 options_.rdzv_port_first, " to ", options_.rdzv_port_last, " is taken");
        break;
      }
      meet.secret = new_token().substr(6);  // 64 hex digits
    }
    store_.start(p.job, hosts, now, meet);
  }
}

void ApiServer::add_routes() {
  httplib::Server& s = *http_;
  // The rate limit comes first, keyed by the token presented (or the address without one), so
  // a flood of bad tokens is limited too.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/api/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    const auto token = bearer_token(req.get_header_value("Authorization"));
    const std::string key = token ? token_hash(*token) : "addr:" + req.remote_addr;
    if (!limiter_.allow(key, unix_now())) {
      res.set_header("Retry-After", "1");
      error(res, 429, "too many requests; slow down");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const IoError& e) {  // the database or the disk: not the caller's doing
          error(res, 500, std::string("server error: ") + e.what());
        } catch (const Error& e) {  // a check on what the caller sent
          error(res, 400, e.what());
        } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
          error(res, 400, std::string("the request's JSON: ") + e.what());
        } catch (const std::exception& e) {  // a defect of the server's own: said, and logged
          log_warn("braid serve: ", req.method, " ", req.path, ": ", e.what());
          error(res, 500, std::string("internal server error: ") + e.what());
        }
      });

  // The dashboard: its page (no data: that needs a token) and Debian's dygraphs.
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kDashboardHtml, "text/html; charset=utf-8");
  });
  s.Get(R"(/static/(dygraph\.min\.js|dygraph\.min\.css))",
        [this](const httplib::Request& req, httplib::Response& res) {
          const fs::path path = fs::path(options_.dashboard_dir) / std::string(req.matches[1]);
          std::ifstream in(path, std::ios::binary);
          if (!in)
            return error(res, 404,
                         path.string() +
                             " is missing: install Debian's libjs-dygraphs "
                             "(scripts/setup.sh)");
          res.set_content(std::string(std::istreambuf_iterator<char>(in), {}),
                          path.extension() == ".js" ? "application/javascript; charset=utf-8"
                                                    : "text/css; charset=utf-8");
        });

  // Every route below: the user the token names, or a 401.
  auto authed = [this](auto handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      const auto token = bearer_token(req.get_header_value("Authorization"));
      if (!token) {
        res.set_header("WWW-Authenticate", "Bearer");
        return error(res, 401, "no token: send Authorization: Bearer TOKEN");
      }
      const std::optional<User> user = store_.user_for_token(*token);
      if (!user) {
        res.set_header("WWW-Authenticate", "Bearer error=\"invalid_token\"");
        return error(res, 401, "the token is not valid");
      }
      handler(*user, req, res);
    };
  };
  auto admin_only = [](const User& u, httplib::Response& res) {
    if (u.admin) return true;
    error(res, 403, "only an admin may do this");
    return false;
  };
  // The job of the path's first number, if this user may see it (404 otherwise: another's
  // job is not shown to exist).
  auto visible_job = [this](const User& u, const httplib::Request& req,
                            httplib::Response& res) -> std::optional<JobRecord> {
    std::optional<JobRecord> j = store_.job(std::stoll(req.matches[1]));
    if (!j || (!u.admin && j->user != u.id)) {
      error(res, 404, "no job " + std::string(req.matches[1]));
      return std::nullopt;
    }
    return j;
  };

  // A worker's report on a job: an admin's token, a JSON body, a job that exists.
  auto worker_call = [this, admin_only](
                         const User& u, const httplib::Request& req,
                         httplib::Response& res) -> std::optional<std::pair<int64_t, json>> {
    if (!admin_only(u, res)) return std::nullopt;
    auto body = json_body(req, res);
    if (!body) return std::nullopt;
    const int64_t job = std::stoll(req.matches[1]);
    if (!store_.job(job)) {
      error(res, 404, "no job " + std::to_string(job));
      return std::nullopt;
    }
    return std::pair{job, std::move(*body)};
  };

  s.Post("/api/v1/users", authed([this, admin_only](const User& u, const httplib::Request& req,
                                                    httplib::Response& res) {
           if (!admin_only(u, res)) return;
           const auto body = json_body(req, res);
           if (!body) return;
           if (!body->contains("name") || !(*body)["name"].is_string())
             return error(res, 400, "a user needs a \"name\" (a string)");
           const auto [user, token] =
               store_.create_user((*body)["name"], body->value("admin", false));
           reply(res, 201,
                 {{"id", user.id}, {"name", user.name}, {"admin", user.admin}, {"token", token}});
         }));

  s.Post(
      "/api/v1/jobs",
      authed([this](const User& u, const httplib::Request& req, httplib::Response& res) {
        const auto body = json_body(req, res);
        if (!body) return;
        const json config = body->value("config", json());
        if (!config.is_object())
          return error(res, 400, "a job needs a \"config\": braid train's JSON config (an object)");
        std::string strategy;
        try {
          strategy = train::config_from_json(config).strategy;  // braid train's own check
        } catch (const Error& e) {
          return error(res, 400, std::string("config: ") + e.what());
        }
        const json ranks = body->value("ranks", json(1));
        if (!ranks.is_number_integer() || ranks.get<int64_t>() < 1 || ranks.get<int64_t>() > 4096)
          return error(res, 400, "\"ranks\" is a whole number from 1 to 4096");
        const json priority = body->value("priority", json(0));
        if (!priority.is_number_integer() || std::abs(priority.get<int64_t>()) > 1000)
          return error(res, 400, "\"priority\" is a whole number from -1000 to 1000");
        const json name = body->value("name", json("job"));
        if (!name.is_string() || name.get<std::string>().size() > 200)
          return error(res, 400, "\"name\" is a string of at most 200 characters");
        // A parameter-server job (ps, fedavg) says how many of its ranks serve.
        const json servers = body->value("servers", json(0));
        const bool ps = strategy == "ps" || strategy == "fedavg";
        if (!servers.is_number_integer() || servers.get<int64_t>() < (ps ? 1 : 0) ||
            servers.get<int64_t>() >= (ps ? ranks.get<int64_t>() : 1))
          return error(res, 400,
                       ps ? "strategy " + strategy +
                                " runs parameter servers: give \"servers\", 1 to ranks - 1 (the "
                                "rest are workers)"
                          : std::string("\"servers\" is for strategies ps and fedavg"));
        const double now = unix_now();
        const JobRecord j = store_.submit(u.id, name, config, ranks.get<int>(), priority.get<int>(),
                                          now, servers.get<int>());
        schedule(now);
        reply(res, 201, store_.job(j.id)->to_json());
      }));

  s.Get("/api/v1/jobs",
        authed([this](const User& u, const httplib::Request&, httplib::Response& res) {
          json list = json::array();
          for (const JobRecord& j : store_.jobs(u.admin ? std::nullopt : std::optional(u.id))) {
            json item = j.to_json();
            item.erase("config");  // the list stays small; GET jobs/ID has it
            list.push_back(std::move(item));
          }
          reply(res, 200, {{"jobs", list}});
        }));

  s.Get(R"(/api/v1/jobs/(\d+))",
        authed([this, visible_job](const User& u, const httplib::Request& req,
                                   httplib::Response& res) {
          const auto j = visible_job(u, req, res);
          if (!j) return;
          json out = j->to_json();
          out["events"] = store_.event_count(j->id);
          out["health"] = health(*j);
          reply(res, 200, out);
        }));

  s.Post(R"(/api/v1/jobs/(\d+)/cancel)",
         authed([this, visible_job](const User& u, const httplib::Request& req,
                                    httplib::Response& res) {
           const auto j = visible_job(u, req, res);
           if (!j) return;
           const double now = unix_now();
           const std::string why = "cancelled by " + u.name;
           if (store_.transition(j->id, {JobState::queued}, JobState::cancelled, now, why) ||
               store_.transition(j->id, {JobState::starting, JobState::running},
                                 JobState::cancelling, now, why))
             return reply(res, 200, store_.job(j->id)->to_json());
           error(res, 409,
                 "job " + std::to_string(j->id) + " is " + job_state_name(j->state) +
                     ": nothing to cancel");
         }));

  s.Get(R"(/api/v1/jobs/(\d+)/events)",
        authed([this, visible_job](const User& u, const httplib::Request& req,
                                   httplib::Response& res) {
          const auto j = visible_job(u, req, res);
          if (!j) return;
          // The records go out as stored (each was checked as JSON when it came in).
          const Page page = page_of(req);
          res.set_content(
              "{\"state\":\"" + std::string(job_state_name(j->state)) +
                  "\",\"events\":" + store_.events_since_json(j->id, page.after, page.limit) + "}",
              kJson);
        }));

  s.Get(R"(/api/v1/jobs/(\d+)/logs)",
        authed([this, visible_job](const User& u, const httplib::Request& req,
                                   httplib::Response& res) {
          const auto j = visible_job(u, req, res);
          if (!j) return;
          json list = json::array();
          const Page page = page_of(req);
          for (const LogLine& l : store_.logs_since(j->id, page.after, page.limit))
            list.push_back({{"seq", l.seq}, {"rank", l.rank}, {"line", l.line}});
          reply(res, 200, {{"lines", list}, {"state", job_state_name(j->state)}});
        }));

  s.Get(R"(/api/v1/jobs/(\d+)/files/(.+))",
        authed([this, visible_job](const User& u, const httplib::Request& req,
                                   httplib::Response& res) {
          const auto j = visible_job(u, req, res);
          if (!j) return;
          const std::string name = req.matches[2];
          const fs::path path = fs::path(options_.files_dir) / std::to_string(j->id) / name;
          if (!valid_file_name(name) || !fs::is_regular_file(path))
            return error(res, 404, "job " + std::to_string(j->id) + " has no file '" + name + "'");
          std::ifstream in(path, std::ios::binary);
          res.set_content(std::string(std::istreambuf_iterator<char>(in), {}),
                          "application/octet-stream");
        }));

  // The workers' side.
  s.Post("/api/v1/workers", authed([this, admin_only](const User& u, const httplib::Request& req,
                                                      httplib::Response& res) {
           if (!admin_only(u, res)) return;
           const auto body = json_body(req, res);
           if (!body) return;
           const json host = body->value("host", json()), slots = body->value("slots", json());
           if (!host.is_string() || !slots.is_number_integer() || slots.get<int64_t>() < 1)
             return error(res, 400, "a worker sends \"host\" (a string) and \"slots\" (>= 1)");
           // Where the other hosts of a job reach this one: what it says, else the address
           // its call came from.
           const json given = body->value("address", json());
           if (!given.is_null() && !given.is_string())
             return error(res, 400, "a worker's \"address\" is a string");
           const std::string address = given.is_string() && !given.get<std::string>().empty()
                                           ? given.get<std::string>()
                                           : req.remote_addr;
           const double now = unix_now();
           const int64_t id = store_.register_worker(host, address, slots.get<int>(),
                                                     body->value("memory", int64_t{0}), now);
           reply(res, 201, {{"id", id}});
         }));

  s.Post(R"(/api/v1/workers/(\d+)/heartbeat)",
         authed([this, admin_only](const User& u, const httplib::Request& req,
                                   httplib::Response& res) {
           if (!admin_only(u, res)) return;
           const auto body = json_body(req, res);
           if (!body) return;
           const int64_t worker = std::stoll(req.matches[1]);
           const auto w = store_.worker(worker);
           if (!w)
             return error(res, 404, "no worker " + std::string(req.matches[1]) + "; register");
           const double now = unix_now();
           store_.heartbeat(worker, now);
           schedule(now);
           std::set<int64_t> running;
           for (const auto& id : body->value("running", json::array()))
             if (id.is_number_integer()) running.insert(id.get<int64_t>());
           json start = json::array(), cancel = json::array();
           auto has = [](const std::vector<int64_t>& v, int64_t x) {
             return std::find(v.begin(), v.end(), x) != v.end();
           };
           for (const JobRecord& j :
                store_.jobs_in({JobState::starting, JobState::running, JobState::cancelling})) {
             int node = -1;
             for (size_t h = 0; h < j.placement.size(); ++h)
               if (j.placement[h].worker == worker) node = static_cast<int>(h);
             if (node < 0) continue;
             const bool runs = running.count(j.id) > 0;
             if (j.state == JobState::cancelling) {
               cancel.push_back(j.id);
             } else if (runs) {
               // Its report that it started may have been lost (the server was down).
               if (!has(j.hosts_started, worker)) store_.host_started(j.id, worker);
             } else if (has(j.hosts_finished, worker)) {
               // Its part is done; the other hosts' goes on.
             } else if (has(j.hosts_started, worker)) {
               // It started its part and no longer has it, without saying how it ended:
               // the worker was restarted and its ranks are gone.
               store_.transition(j.id, {JobState::starting, JobState::running}, JobState::failed,
                                 now,
                                 "worker " + std::to_string(worker) + " (" + w->host +
                                     ") no longer runs this job's ranks: it was restarted "
                                     "while they ran",
                                 -1);
             } else {
               json order = {
                   {"job", j.id},         {"config", j.config},
                   {"ranks", j.ranks},    {"nnodes", j.placement.size()},
                   {"node_rank", node},   {"nproc", j.placement[static_cast<size_t>(node)].ranks},
                   {"servers", j.servers}};
               if (!j.rendezvous.endpoint.empty()) {
                 order["rdzv_endpoint"] = j.rendezvous.endpoint;
                 order["secret"] = j.rendezvous.secret;
               }
               start.push_back(std::move(order));
             }
           }
           // A job the worker runs that the server holds finished (cancelled while the
           // server was down, say): stop it.
           for (const int64_t id : running) {
             const auto j = store_.job(id);
             if (!j || is_final(j->state)) cancel.push_back(id);
           }
           reply(res, 200, {{"start", start}, {"cancel", cancel}});
         }));

  s.Post(R"(/api/v1/jobs/(\d+)/events)",
         authed([this, worker_call](const User& u, const httplib::Request& req,
                                    httplib::Response& res) {
           const auto call = worker_call(u, req, res);
           if (!call) return;
           const auto& [job, body] = *call;
           const json events = body.value("events", json());
           if (!events.is_array() || !body.value("rank", json()).is_number_integer())
             return error(res, 400, "a batch is {\"rank\": R, \"events\": [records]}");
           const int rank = body["rank"].get<int>();
           const auto records = events.get<std::vector<json>>();
           const int64_t count =
               store_.append_events(job, rank, records, body.value("first", int64_t{-1}));
           note_events(job, rank, records);
           reply(res, 200, {{"events", count}});
         }));

  s.Post(R"(/api/v1/jobs/(\d+)/logs)",
         authed([this, worker_call](const User& u, const httplib::Request& req,
                                    httplib::Response& res) {
           const auto call = worker_call(u, req, res);
           if (!call) return;
           const auto& [job, body] = *call;
           std::vector<std::pair<int, std::string>> lines;
           for (const json& l : body.value("lines", json::array())) {
             if (!l.is_object() || !l.value("line", json()).is_string())
               return error(res, 400, "a log line is {\"rank\": R, \"line\": TEXT}");
             lines.emplace_back(l.value("rank", -1), l["line"].get<std::string>());
           }
           store_.append_logs(job, lines, body.value("worker", int64_t{0}),
                              body.value("first", int64_t{-1}));
           reply(res, 200, {{"lines", lines.size()}});
         }));

  s.Post(R"(/api/v1/jobs/(\d+)/state)",
         authed([this, admin_only](const User& u, const httplib::Request& req,
                                   httplib::Response& res) {
           if (!admin_only(u, res)) return;
           const auto body = json_body(req, res);
           if (!body) return;
           const int64_t job = std::stoll(req.matches[1]);
           const JobState to = parse_job_state(body->value("state", std::string()));
           const double now = unix_now();
           const auto before = store_.job(job);
           if (!before) return error(res, 404, "no job " + std::to_string(job));
           // Said again (a worker resending after the server's restart): already so.
           if (before->state == to && to != JobState::running)
             return reply(res, 200, before->to_json());
           const int64_t worker = body->value("worker", int64_t{0});
           if (to == JobState::running) {
             if (!store_.host_started(job, worker))
               return reply(res, 409, store_.job(job)->to_json());
             return reply(res, 200, store_.job(job)->to_json());
           }
           if (to == JobState::succeeded && before->placement.size() > 1) {
             // One host's part is done; the job, once every host's is.
             store_.host_succeeded(job, worker, now);
             return reply(res, 200, store_.job(job)->to_json());
           }
           std::vector<JobState> from;
           if (to == JobState::cancelled)
             from = {JobState::cancelling};
           else if (to == JobState::succeeded || to == JobState::failed)
             from = {JobState::starting, JobState::running, JobState::cancelling};
           else
             return error(res, 400, "a worker reports running, succeeded, failed or cancelled");
           const bool moved = store_.transition(job, from, to, now, body->value("message", ""),
                                                body->value("exit_code", 0));
           const auto j = store_.job(job);
           if (!j) return error(res, 404, "no job " + std::to_string(job));
           reply(res, moved ? 200 : 409, j->to_json());
         }));

  s.Put(R"(/api/v1/jobs/(\d+)/files/(.+))",
        authed(
            [this, admin_only](const User& u, const httplib::Request& req, httplib::Response& res) {
              if (!admin_only(u, res)) return;
              const int64_t job = std::stoll(req.matches[1]);
              const std::string name = req.matches[2];
              if (!store_.job(job)) return error(res, 404, "no job " + std::to_string(job));
              if (!valid_file_name(name))
                return error(res, 400, "file name '" + name + "': letters, digits, . _ - only");
              const fs::path path = fs::path(options_.files_dir) / std::to_string(job) / name;
              fs::create_directories(path.parent_path());
              const fs::path part = path.string() + ".part";
              {
                std::ofstream out(part, std::ios::binary);
                out.write(req.body.data(), static_cast<std::streamsize>(req.body.size()));
                if (!out.good()) BRAID_THROW(IoError, "writing '", part.string(), "'");
              }
              fs::rename(part, path);
              reply(res, 201, {{"bytes", req.body.size()}});
            }));
}

}  // namespace braid::serve
