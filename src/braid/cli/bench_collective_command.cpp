// `braid bench allreduce | reduce-scatter | allgather | broadcast`: the nccl-tests table for
// one collective over the job's ranks: size, algorithm, median time per call (the slowest
// rank's time in each call), algorithm bandwidth = bytes / time and bus bandwidth = algbw
// x the collective's factor (allreduce 2(n-1)/n, reduce-scatter and allgather (n-1)/n,
// broadcast 1), so figures compare across rank counts and with nccl-tests and MPI.
//
// Run it under a launcher (`braid launch -n N -- braid bench allreduce`, mpirun, srun) or
// give `-n N`, and it launches N local ranks of itself. Buffers are allocated and touched
// once and reused for every size and call. `--write-table FILE` stores the fastest
// algorithm per size as a selection table (comm/algorithm.h) for BRAID_ALGORITHM_TABLE.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/relaunch.h"
#include "comm/algorithm.h"
#include "comm/collectives.h"
#include "comm/shared_buffer.h"
#include "comm/transport_factory.h"
#include "core/host_memory.h"
#include "core/memory.h"
#include "core/timer.h"
#include "launch/env.h"
#include "launch/job.h"

namespace braid::cli {
namespace {

struct CollectiveFlags {
  std::string collective;
  int ranks = 0;  // 0: the job's ranks; > 0 outside a job: launch that many
  std::string transport = "auto";
  std::string algorithm = "auto";  // a name, or "all"
  std::string min_size = "4K", max_size = "256M";
  int factor = 4;
  double seconds = 0.3;  // per size and algorithm
  bool json = false;
  bool shared = false;  // allreduce buffers from allocate_shared()
  std::string write_table;
};

// Sizes beyond this are typos, and keep every product below (sizes x ranks) far from
// overflowing.
constexpr double kMaxSize = double(uint64_t{1} << 50);

size_t parse_size(const std::string& flag, const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    BRAID_THROW(Error, flag, " '", s, "' is not a size (accepted: 4096, 4K, 16M, 1G)");
  }
  const std::string unit = s.substr(pos);
  double mult = 1;
  if (unit == "K" || unit == "KiB")
    mult = 1 << 10;
  else if (unit == "M" || unit == "MiB")
    mult = 1 << 20;
  else if (unit == "G" || unit == "GiB")
    mult = 1 << 30;
  else if (!unit.empty() && unit != "B")
    BRAID_THROW(Error, flag, " '", s, "': unknown unit '", unit, "' (accepted: K, M, G)");
  if (!(v >= 0) || v * mult > kMaxSize)
    BRAID_THROW(Error, flag, " '", s, "' is out of range: expected 0 to 1024T");
  return static_cast<size_t>(v * mult);
}

std::string human_bytes(size_t b) {
  char buf[32];
  if (b >= (1u << 30) && b % (1u << 30) == 0)
    std::snprintf(buf, sizeof buf, "%zuG", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0)
    std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else if (b >= (1u << 10) && b % (1u << 10) == 0)
    std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  else
    std::snprintf(buf, sizeof buf, "%zu", b);
  return buf;
}

double bus_factor(comm::CallKind call, int n) {
  if (n <= 1) return 1.0;
  switch (call) {
    case comm::CallKind::allreduce:
      return 2.0 * (n - 1) / n;
    case comm::CallKind::reduce_scatter:
    case comm::CallKind::allgather:
      return static_cast<double>(n - 1) / n;
    default:
      return 1.0;
  }
}

comm::CallKind call_of(const std::string& name) {
  if (name == "allreduce") return comm::CallKind::allreduce;
  if (name == "reduce-scatter") return comm::CallKind::reduce_scatter;
  if (name == "allgather") return comm::CallKind::allgather;
  if (name == "broadcast") return comm::CallKind::broadcast;
  BRAID_THROW(Error, "unknown collective '", name, "'");
}

struct Row {
  size_t bytes;
  comm::Algorithm algorithm;
  double seconds;  // median over calls of the slowest rank's time
  int iters;
};

class CollectiveBench {
 public:
  CollectiveBench(comm::Group& g, comm::CallKind call, size_t max_bytes, bool shared)
      : g_(g), call_(call), n_(g.size()) {
    // One allocation for the whole run, touched once (fresh pages cost ~10 us each here).
    const size_t per_rank_max = max_bytes;  // allgather/reduce-scatter use max_bytes in total
    if (shared) {
      shared_send_ = comm::allocate_shared(g, per_rank_max + 64);
      send_ = shared_send_.data();
    } else {
      private_send_ = Buffer(per_rank_max + 64, MemCategory::workspace);
      send_ = private_send_.data();
    }
    recv_ = Buffer(per_rank_max + 64, MemCategory::workspace);
    refill(max_bytes / sizeof(float));
  }

  // Whether the send buffer is mapped by every rank (allocate_shared succeeded).
  bool shared() const { return shared_send_.shared(); }

  Row measure(size_t bytes, comm::Algorithm algorithm, double seconds) {
    const size_t count = bytes / sizeof(float);
    comm::CollectiveOptions opt;
    opt.algorithm = algorithm;
    refill(count);
    run(count, opt);  // warm-up, also checks the result once
    check(count);
    refill(count);
    const double t0 = now_seconds();
    run(count, opt);
    double first = now_seconds() - t0;
    comm::broadcast(g_, &first, 1, DType::f64, 0);
    const int iters = std::clamp(static_cast<int>(seconds / std::max(first, 1e-7)), 5, 1000);
    std::vector<double> times(static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) {
      if (i % 16 == 15) refill(count);
      comm::barrier(g_);
      const double s = now_seconds();
      run(count, opt);
      times[static_cast<size_t>(i)] = now_seconds() - s;
    }
    comm::allreduce(g_, times.data(), times.size(), DType::f64, ReduceOp::max);
    std::sort(times.begin(), times.end());
    return {bytes, algorithm, times[times.size() / 2], iters};
  }

 private:
  void run(size_t count, const comm::CollectiveOptions& opt) {
    float* s = static_cast<float*>(send_);
    float* r = static_cast<float*>(recv_.data());
    const size_t per_rank = count / static_cast<size_t>(n_);
    switch (call_) {
      case comm::CallKind::allreduce:
        comm::allreduce(g_, s, count, DType::f32, ReduceOp::sum, opt);
        break;
      case comm::CallKind::reduce_scatter:
        comm::reduce_scatter(g_, s, r, per_rank, DType::f32, ReduceOp::sum, opt);
        break;
      case comm::CallKind::allgather:
        comm::allgather(g_, s, r, per_rank, DType::f32, opt);
        break;
      case comm::CallKind::broadcast:
        comm::broadcast(g_, s, count, DType::f32, 0, opt);
        break;
      default:
        BRAID_THROW(Error, "unsupported collective");
    }
  }

  // Inputs rank+1 everywhere, so every result has a closed form.
  void refill(size_t count) {
    float* s = static_cast<float*>(send_);
    std::fill(s, s + count, static_cast<float>(g_.rank() + 1));
  }

  void check(size_t count) {
    const float* s = static_cast<const float*>(send_);
    const float* r = static_cast<const float*>(recv_.data());
    const size_t per_rank = count / static_cast<size_t>(n_);
    const float total = static_cast<float>(n_) * static_cast<float>(n_ + 1) / 2;
    for (size_t i = 0; i < count; i += std::max<size_t>(1, count / 97)) {
      float got = 0, want = 0;
      switch (call_) {
        case comm::CallKind::allreduce:
          got = s[i], want = total;
          break;
        case comm::CallKind::reduce_scatter:
          if (i >= per_rank) return;
          got = r[i], want = total;
          break;
        case comm::CallKind::allgather:
          if (i >= per_rank * static_cast<size_t>(n_)) return;
          got = r[i], want = static_cast<float>(i / per_rank + 1);
          break;
        default:
          got = s[i], want = 1;
          break;
      }
      BRAID_CHECK(got == want, "bench: wrong result at element ", i, ": ", got, " instead of ",
                  want, " (", count, " elements, rank ", g_.rank(), ")");
    }
  }

  comm::Group& g_;
  comm::CallKind call_;
  int n_;
  Buffer private_send_, recv_;
  comm::SharedBuffer shared_send_;
  void* send_ = nullptr;
};

// What the flags ask for, checked before any rank starts or any buffer is allocated.
struct Plan {
  comm::CallKind call;
  std::vector<comm::Algorithm> algorithms;
  size_t lo = 0, hi = 0;
};

Plan plan_of(const CollectiveFlags& f) {
  Plan p;
  p.call = call_of(f.collective);
  if (f.algorithm == "all") {
    if (p.call == comm::CallKind::allreduce)
      p.algorithms = {comm::Algorithm::ring, comm::Algorithm::halving_doubling,
                      comm::Algorithm::binary_blocks, comm::Algorithm::tree,
                      comm::Algorithm::direct};
    else
      p.algorithms = {comm::Algorithm::automatic};
  } else {
    p.algorithms = {comm::parse_algorithm(f.algorithm)};
  }
  if (f.transport != "auto") comm::parse_transport_kind(f.transport);
  p.lo = parse_size("--min", f.min_size);
  p.hi = parse_size("--max", f.max_size);
  BRAID_CHECK(p.lo >= 4 && p.lo <= p.hi && f.factor >= 2, "bench ", f.collective,
              ": need 4 <= --min <= --max and --factor >= 2; got --min ", f.min_size, ", --max ",
              f.max_size, ", --factor ", f.factor);
  BRAID_CHECK(!f.shared || p.call == comm::CallKind::allreduce, "bench ", f.collective,
              ": --shared applies to allreduce only");
  BRAID_CHECK(f.seconds > 0 && f.seconds <= 3600, "bench ", f.collective,
              ": --seconds must be in (0, 3600], got ", f.seconds);
  return p;
}

// Each rank holds a send and a receive buffer of the largest size; the ranks on this host
// together must fit in what the kernel says is available (core/host_memory.h).
void check_memory(const CollectiveFlags& f, size_t largest, int ranks_on_host) {
  const std::optional<uint64_t> available = mem_available_bytes();
  if (!available) return;  // not Linux, or no /proc: nothing to check against
  const uint64_t per_rank = 2 * (static_cast<uint64_t>(largest) + 64);
  const MemoryFit fit = fit_in_memory(per_rank, ranks_on_host, *available);
  if (fit.fits) return;
  // The largest power-of-two size that fits, to suggest.
  uint64_t fits = 4;
  while (fit_in_memory(2 * (2 * fits + 64), ranks_on_host, *available).fits) fits *= 2;
  fits = std::max<uint64_t>(4, fits / 2);
  BRAID_THROW(Error, "bench ", f.collective, ": --max ", f.max_size, " needs ",
              describe_bytes(per_rank), " per rank (send and receive buffers) x ", ranks_on_host,
              ranks_on_host == 1 ? " rank" : " ranks", " on this host = ", describe_bytes(fit.need),
              ", but only ", describe_bytes(*available),
              " is available (MemAvailable in /proc/meminfo; a tenth is kept free); choose a "
              "smaller --max, e.g. --max ",
              human_bytes(fits), ", or fewer ranks");
}

// Outside MPI, braid's own conventions say where this process stands; under mpirun with
// BRAID_BACKEND=mpi there is no store to name, so only Open MPI's local pair is read.
launch::RankEnv this_rank() {
  if (!launch::mpi_backend()) return launch::read_rank_env();
  launch::RankEnv env;
  auto number = [](const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::max(std::atoi(v), 0) : fallback;
  };
  env.local_rank = number("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  env.local_size = std::max(1, number("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  env.world_size = std::max(2, number("OMPI_COMM_WORLD_SIZE", 2));
  return env;
}

void run_collective_bench(const CollectiveFlags& f) {
  const launch::RankEnv env = this_rank();
  const bool in_job = env.world_size > 1;
  Plan plan;
  try {
    plan = plan_of(f);
    // Every rank checks before it joins, so none has allocated when another reads
    // MemAvailable: joining completes only once all have arrived.
    check_memory(f, plan.hi, in_job ? env.local_size : std::max(1, f.ranks));
  } catch (const Error&) {
    // Every rank of the job got the same flags and sees the same host: the first rank on
    // each host says what is wrong, the others leave quietly, but only after giving it
    // time to say so: a launcher stops the whole job when the first rank exits.
    if (in_job && env.local_rank != 0) {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      std::fflush(nullptr);
      std::exit(1);
    }
    throw;
  }
  if (!in_job && f.ranks > 1) relaunch_as_ranks(f.ranks, f.transport);

  launch::JoinOptions jo;
  if (f.transport != "auto") jo.transport = comm::parse_transport_kind(f.transport);
  launch::Job job = launch::join_job(jo);
  comm::Group& g = *job.world;
  const int n = g.size();
  const comm::CallKind call = plan.call;
  const std::vector<comm::Algorithm>& algorithms = plan.algorithms;
  // Sizes are multiples of n floats so every rank's share is whole for allgather and
  // reduce-scatter.
  std::vector<size_t> sizes;
  const size_t unit = sizeof(float) * static_cast<size_t>(n);
  for (size_t b = plan.lo;; b *= static_cast<size_t>(f.factor)) {
    sizes.push_back(std::max(unit, b / unit * unit));
    if (b > plan.hi / static_cast<size_t>(f.factor)) break;
  }
  CollectiveBench bench(g, call, sizes.back(), f.shared);

  const bool lead = g.rank() == 0;
  if (lead && !f.json)
    std::printf("# braid %s, float32 sum, %d ranks, transport %s\n%10s %18s %12s %11s %11s\n",
                f.collective.c_str(), n, std::string(g.transport().name()).c_str(), "size",
                "algorithm", "time_us", "algbw_GB/s", "busbw_GB/s");
  std::vector<Row> best;
  for (size_t bytes : sizes) {
    Row fastest{bytes, comm::Algorithm::automatic, 1e30, 0};
    for (comm::Algorithm a : algorithms) {
      const Row r = bench.measure(bytes, a, f.seconds);
      const double algbw = static_cast<double>(bytes) / r.seconds / 1e9;
      const double busbw = algbw * bus_factor(call, n);
      // On shared buffers an automatic allreduce reads peers' buffers in place.
      const std::string name = bench.shared() && a == comm::Algorithm::automatic
                                   ? std::string("shared")
                                   : std::string(comm::algorithm_name(a));
      if (lead && f.json) {
        nlohmann::json j = {{"impl", "braid"},
                            {"collective", f.collective},
                            {"ranks", n},
                            {"transport", g.transport().name()},
                            {"bytes", bytes},
                            {"algorithm", name},
                            {"time_us", r.seconds * 1e6},
                            {"algbw_GBps", algbw},
                            {"busbw_GBps", busbw},
                            {"iters", r.iters}};
        std::printf("%s\n", j.dump().c_str());
      } else if (lead) {
        std::printf("%10s %18s %12.2f %11.3f %11.3f\n", human_bytes(bytes).c_str(), name.c_str(),
                    r.seconds * 1e6, algbw, busbw);
      }
      std::fflush(stdout);
      if (r.seconds < fastest.seconds) fastest = r;
    }
    best.push_back(fastest);
  }
  if (lead && !f.write_table.empty()) {
    // One rule per measured size: [previous size + 1, this size] -> its fastest algorithm;
    // the last rule extends to any larger size.
    std::vector<comm::SelectionRule> rules;
    size_t from = 0;
    for (size_t i = 0; i < best.size(); ++i) {
      comm::SelectionRule r;
      r.call = call;
      r.min_ranks = r.max_ranks = n;
      r.min_bytes = from;
      r.max_bytes = i + 1 == best.size() ? SIZE_MAX : best[i].bytes;
      r.algorithm = best[i].algorithm;
      rules.push_back(r);
      from = best[i].bytes + 1;
    }
    std::ofstream out(f.write_table);
    out << comm::SelectionTable(rules).to_json() << "\n";
    BRAID_CHECK(out.good(), "cannot write the selection table to '", f.write_table, "'");
    std::printf("# wrote the fastest algorithm per size to %s\n", f.write_table.c_str());
  }
}

}  // namespace

void add_collective_benches(CLI::App& bench) {
  for (const char* name : {"allreduce", "reduce-scatter", "allgather", "broadcast"}) {
    auto f = std::make_shared<CollectiveFlags>();
    f->collective = name;
    CLI::App* c = bench.add_subcommand(
        name, std::string(name) + " bandwidth and latency (nccl-tests columns)");
    c->add_option("-n,--ranks", f->ranks, "outside a job: launch this many local ranks")
        ->check(CLI::Range(1, 4096));
    c->add_option("--transport", f->transport, "auto, shm or tcp");
    c->add_option("--algorithm", f->algorithm,
                  "auto, ring, halving_doubling, binary_blocks, tree, direct, or all");
    c->add_option("--min", f->min_size, "smallest message (4K, 1M, ...)");
    c->add_option("--max", f->max_size, "largest message");
    c->add_option("--factor", f->factor, "size multiplier between rows");
    c->add_option("--seconds", f->seconds, "measuring time per size and algorithm");
    c->add_flag("--json", f->json, "JSON lines instead of a table");
    c->add_flag("--shared", f->shared,
                "allreduce on buffers from comm::allocate_shared (read in place by peers)");
    c->add_option("--write-table", f->write_table,
                  "write the fastest algorithm per size as a selection table");
    c->callback([f] { run_collective_bench(*f); });
  }
}

}  // namespace braid::cli
