// braid serve's dashboard in a real headless Chromium (Debian's `chromium`, a test package:
// scripts/setup.sh --test-packages): the page as the browser builds it, read back with
// --dump-dom after its scripts ran against a real server. The job list holds the jobs, a
// job's view holds its curves and they grow while the job runs, and a job named like a
// script stays text.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"

namespace {

using braid::testing::run_braid;
using braid::testing::TempDir;
using nlohmann::json;

constexpr const char* kChromium = "/usr/bin/chromium";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `url` as Chromium renders it after `budget_ms` of the page's (virtual) time: the DOM.
// A screenshot of the same page goes to `png` when given (kept as the test's artefact).
std::string dump_dom(const TempDir& tmp, const std::string& url, int budget_ms,
                     const std::string& png = "") {
  const std::string flags =
      std::string(kChromium) +
      " --headless=new --no-sandbox --disable-gpu --no-first-run --user-data-dir=" +
      tmp.file("profile") + " --virtual-time-budget=" + std::to_string(budget_ms) +
      " --window-size=1400,1000 ";
  if (!png.empty())
    std::system((flags + "--screenshot=" + png + " '" + url + "' >/dev/null 2>&1").c_str());
  const std::string out = tmp.file("dom.html");
  std::system((flags + "--dump-dom '" + url + "' > " + out + " 2>/dev/null").c_str());
  return read_file(out);
}

// A server of its own, in the background (its output in a file).
struct ServeProcess {
  explicit ServeProcess(const TempDir& tmp) : log(tmp.file("serve.log")) {
    pid = ::fork();
    if (pid == 0) {
      std::freopen(log.c_str(), "w", stdout);
      std::freopen(log.c_str(), "a", stderr);
      ::execl(BRAID_BINARY, BRAID_BINARY, "serve", "--data-dir", tmp.file("data").c_str(), "--port",
              "0", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 300 && port == 0; ++i) {
      const std::string out = read_file(log);
      const size_t at = out.find("127.0.0.1:");
      if (at != std::string::npos) port = std::atoi(out.c_str() + at + 10);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    url = "http://127.0.0.1:" + std::to_string(port);
    token = read_file(tmp.file("data/admin-token"));
    token.erase(token.find_last_not_of('\n') + 1);
  }
  ~ServeProcess() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  std::string log, url, token;
  pid_t pid = -1;
  int port = 0;
};

int points_in(const std::string& dom) {
  const size_t at = dom.find("data-points=\"");
  return at == std::string::npos ? -1 : std::atoi(dom.c_str() + at + 13);
}

TEST(Dashboard, ShowsTheJobsAndTheirGrowingCurvesAndKeepsNamesAsText) {
  if (::access(kChromium, X_OK) != 0)
    GTEST_SKIP() << kChromium << " is missing: scripts/setup.sh --test-packages installs it";
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const ServeProcess server(tmp);
  ASSERT_GT(server.port, 0) << read_file(server.log);
  httplib::Client c(server.url);
  c.set_bearer_token_auth(server.token.c_str());
  const json job = {{"name", "<script>alert(1)</script>"},
                    {"ranks", 2},
                    {"config",
                     {{"model", "mlp"},
                      {"max_steps", 3000},
                      {"log_every", 5},
                      {"threads", 1},
                      {"eval_every", 50},
                      {"slow_step_ms", 5}}}};
  const auto submitted = c.Post("/api/v1/jobs", job.dump(), "application/json");
  ASSERT_TRUE(submitted && submitted->status == 201);
  const std::string id = std::to_string(json::parse(submitted->body).at("id").get<int64_t>());
  const pid_t worker = ::fork();
  if (worker == 0) {
    std::freopen(tmp.file("worker.log").c_str(), "w", stdout);
    std::freopen(tmp.file("worker.log").c_str(), "a", stderr);
    ::setenv("BRAID_SERVER", server.url.c_str(), 1);
    ::setenv("BRAID_TOKEN", server.token.c_str(), 1);
    ::execl(BRAID_BINARY, BRAID_BINARY, "worker", "--slots", "2", "--work-dir",
            tmp.file("w").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // The job list: the job, its name as text (escaped in the DOM), no alert.
  const std::string list =
      dump_dom(tmp, server.url + "/#token=" + server.token, 3000, tmp.file("dashboard-list.png"));
  EXPECT_NE(list.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos) << list;
  EXPECT_EQ(list.find("<script>alert(1)"), std::string::npos) << "the name became markup";
  // The job's view, twice while it runs: curves drawn (dygraphs' canvases) and growing.
  for (int i = 0; i < 100; ++i) {  // until its first train records arrived
    const auto r = c.Get(("/api/v1/jobs/" + id).c_str());
    if (r && json::parse(r->body).value("events", 0) > 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string view = server.url + "/#token=" + server.token + "&job=" + id;
  const std::string first = dump_dom(tmp, view, 3000);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const std::string second = dump_dom(tmp, view, 3000, tmp.file("dashboard-job.png"));
  EXPECT_NE(first.find("<canvas"), std::string::npos) << "no curve drawn:\n" << first;
  EXPECT_NE(second.find("rank"), std::string::npos);
  EXPECT_GT(points_in(first), 0) << first;
  EXPECT_GT(points_in(second), points_in(first)) << "the curves did not grow while it ran";
  // Screenshots are the test's artefacts: kept beside the build for a person to look at.
  const std::filesystem::path keep =
      std::filesystem::path(BRAID_BINARY).parent_path() / "test-artefacts";
  std::filesystem::create_directories(keep);
  for (const char* png : {"dashboard-list.png", "dashboard-job.png"})
    if (std::filesystem::exists(tmp.file(png)))
      std::filesystem::copy_file(tmp.file(png), keep / png,
                                 std::filesystem::copy_options::overwrite_existing);
  ::kill(worker, SIGTERM);
  ::waitpid(worker, nullptr, 0);
}

// A job of more records than one page holds (20,000): the page asks for every page at once
// and draws each record once, in order (a wrong offset drew some twice, or skipped some).
TEST(Dashboard, AJobOfSeveralPagesOfRecordsIsDrawnWholeAndOnce) {
  if (::access(kChromium, X_OK) != 0)
    GTEST_SKIP() << kChromium << " is missing: scripts/setup.sh --test-packages installs it";
  const TempDir tmp;
  const ServeProcess server(tmp);
  ASSERT_GT(server.port, 0) << read_file(server.log);
  httplib::Client c(server.url);
  c.set_bearer_token_auth(server.token.c_str());
  const json job = {{"name", "pages"}, {"ranks", 1}, {"config", {{"model", "mlp"}}}};
  const auto submitted = c.Post("/api/v1/jobs", job.dump(), "application/json");
  ASSERT_TRUE(submitted && submitted->status == 201);
  const std::string id = std::to_string(json::parse(submitted->body).at("id").get<int64_t>());
  constexpr int kRecords = 45000, kBatch = 5000;
  for (int first = 0; first < kRecords; first += kBatch) {
    json events = json::array();
    for (int s = first + 1; s <= first + kBatch; ++s)
      events.push_back({{"event", "train"}, {"step", s}, {"loss", 1.0 / s}, {"rank", 0}});
    const auto r = c.Post(("/api/v1/jobs/" + id + "/events").c_str(),
                          json{{"rank", 0}, {"events", events}}.dump(), "application/json");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  }
  const std::string dom =
      dump_dom(tmp, server.url + "/#token=" + server.token + "&job=" + id, 10000);
  EXPECT_EQ(points_in(dom), kRecords) << dom.substr(0, 2000);
}

}  // namespace
