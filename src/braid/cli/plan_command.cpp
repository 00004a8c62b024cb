// `braid plan`: which strategy to run a model with on a cluster (plan/planner.h).
//
//   braid plan --model gpt-small --cluster cluster.json --global-batch 64
//       every configuration that fits, fastest first, each with its predicted step split
//       into compute, exposed communication and pipeline bubble, and the command for the
//       best. The model's profile is measured here first (seconds), or read with --profile.
//   braid plan scaling --model M --cluster FILE --batch-per-rank b [--max-ranks 4096]
//       the best configuration of each strategy at 1, 2, 4, ... ranks of the cluster's
//       hosts: step time and efficiency against one rank (weak scaling), a table and --svg.
//   braid plan measure-cluster --out FILE [--inter JSONL]
//       this machine as a cluster file: cores and memory, the intra-host link fitted from a
//       2-rank shared-memory ring allreduce; the inter-host link from `braid bench
//       allreduce --json` lines measured across hosts (--inter), else the same.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/plan_plot.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "plan/scaling.h"

namespace braid::cli {
namespace {

using nlohmann::json;

struct PlanFlags {
  std::string model = "gpt-small";
  std::string cluster;
  std::string profile;  // read if it exists, else measured and written there
  int batch = 0;
  int batch_per_rank = 8;
  int max_ranks = 4096;
  int64_t seq_len = 128;
  int threads = 1;
  std::vector<int64_t> profile_micro_batches = {1, 4};
  int profile_repeats = 3;
  int top = 10;
  int ranks = 0;  // 0: the cluster's
  int hosts = 1;
  int cores = 0;  // 0: this machine's
  bool json = false;
  bool all = false;
  std::string svg;
  std::string out;
  std::string inter;
};

json model_spec(const std::string& model) {
  if (!model.empty() && model.front() == '{') return json::parse(model);
  if (model.size() > 5 && model.substr(model.size() - 5) == ".json") {
    std::ifstream in(model);
    BRAID_CHECK(in.good(), "plan: model file '", model, "' cannot be read");
    return json::parse(in);
  }
  return model;
}

plan::ModelProfile load_or_measure(const PlanFlags& f) {
  if (!f.profile.empty()) {
    std::ifstream in(f.profile);
    if (in.good()) {
      const plan::ModelProfile p =
          plan::parse_profile(json::parse(in), "profile '" + f.profile + "'");
      BRAID_CHECK(p.model == model_spec(f.model), "plan: profile '", f.profile, "' is of model ",
                  p.model.dump(), ", not ", f.model, "; give another --profile path");
      return p;
    }
  }
  set_blas_threads(f.threads);
  plan::ProfileOptions options;
  options.seq_len = f.seq_len;
  BRAID_CHECK(f.profile_micro_batches.size() == 2 &&
                  f.profile_micro_batches[0] < f.profile_micro_batches[1] &&
                  f.profile_micro_batches[0] >= 1,
              "plan: --profile-micro-batches takes two sizes, the smaller first (1,4)");
  options.micro_batches = f.profile_micro_batches;
  options.repeats = f.profile_repeats;
  log_info("plan: measuring ", f.model, " on this machine (", f.threads, " thread",
           f.threads == 1 ? "" : "s", ")");
  const plan::ModelProfile p = plan::measure_profile(model_spec(f.model), options);
  if (!f.profile.empty()) {
    std::ofstream out(f.profile);
    out << plan::profile_json(p).dump(1) << "\n";
    BRAID_CHECK(out.good(), "plan: cannot write the profile to '", f.profile, "'");
  }
  return p;
}

std::string seconds(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

json candidate_json(const plan::Candidate& c) {
  const plan::Prediction& p = c.prediction;
  return {{"config", plan::describe(c.config)}, {"step_s", p.step_s},
          {"samples_per_s", p.samples_per_s},   {"compute_s", p.compute_s},
          {"exposed_comm_s", p.exposed_comm_s}, {"bubble_s", p.bubble_s},
          {"memory_bytes", p.memory.total()},   {"fits", p.fits},
          {"same_training", c.same_training}};
}

void run_plan(const PlanFlags& f) {
  BRAID_CHECK(!f.cluster.empty(), "plan: --cluster FILE is needed (write one, or measure this ",
              "machine's with `braid plan measure-cluster --out FILE`)");
  plan::Cluster cluster = plan::load_cluster(f.cluster);
  if (f.ranks > 0) cluster = cluster.with_ranks(f.ranks);
  const int batch = f.batch > 0 ? f.batch : f.batch_per_rank * cluster.ranks();
  const plan::ModelProfile profile = load_or_measure(f);
  plan::PlanOptions options;
  options.batch = batch;
  const std::vector<plan::Candidate> ranked = plan::plan_all(profile, cluster, options);
  if (f.json) {
    for (const plan::Candidate& c : ranked)
      if (f.all || c.prediction.fits) std::printf("%s\n", candidate_json(c).dump().c_str());
    return;
  }
  std::printf(
      "model %s, %.1fM parameters; cluster %d host%s x %d ranks (%d ranks), %s a rank; "
      "global batch %d\n",
      f.model.c_str(), profile.params() / 1e6, cluster.hosts, cluster.hosts == 1 ? "" : "s",
      cluster.ranks_per_host, cluster.ranks(), gib(cluster.memory_per_rank()).c_str(), batch);
  std::printf("%-4s %-40s %12s %10s %10s %10s %10s %10s\n", "rank", "configuration", "samples/s",
              "step", "compute", "exposed", "bubble", "memory");
  int shown = 0, over = 0;
  for (const plan::Candidate& c : ranked) {
    if (!c.prediction.fits) {
      ++over;
      continue;
    }
    if (shown >= f.top) continue;
    const plan::Prediction& p = c.prediction;
    std::printf("%-4d %-40s %12.1f %10s %10s %10s %10s %10s%s\n", ++shown,
                plan::describe(c.config).c_str(), p.samples_per_s, seconds(p.step_s).c_str(),
                seconds(p.compute_s).c_str(), seconds(p.exposed_comm_s).c_str(),
                seconds(p.bubble_s).c_str(), gib(p.memory.total()).c_str(),
                c.same_training ? "" : "  (changes the optimisation)");
  }
  std::printf("%d configurations; %d do not fit %s a rank\n", static_cast<int>(ranked.size()), over,
              gib(cluster.memory_per_rank()).c_str());
  const plan::Candidate* top = plan::best(ranked);
  BRAID_CHECK(top != nullptr, "plan: no configuration of ", f.model, " fits ",
              gib(cluster.memory_per_rank()), " a rank on ", cluster.ranks(),
              " ranks; the smallest needs ",
              ranked.empty() ? std::string("?") : gib(ranked.back().prediction.memory.total()),
              ": more ranks, or hosts with more memory");
  std::printf("run the best:\n  %s\n",
              plan::train_command(top->config, f.model, cluster.ranks(), batch).c_str());
}

void run_scaling(const PlanFlags& f) {
  BRAID_CHECK(!f.cluster.empty(), "plan scaling: --cluster FILE is needed");
  const plan::Cluster cluster = plan::load_cluster(f.cluster);
  const plan::ModelProfile profile = load_or_measure(f);
  const plan::ScalingReport report =
      plan::scaling_report(profile, cluster, f.batch_per_rank, f.max_ranks);
  if (f.json) {
    std::printf("%s\n", plan::scaling_json(report).dump().c_str());
  } else {
    std::printf("%s", plan::scaling_table(report).c_str());
  }
  if (!f.svg.empty()) {
    write_scaling_svg(report, f.svg);
    std::printf("plot: %s\n", f.svg.c_str());
  }
}

// A 2-rank ring allreduce takes 2 latencies + bytes / bandwidth: fitted from the smallest
// and the largest message of `lines` (bench allreduce --json, "[rank 0] " prefixes allowed).
plan::Link fit_link(std::istream& lines, const std::string& where) {
  double small_b = 0, small_t = 0, big_b = 0, big_t = 0;
  std::string line;
  while (std::getline(lines, line)) {
    const size_t brace = line.find('{');
    if (brace == std::string::npos) continue;
    const json j = json::parse(line.substr(brace), nullptr, false);
    if (j.is_discarded() || !j.contains("bytes") || !j.contains("time_us")) continue;
    BRAID_CHECK(j.value("ranks", 2) == 2 && j.value("algorithm", "ring") == "ring", where,
                ": fit a link from a 2-rank ring allreduce (bench allreduce -n 2 --algorithm ",
                "ring --json)");
    const double b = j["bytes"].get<double>(), t = j["time_us"].get<double>() * 1e-6;
    if (small_b == 0 || b < small_b) small_b = b, small_t = t;
    if (b > big_b) big_b = b, big_t = t;
  }
  BRAID_CHECK(big_b > small_b && big_t > small_t, where,
              ": two message sizes are needed to fit a link, found ", big_b > 0 ? 1 : 0);
  plan::Link l;
  l.bytes_per_s = (big_b - small_b) / (big_t - small_t);
  l.latency_s = std::max(0.0, (small_t - small_b / l.bytes_per_s) / 2);
  return l;
}

void run_measure_cluster(const PlanFlags& f) {
  BRAID_CHECK(!f.out.empty(), "plan measure-cluster: --out FILE is needed");
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  BRAID_CHECK(n > 0, "plan measure-cluster: cannot find this program (/proc/self/exe)");
  self[n] = '\0';
  const std::string cmd = std::string(self) +
                          " bench allreduce -n 2 --transport shm --algorithm ring --min 4K "
                          "--max 64M --factor 16384 --seconds 0.5 --json 2>/dev/null";
  log_info("plan: measuring the shared-memory link: ", cmd);
  FILE* pipe = popen(cmd.c_str(), "r");
  BRAID_CHECK(pipe != nullptr, "plan measure-cluster: cannot run ", cmd);
  std::string text;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof buf, pipe)) text.append(buf, got);
  BRAID_CHECK(pclose(pipe) == 0, "plan measure-cluster: the allreduce bench failed: ", cmd);
  std::istringstream intra_lines(text);
  plan::Cluster c;
  c.intra = fit_link(intra_lines, "the shared-memory allreduce");
  c.inter = c.intra;
  if (!f.inter.empty()) {
    std::ifstream in(f.inter);
    BRAID_CHECK(in.good(), "plan measure-cluster: --inter '", f.inter, "' cannot be read");
    c.inter = fit_link(in, "--inter '" + f.inter + "'");
  }
  c.hosts = f.hosts;
  c.cores_per_host =
      f.cores > 0 ? f.cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.ranks_per_host = f.ranks > 0 ? f.ranks : c.cores_per_host;
  const std::optional<uint64_t> available = mem_available_bytes();
  // Hosts simulated on this machine (network namespaces) share its memory.
  c.memory_per_host = available ? static_cast<double>(*available) / f.hosts : 0;
  BRAID_CHECK(c.memory_per_host > 0, "plan measure-cluster: cannot read MemAvailable");
  std::ofstream out(f.out);
  out << plan::cluster_json(c).dump(1) << "\n";
  BRAID_CHECK(out.good(), "plan measure-cluster: cannot write '", f.out, "'");
  std::printf("%s\n", plan::cluster_json(c).dump().c_str());
}

void add_model_flags(CLI::App* c, PlanFlags& f) {
  c->add_option("--model", f.model,
                "a built-in (mlp, cnn, gpt-small...), a model spec (JSON file or object), or "
                "gpt:d_model=D,layers=L,heads=H[,context=C][,vocab=V]");
  c->add_option("--cluster", f.cluster, "the cluster file (JSON; braid plan measure-cluster)");
  c->add_option("--profile", f.profile,
                "the model's profile: read if the file exists, else measured and written");
  c->add_option("--seq-len", f.seq_len, "language models: tokens a sample");
  c->add_option("--threads", f.threads, "BLAS threads the profile is measured with");
  c->add_option("--profile-micro-batches", f.profile_micro_batches,
                "the two micro-batch sizes each unit is timed at (a line through them)")
      ->delimiter(',');
  c->add_option("--profile-repeats", f.profile_repeats, "timed passes a size (the median)")
      ->check(CLI::Range(1, 100));
  c->add_flag("--json", f.json, "one JSON object a line");
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Pick the fastest strategy that fits a model on a cluster, by simulation");
  add_model_flags(plan, *f);
  plan->add_option("--global-batch", f->batch, "samples a step (default: 8 a rank)");
  plan->add_option("--ranks", f->ranks, "plan for this many of the cluster's ranks");
  plan->add_option("--top", f->top, "configurations shown");
  plan->add_flag("--all", f->all, "--json: the configurations that do not fit too");
  plan->callback([plan, f] {
    if (plan->get_subcommands().empty()) run_plan(*f);
  });

  auto s = std::make_shared<PlanFlags>();
  CLI::App* scaling =
      plan->add_subcommand("scaling", "predicted step time and efficiency from 1 to N ranks");
  add_model_flags(scaling, *s);
  scaling->add_option("--batch-per-rank", s->batch_per_rank, "samples a rank a step");
  scaling->add_option("--max-ranks", s->max_ranks, "the largest rank count");
  scaling->add_option("--svg", s->svg, "write the efficiency plot here");
  scaling->callback([s] { run_scaling(*s); });

  auto m = std::make_shared<PlanFlags>();
  CLI::App* measure =
      plan->add_subcommand("measure-cluster", "this machine as a cluster file, links measured");
  measure->add_option("--out", m->out, "the cluster file to write")->required();
  measure->add_option("--inter", m->inter,
                      "`braid bench allreduce -n 2 --algorithm ring --json` lines measured "
                      "between two hosts: the inter-host link");
  measure->add_option("--ranks-per-host", m->ranks, "ranks a host (default: its cores)");
  measure->add_option("--hosts", m->hosts, "hosts (network namespaces here share this machine)")
      ->check(CLI::Range(1, 1 << 20));
  measure->add_option("--cores-per-host", m->cores, "cores a host (default: this machine's)");
  measure->callback([m] { run_measure_cluster(*m); });
}

}  // namespace braid::cli
