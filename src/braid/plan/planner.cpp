#include "plan/planner.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace braid::plan {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Pipeline settings for P stages of a replica's batch: micro-batch counts, schedules,
// recomputation.
std::vector<PlanConfig> pipeline_variants(PlanConfig base, int replica_batch, int units,
                                          bool quick) {
  std::vector<PlanConfig> out;
  if (base.pipeline == 1) {
    out.push_back(base);
    return out;
  }
  const int P = base.pipeline;
  for (int mult : {1, 2, 4, 8}) {
    if (quick && (mult == 2 || mult == 8)) continue;
    const int M = P * mult;
    if (replica_batch % M != 0) continue;
    for (auto schedule :
         {parallel::PipelineSchedule::gpipe, parallel::PipelineSchedule::one_f_one_b,
          parallel::PipelineSchedule::interleaved}) {
      if (quick && schedule == parallel::PipelineSchedule::gpipe) continue;
      PlanConfig c = base;
      c.micro_batches = M;
      c.schedule = schedule;
      c.chunks = schedule == parallel::PipelineSchedule::interleaved ? 2 : 1;
      if (c.chunks * P > units) continue;
      for (bool recompute : {false, true}) {
        c.recompute = recompute;
        out.push_back(c);
      }
    }
  }
  return out;
}

// How much a configuration asks of its user beyond plain data parallelism.
int complexity(const PlanConfig& c) {
  int k = c.zero_stage;
  if (c.method == Method::parameter_server) k += 4;
  if (c.method == Method::local_sgd) k += 4;
  if (c.wire_ratio != 1) k += 1;
  if (!c.codec.empty()) k += 2;
  if (c.bucket_bytes != 25.0 * kMiB) k += 1;
  if (c.pipeline > 1) k += 2 + (c.chunks > 1) + c.recompute;
  if (c.tensor > 1) k += 2;
  return k;
}

}  // namespace

std::vector<Candidate> plan_all(const ModelProfile& profile, const Cluster& cluster,
                                const PlanOptions& options) {
  BRAID_CHECK(options.batch > 0, "plan: the global batch must be above 0");
  BRAID_CHECK(!profile.units.empty(), "plan: the profile has no units");
  const int N = cluster.ranks();
  const int units = static_cast<int>(profile.units.size());
  const std::vector<int> widths = profile.tensor_widths();
  std::vector<PlanConfig> configs;
  for (int T : divisors(N)) {
    if (std::find(widths.begin(), widths.end(), T) == widths.end()) continue;
    for (int P : divisors(N / T)) {
      if (P > units) continue;
      const int D = N / T / P;
      if (options.batch % D != 0) continue;
      PlanConfig base;
      base.data = D;
      base.tensor = T;
      base.pipeline = P;
      for (const PlanConfig& piped :
           pipeline_variants(base, options.batch / D, units, options.quick)) {
        for (int zero = 0; zero <= (D > 1 ? 3 : 0); ++zero) {
          if (zero == 3 && P > 1) continue;
          for (double bucket_mb : {25.0, 4.0}) {
            if ((D == 1 || options.quick) && bucket_mb != 25.0) continue;
            for (double wire : {1.0, 0.5}) {
              if ((D == 1 || options.quick) && wire != 1.0) continue;
              PlanConfig c = piped;
              c.zero_stage = zero;
              c.bucket_bytes = bucket_mb * kMiB;
              c.wire_ratio = wire;
              configs.push_back(c);
              if (wire != 1.0 || D == 1 || options.quick || bucket_mb != 25.0) continue;
              for (const CodecProfile& codec : profile.codecs) {
                PlanConfig k = c;
                k.codec = codec.name;
                k.wire_ratio = codec.wire_ratio;
                k.codec_s_per_float = codec.seconds_per_float;
                configs.push_back(k);
              }
            }
          }
        }
      }
    }
  }
  if (N >= 2) {
    for (int S : {1, 2, N / 8, N / 4, N / 2}) {
      const int W = N - S;
      if (S < 1 || W < 1 || options.batch % W != 0) continue;
      PlanConfig c;
      c.method = Method::parameter_server;
      c.servers = S;
      c.data = W;
      if (std::none_of(configs.begin(), configs.end(),
                       [&](const PlanConfig& o) { return o.method == c.method && o.servers == S; }))
        configs.push_back(c);
    }
  }
  // Parameter servers' other rules, for the configurations above: one backup worker, async
  // and SSP apply other gradients than a synchronous step would (listed, never first).
  std::vector<PlanConfig> ps_rules;
  for (const PlanConfig& c : configs) {
    if (c.method != Method::parameter_server) continue;
    PlanConfig k = c;
    if (c.data > 1) {
      k.backup_workers = 1;
      ps_rules.push_back(k);
    }
    k.backup_workers = 0;
    k.ps_mode = PsMode::async;
    ps_rules.push_back(k);
    k.ps_mode = PsMode::ssp;
    ps_rules.push_back(k);
  }
  std::vector<Candidate> out;
  // A lossy codec changes what is summed (error feedback makes up for it over steps).
  for (const PlanConfig& c : configs)
    out.push_back({c, simulate(profile, cluster, c, options.batch), c.codec.empty()});
  for (const PlanConfig& c : ps_rules)
    out.push_back({c, simulate(profile, cluster, c, options.batch), false});
  if (options.include_local_sgd && N >= 2 && options.batch % N == 0) {
    for (int H : {4, 16}) {
      PlanConfig c;
      c.method = Method::local_sgd;
      c.data = N;
      c.local_period = H;
      out.push_back({c, simulate(profile, cluster, c, options.batch), false});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.prediction.fits != b.prediction.fits) return a.prediction.fits;
    if (!a.prediction.fits) return a.prediction.memory.total() < b.prediction.memory.total();
    return a.prediction.samples_per_s > b.prediction.samples_per_s;
  });
  // Predictions within half a percent of a group's fastest are a tie the model cannot
  // break: within it the simpler configuration goes first (fewer knobs to get wrong, exact
  // fp32 sums).
  for (size_t first = 0; first < out.size() && out[first].prediction.fits;) {
    size_t end = first + 1;
    while (end < out.size() && out[end].prediction.fits &&
           out[end].prediction.samples_per_s >= out[first].prediction.samples_per_s / 1.005)
      ++end;
    std::stable_sort(out.begin() + first, out.begin() + end,
                     [](const Candidate& a, const Candidate& b) {
                       return complexity(a.config) < complexity(b.config);
                     });
    first = end;
  }
  return out;
}

const Candidate* best(const std::vector<Candidate>& ranked) {
  for (const Candidate& c : ranked)
    if (c.prediction.fits && c.same_training) return &c;
  return nullptr;
}

std::string train_command(const PlanConfig& c, const std::string& model, int ranks, int batch) {
  std::ostringstream s;
  if (c.method == Method::parameter_server) {
    s << "braid launch --servers " << c.servers << " --workers " << c.data
      << " -- braid train --strategy ps";
    if (c.ps_mode == PsMode::async) s << " --ps.mode async";
    if (c.ps_mode == PsMode::ssp) s << " --ps.mode ssp --ps.staleness-bound " << c.staleness;
    if (c.backup_workers > 0) s << " --ps.backup-workers " << c.backup_workers;
  } else {
    s << "braid launch -n " << ranks << " -- braid train";
    const int axes = (c.data > 1) + (c.tensor > 1) + (c.pipeline > 1);
    if (c.method == Method::local_sgd) {
      s << " --strategy local_sgd --local-sgd.period " << c.local_period;
    } else if (axes == 0) {
      s << " --strategy single";
    } else if (axes == 1 && c.data > 1) {
      s << " --strategy ddp";
    } else if (axes == 1 && c.pipeline > 1) {
      s << " --strategy pipeline";
    } else if (axes == 1 && c.tensor > 1) {
      s << " --strategy tensor";
    } else {
      s << " --strategy mesh --mesh.data " << c.data << " --mesh.tensor " << c.tensor
        << " --mesh.pipeline " << c.pipeline;
    }
    if (c.zero_stage > 0) s << " --zero-stage " << c.zero_stage;
    if (c.pipeline > 1) {
      s << " --pipeline.micro-batches " << c.micro_batches << " --pipeline.schedule "
        << parallel::schedule_name(c.schedule);
      if (c.chunks > 1) s << " --pipeline.chunks " << c.chunks;
      if (c.recompute) s << " --pipeline.recompute";
    }
    if (c.data > 1 && c.method == Method::data_parallel && c.bucket_bytes != 25.0 * kMiB)
      s << " --bucket-mb " << c.bucket_bytes / kMiB;
    if (c.data > 1 && c.codec.empty() && c.wire_ratio == 0.5) s << " --comm-dtype bf16";
    if (!c.codec.empty()) s << " --compression.codec " << c.codec;
  }
  s << " --model " << model << " --global-batch " << batch;
  return s.str();
}

}  // namespace braid::plan
