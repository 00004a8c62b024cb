#include "plan/simulate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "plan/collective_cost.h"
#include "plan/event_sim.h"

namespace braid::plan {
namespace {

using parallel::PipelineAction;
using parallel::PipelineSchedule;

constexpr double kFloat = 4;
constexpr double kFirstBucket = 1024.0 * 1024.0;  // DataParallelOptions::first_bucket_bytes
constexpr int kZeroSlots = 4;                     // Zero::kParamSlots: buckets kept gathered

// A unit's costs on one rank at one micro-batch size.
struct UnitCost {
  double forward = 0, backward = 0;            // compute seconds
  double forward_sums = 0, backward_sums = 0;  // tensor-parallel sums' seconds (blocking)
  double params = 0;                           // parameters this rank holds of it
  double activations = 0;                      // bytes kept for backward
  double output = 0;                           // bytes of its output
};

// Where a group of `size` ranks, `stride` apart, sits on hosts of `per_host` ranks, and how
// many such groups share a host's link.
GroupPlace place(int size, int stride, const Cluster& c) {
  GroupPlace g;
  g.ranks = size;
  const int r = c.ranks_per_host;
  if (size == 1) return g;
  if (static_cast<int64_t>(stride) * size <= r) {
    g.per_host = size;
  } else if (stride >= r) {
    g.per_host = 1;
    g.sharing = r;  // every rank of a host is in a group like it, each crossing the link
  } else {
    g.per_host = std::max(1, r / stride);
    g.sharing = r / g.per_host;
  }
  return g;
}

double collective(Collective what, double bytes, const GroupPlace& g, const Cluster& c) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  return best_collective(what, bytes, g, c).seconds;
}

// Bytes a rank sends for `what` of `bytes` over n ranks by ring (the ZeRO ratio's measure).
double ring_bytes(Collective what, double bytes, int n) {
  double sum = 0;
  for (const CommStep& s : collective_steps(what, Algorithm::ring, bytes, n))
    sum += s.bytes * s.repeats;
  return sum;
}

const TensorSlice* slice_of(const UnitProfile& u, int width) {
  for (const TensorSlice& s : u.slices)
    if (s.width == width) return &s;
  return nullptr;
}

// `input` is the bytes of the unit's input (the previous unit's output; 0 for the first).
UnitCost unit_cost(const UnitProfile& u, double input, int width, double m, double speed,
                   const GroupPlace& tp, const Cluster& c) {
  UnitCost k;
  k.output = u.output_bytes_per_sample * m;
  if (width == 1) {
    k.forward = u.forward.at(m) / speed;
    k.backward = u.backward.at(m) / speed;
    k.params = u.params;
    k.activations = u.activation_bytes_per_sample * m;
    return k;
  }
  if (const TensorSlice* s = slice_of(u, width)) {
    k.forward = s->forward.at(m) / speed;
    k.backward = s->backward.at(m) / speed;
    k.params = s->params;
    if (s->forward_sums > 0)
      k.forward_sums = s->forward_sums *
                       collective(Collective::allreduce,
                                  s->forward_sum_bytes_per_sample * m / s->forward_sums, tp, c);
    if (s->backward_sums > 0)
      k.backward_sums = s->backward_sums *
                        collective(Collective::allreduce,
                                   s->backward_sum_bytes_per_sample * m / s->backward_sums, tp, c);
  } else {
    // The embedding and the head are cut by vocabulary (nn/gpt_tensor_parallel.h): a T-th
    // of the work; the embedding sums its output, the head the gradient of its input (its
    // loss's sums of one float a token are small beside it).
    k.forward = u.forward.at(m) / speed / width;
    k.backward = u.backward.at(m) / speed / width;
    k.params = u.params / width;
    if (input == 0)
      k.forward_sums = collective(Collective::allreduce, k.output, tp, c);
    else
      k.backward_sums = collective(Collective::allreduce, input, tp, c);
  }
  // Each slice keeps its part of the wide activations (the MLP's, the heads'); the
  // replicated LayerNorm inputs are small beside them.
  k.activations = u.activation_bytes_per_sample * m / width;
  return k;
}

struct Part {
  size_t first = 0, end = 0;  // units [first, end)
  int stage = 0, chunk = 0;
};

class StepBuilder {
 public:
  // comm_scale 0: communication costs nothing (the bubble's measure). data_comm: the data
  // axis reduces gradients (not under parameter servers or local SGD); optimizer: the rank
  // updates its parameters (not a parameter server's worker).
  StepBuilder(const ModelProfile& p, const Cluster& c, const PlanConfig& cfg, int batch,
              double comm_scale, bool data_comm, bool optimizer)
      : p_(p),
        c_(c),
        cfg_(cfg),
        comm_scale_(comm_scale),
        data_comm_(data_comm),
        optimizer_(optimizer) {
    D_ = cfg.data;
    T_ = cfg.tensor;
    P_ = cfg.pipeline;
    M_ = cfg.micro_batches;
    BRAID_CHECK(batch % D_ == 0, "plan: batch ", batch, " does not divide over ", D_,
                " data-parallel replicas");
    const int replica = batch / D_;
    BRAID_CHECK(replica % M_ == 0, "plan: a replica's batch ", replica, " does not divide into ",
                M_, " micro-batches");
    m_ = static_cast<double>(replica) / M_;
    speed_ = c.speed(p.threads);
    tp_ = place(T_, 1, c);
    dp_ = place(D_, T_, c);
    const GroupPlace pp = place(P_, D_ * T_, c);
    p2p_ = pp.per_host >= 2 || P_ == 1 ? c.intra : c.inter;
    if (pp.per_host < 2 && P_ > 1) p2p_.bytes_per_s /= pp.sharing;
    for (size_t i = 0; i < p.units.size(); ++i) {
      const double input = i == 0 ? 0 : p.units[i - 1].output_bytes_per_sample * m_;
      costs_.push_back(unit_cost(p.units[i], input, T_, m_, speed_, tp_, c));
    }
    cut();
  }

  Prediction run();

 private:
  void cut() {
    const int parts = P_ * cfg_.chunks;
    BRAID_CHECK(static_cast<int>(costs_.size()) >= parts, "plan: ", parts,
                " pipeline parts need as many units; the model has ", costs_.size());
    std::vector<double> w;
    for (const UnitCost& k : costs_) w.push_back(k.forward + k.backward);
    const std::vector<size_t> b = parallel::balance_stages(w, parts);
    for (int k = 0; k < parts; ++k) parts_.push_back({b[k], b[k + 1], k % P_, k / P_});
  }
  double comm(double seconds) const { return seconds * comm_scale_; }
  double send_seconds(double bytes) const {
    return comm_scale_ == 0 || P_ == 1 ? 0 : p2p_.seconds(bytes);
  }
  double stage_params(int s) const {
    double sum = 0;
    for (const Part& part : parts_)
      if (part.stage == s)
        for (size_t u = part.first; u < part.end; ++u) sum += costs_[u].params;
    return sum;
  }
  RankMemory memory(int s, const std::vector<PipelineAction>& actions) const;
  // A full bucket's bytes on stage s: ZeRO 2-3 cap buckets at 1/32 of the model (zero.cpp
  // keeps its window of gradients small), at least the first bucket's size.
  double bucket_cap(int s) const {
    if (cfg_.zero_stage < 2) return cfg_.bucket_bytes;
    return std::min(cfg_.bucket_bytes, std::max(kFirstBucket, kFloat * stage_params(s) / 32));
  }

  const ModelProfile& p_;
  const Cluster& c_;
  const PlanConfig& cfg_;
  double comm_scale_;
  bool data_comm_, optimizer_;
  int D_, T_, P_, M_;
  double m_ = 1, speed_ = 1;
  GroupPlace tp_, dp_;
  Link p2p_;
  std::vector<UnitCost> costs_;
  std::vector<Part> parts_;
};

RankMemory StepBuilder::memory(int s, const std::vector<PipelineAction>& actions) const {
  RankMemory mem;
  const double params = stage_params(s);
  const int zero = cfg_.zero_stage;
  mem.params = kFloat * params / (zero == 3 ? D_ : 1);
  mem.grads = kFloat * params / (zero >= 2 ? D_ : 1);
  mem.optimizer = 2 * kFloat * params / (zero >= 1 ? D_ : 1);
  // zero.cpp's windows: 2 buckets of gradients being written or reduced (stage 2-3), and
  // kZeroSlots buckets of gathered parameters (stage 3).
  const double bucket = std::min(bucket_cap(s), kFloat * params);
  if (zero >= 2) mem.grads += 2 * bucket;
  if (zero == 3) mem.params += kZeroSlots * bucket;
  for (const Part& part : parts_) {
    if (part.stage != s) continue;
    const int held = std::max(1, parallel::in_flight(actions, part.chunk));
    double full = 0;
    for (size_t u = part.first; u < part.end; ++u) full += costs_[u].activations;
    // The input a part received from the stage before it is held too (the unit that made
    // it counts it on that stage, not here).
    const double input = part.first == 0 ? 0 : costs_[part.first - 1].output;
    if (cfg_.recompute) {
      // Only each micro-batch's input is kept; one micro-batch's whole activations exist
      // while its backward recomputes them.
      mem.activations += input * held + full;
    } else {
      mem.activations += (full + input) * held;
    }
  }
  return mem;
}

Prediction StepBuilder::run() {
  TaskGraph g;
  const int parts = static_cast<int>(parts_.size());
  std::vector<int> compute(P_), send_fwd(P_), send_bwd(P_), stream(P_);
  for (int s = 0; s < P_; ++s) {
    compute[s] = g.add_resource("compute " + std::to_string(s));
    send_fwd[s] = g.add_resource("send forward " + std::to_string(s));
    send_bwd[s] = g.add_resource("send backward " + std::to_string(s));
    stream[s] = g.add_resource("data-parallel stream " + std::to_string(s));
  }
  const size_t units = costs_.size();
  // Per unit and position: its forward and backward task; per part and position: sends.
  std::vector<std::vector<TaskGraph::Id>> fwd(units, std::vector<TaskGraph::Id>(M_, -1));
  std::vector<std::vector<TaskGraph::Id>> bwd = fwd;
  std::vector<std::vector<TaskGraph::Id>> sent_fwd(parts, std::vector<TaskGraph::Id>(M_, -1));
  std::vector<std::vector<TaskGraph::Id>> sent_bwd = sent_fwd;
  std::vector<std::vector<PipelineAction>> actions(P_);
  Prediction out;
  const bool zero3 = data_comm_ && cfg_.zero_stage == 3 && D_ > 1;
  for (int s = 0; s < P_; ++s) {
    actions[s] = parallel::stage_actions(cfg_.schedule, s, P_, M_, cfg_.chunks);
    for (const PipelineAction& a : actions[s]) {
      const int k = a.chunk * P_ + s;
      const Part& part = parts_[k];
      if (a.kind == PipelineAction::forward) {
        for (size_t u = part.first; u < part.end; ++u)
          fwd[u][a.position] = g.add(compute[s], costs_[u].forward + comm(costs_[u].forward_sums),
                                     {}, "forward " + p_.units[u].name);
        if (k + 1 < parts)
          sent_fwd[k][a.position] = g.add(send_fwd[s], send_seconds(costs_[part.end - 1].output),
                                          {fwd[part.end - 1][a.position]}, "send activations");
      } else {
        for (size_t u = part.end; u-- > part.first;) {
          double t = costs_[u].backward + comm(costs_[u].backward_sums);
          if (cfg_.recompute) t += costs_[u].forward + comm(costs_[u].forward_sums);
          bwd[u][a.position] =
              g.add(compute[s], t, {fwd[u][a.position]}, "backward " + p_.units[u].name);
        }
        if (k > 0)
          sent_bwd[k][a.position] = g.add(send_bwd[s], send_seconds(costs_[part.first - 1].output),
                                          {bwd[part.first][a.position]}, "send gradients");
      }
    }
  }
  for (int k = 0; k < parts; ++k) {
    for (int pos = 0; pos < M_; ++pos) {
      if (k > 0) g.wait(fwd[parts_[k].first][pos], sent_fwd[k - 1][pos]);
      if (k + 1 < parts) g.wait(bwd[parts_[k].end - 1][pos], sent_bwd[k + 1][pos]);
    }
  }
  // Data parallelism per stage: buckets in backward order, as parallel/buckets.h cuts them.
  auto gather = [&](int st, double bytes, const char* label) {
    out.comm_bytes += ring_bytes(Collective::allgather, bytes, D_);
    return g.add(stream[st], comm(collective(Collective::allgather, bytes, dp_, c_)), {}, label);
  };
  for (int s = 0; s < P_; ++s) {
    std::vector<size_t> order;  // the stage's units in backward order
    for (int k = parts - 1; k >= 0; --k)
      if (parts_[k].stage == s)
        for (size_t u = parts_[k].end; u-- > parts_[k].first;) order.push_back(u);
    struct Bucket {
      double bytes = 0;
      size_t lowest = 0;  // its unit whose backward ends last
    };
    // As parallel/buckets.h cuts them: whole parameters in backward order, the first
    // bucket 1 MiB at most, then bucket_cap(). A unit larger than a bucket is several.
    const double stage_bytes = kFloat * stage_params(s);
    const double full = bucket_cap(s);
    std::vector<Bucket> buckets;
    double cap = std::min(kFirstBucket, full);
    for (size_t u : order) {
      double bytes = kFloat * costs_[u].params;
      if (bytes == 0) continue;
      if (!buckets.empty() && buckets.back().bytes < cap) {
        buckets.back().bytes += bytes;
        buckets.back().lowest = u;
        continue;
      }
      while (bytes > 0) {
        if (!buckets.empty()) cap = full;
        const double piece = bytes > 2 * cap ? cap : bytes;
        buckets.push_back({piece, u});
        bytes -= piece;
      }
    }
    // The last micro-batch position whose backward finishes a unit's gradients.
    auto final_backward = [&](size_t u) {
      TaskGraph::Id latest = bwd[u][0];
      for (int pos = 1; pos < M_; ++pos)
        if (bwd[u][pos] > latest) latest = bwd[u][pos];
      return latest;
    };
    std::vector<TaskGraph::Id> reductions;
    const double wire = cfg_.wire_ratio;
    const Collective reduce =
        cfg_.zero_stage >= 1 ? Collective::reduce_scatter : Collective::allreduce;
    // ZeRO 3 gathers as zero.cpp does: a unit's parameters when its forward announces them
    // (a unit of several buckets waits for all but the first); in backward, when the unit
    // above it is done (on_ready). The last buckets of forward stay in the window of
    // kZeroSlots and are not gathered again.
    std::vector<size_t> forward_order(order.rbegin(), order.rend());
    std::vector<bool> kept(units, false);
    if (zero3) {
      double window = kZeroSlots * std::min(full, stage_bytes);
      for (size_t u : order) {
        if (kFloat * costs_[u].params > window) break;
        window -= kFloat * costs_[u].params;
        kept[u] = true;
      }
      TaskGraph::Id before = -1;
      for (size_t u : forward_order) {
        if (costs_[u].params > 0) {
          const auto ag = gather(s, kFloat * costs_[u].params, "gather for forward");
          if (before >= 0) g.wait(ag, before);
          g.wait(fwd[u][0], ag);
        }
        before = fwd[u][0];
      }
    }
    for (size_t i = 0; i < order.size(); ++i) {
      const size_t u = order[i];
      if (zero3 && i == 0 && !kept[u] && costs_[u].params > 0) {
        const auto ag = gather(s, kFloat * costs_[u].params, "gather for backward");
        g.wait(ag, fwd[forward_order.back()][0]);
        g.wait(bwd[u][0], ag);
      }
      if (zero3 && i + 1 < order.size()) {
        const size_t next = order[i + 1];
        if (!kept[next] && costs_[next].params > 0) {
          const auto ag = gather(s, kFloat * costs_[next].params, "gather for backward");
          g.wait(ag, bwd[u][0]);
          g.wait(bwd[next][0], ag);
        }
      }
      if (!data_comm_) continue;
      for (const Bucket& bucket : buckets) {
        if (bucket.lowest != u) continue;
        const double bytes = bucket.bytes * wire;
        const double codec = bucket.bytes / kFloat * cfg_.codec_s_per_float;
        reductions.push_back(g.add(stream[s], comm(collective(reduce, bytes, dp_, c_) + codec),
                                   {final_backward(u)}, "reduce bucket"));
        out.comm_bytes += ring_bytes(reduce, bytes, D_);
      }
    }
    double params = stage_params(s);
    double opt = optimizer_ ? params * p_.optimizer_s_per_param / speed_ : 0;
    if (cfg_.zero_stage >= 1 && D_ > 1) opt /= D_;
    std::vector<TaskGraph::Id> before_opt = reductions;
    for (const Part& part : parts_)
      if (part.stage == s)
        for (int pos = 0; pos < M_; ++pos) before_opt.push_back(bwd[part.first][pos]);
    TaskGraph::Id end = g.add(compute[s], opt, before_opt, "optimizer");  // then ZeRO's gathers
    if (data_comm_ && cfg_.zero_stage >= 1 && cfg_.zero_stage <= 2 && D_ > 1) {
      for (const Bucket& b : buckets) {
        const auto ag = gather(s, b.bytes, "gather updated parameters");
        g.wait(ag, end);
        end = ag;
      }
    }
  }
  g.run();
  out.step_s = g.makespan();
  double busy = 0;  // a rank's compute, the mean over stages
  for (int s = 0; s < P_; ++s) {
    double own = 0;
    for (const Part& part : parts_)
      if (part.stage == s)
        for (size_t u = part.first; u < part.end; ++u)
          own += M_ * (costs_[u].forward + costs_[u].backward +
                       (cfg_.recompute ? costs_[u].forward : 0));
    if (optimizer_)
      own += stage_params(s) * p_.optimizer_s_per_param / speed_ /
             (cfg_.zero_stage >= 1 && D_ > 1 ? D_ : 1);
    out.compute_s = std::max(out.compute_s, own);
    busy += own / P_;
    const RankMemory mem = memory(s, actions[s]);
    if (mem.total() > out.memory.total()) out.memory = mem;
  }
  out.busy_share = busy / out.step_s;
  return out;
}

// Parameter servers and local SGD: each worker's step is the one-replica graph without the
// data axis's reductions, plus their own exchange.
Prediction simulate_other(const ModelProfile& p, const Cluster& c, const PlanConfig& cfg,
                          int batch) {
  PlanConfig worker = cfg;
  worker.tensor = worker.pipeline = 1;
  worker.zero_stage = 0;
  worker.micro_batches = 1;
  const bool ps = cfg.method == Method::parameter_server;
  Prediction out = StepBuilder(p, c, worker, batch, 1, false, !ps).run();
  const double compute = out.step_s;
  const double bytes = kFloat * p.params() * cfg.wire_ratio;
  const Link link = c.hosts > 1 ? c.inter : c.intra;
  double exchange = 0;
  if (ps) {
    // Every worker pushes its gradients and pulls the parameters, split over S servers; a
    // server's link carries W / S workers' share of both, its update runs on the sum.
    const double W = cfg.data, S = cfg.servers;
    const double worker_side = 2 * link.seconds(bytes);
    const double update = p.params() / S * p.optimizer_s_per_param / c.speed(p.threads);
    // What the servers spend: on a sync step every worker's bytes and one update; under
    // async and SSP, each gradient is applied as it comes.
    const double server_side =
        cfg.ps_mode == PsMode::sync
            ? 2 * (link.latency_s + W * bytes / S / link.bytes_per_s) + update
            : 2 * bytes / S / link.bytes_per_s + update;
    const PsRate rate = ps_rate(cfg.ps_mode, cfg.data, cfg.backup_workers, cfg.staleness, c.jitter,
                                compute, worker_side, server_side, batch / cfg.data);
    out.step_s = rate.step_s;
    out.samples_per_s = rate.samples_per_s;
    exchange = std::max(0.0, out.step_s - compute);
  } else {
    const GroupPlace dp = place(cfg.data, 1, c);
    exchange = collective(Collective::allreduce, bytes, dp, c) / cfg.local_period;
    out.comm_bytes = ring_bytes(Collective::allreduce, bytes, cfg.data) / cfg.local_period;
    out.step_s = compute + exchange;
  }
  out.compute_s = compute;
  out.exposed_comm_s = exchange;
  if (!ps) out.samples_per_s = batch / out.step_s;
  out.fits = out.memory.total() <= c.memory_per_rank();
  return out;
}

}  // namespace

int PlanConfig::ranks() const {
  switch (method) {
    case Method::data_parallel:
      return data * tensor * pipeline;
    case Method::parameter_server:
      return data + servers;
    case Method::local_sgd:
      return data;
  }
  return data;
}

Prediction simulate(const ModelProfile& profile, const Cluster& cluster, const PlanConfig& config,
                    int batch) {
  BRAID_CHECK(config.ranks() == cluster.ranks(), "plan: ", describe(config), " needs ",
              config.ranks(), " ranks; the cluster has ", cluster.ranks());
  BRAID_CHECK(!profile.units.empty(), "plan: the profile has no units");
  if (config.method != Method::data_parallel)
    return simulate_other(profile, cluster, config, batch);
  // More ranks than cores on a host: they share the cores only while they compute, so a
  // rank that idles part of its step (a pipeline's bubble, an exposed exchange) leaves
  // them to the others. The speed is solved for: the cores over the ranks busy at once
  // (each busy for its share of the step), a few rounds from the evenly shared start.
  Cluster c = cluster;
  Prediction out = StepBuilder(profile, c, config, batch, 1, true, true).run();
  const double shared = cluster.speed(profile.threads);
  if (cluster.compute_speed == 0 && shared < 1) {
    for (int round = 0; round < 4; ++round) {
      c.compute_speed = std::min(1.0, shared / std::max(out.busy_share, shared));
      out = StepBuilder(profile, c, config, batch, 1, true, true).run();
    }
  }
  const Prediction free = StepBuilder(profile, c, config, batch, 0, true, true).run();
  out.bubble_s = std::max(0.0, free.step_s - out.compute_s);
  out.exposed_comm_s = std::max(0.0, out.step_s - free.step_s);
  out.samples_per_s = batch / out.step_s;
  out.fits = out.memory.total() <= cluster.memory_per_rank();
  return out;
}

std::string describe(const PlanConfig& c) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : " ") + part; };
  if (c.method == Method::parameter_server) {
    add("ps W=" + std::to_string(c.data) + " S=" + std::to_string(c.servers));
    if (c.ps_mode == PsMode::async) add("async");
    if (c.ps_mode == PsMode::ssp) add("ssp s=" + std::to_string(c.staleness));
    if (c.backup_workers > 0) add("backup " + std::to_string(c.backup_workers));
    return s;
  }
  if (c.method == Method::local_sgd) {
    add("local_sgd D=" + std::to_string(c.data) + " H=" + std::to_string(c.local_period));
    return s;
  }
  const int axes = (c.data > 1) + (c.tensor > 1) + (c.pipeline > 1);
  if (axes == 0) add("single");
  if (axes == 1 && c.data > 1)
    add(c.zero_stage > 0 ? "zero" + std::to_string(c.zero_stage) : "ddp");
  if (axes == 1 && c.tensor > 1) add("tensor T=" + std::to_string(c.tensor));
  if (axes == 1 && c.pipeline > 1) add("pipeline P=" + std::to_string(c.pipeline));
  if (axes > 1) {
    add("mesh D=" + std::to_string(c.data) + " T=" + std::to_string(c.tensor) +
        " P=" + std::to_string(c.pipeline));
    if (c.zero_stage > 0) add("zero" + std::to_string(c.zero_stage));
  }
  if (c.pipeline > 1) {
    add("M=" + std::to_string(c.micro_batches));
    add(std::string(parallel::schedule_name(c.schedule)));
    if (c.chunks > 1) add("v=" + std::to_string(c.chunks));
    if (c.recompute) add("recompute");
  }
  if (c.data > 1 && c.bucket_bytes != 25.0 * 1024 * 1024)
    add("bucket " + std::to_string(static_cast<int>(std::lround(c.bucket_bytes / 1048576))) +
        "MiB");
  if (!c.codec.empty()) add(c.codec + " codec");
  if (c.data > 1 && c.codec.empty() && c.wire_ratio == 0.5) add("bf16 wire");
  if (c.data > 1 && c.codec.empty() && c.wire_ratio != 0.5 && c.wire_ratio < 1)
    add("wire x" + std::to_string(c.wire_ratio).substr(0, 4));
  return s;
}

}  // namespace braid::plan
