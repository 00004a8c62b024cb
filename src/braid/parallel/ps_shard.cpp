#include "parallel/ps_shard.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {

std::string_view ps_mode_name(PsMode m) {
  switch (m) {
    case PsMode::sync:
      return "sync";
    case PsMode::async:
      return "async";
    case PsMode::ssp:
      return "ssp";
  }
  return "?";
}

PsMode parse_ps_mode(std::string_view text) {
  for (PsMode m : {PsMode::sync, PsMode::async, PsMode::ssp})
    if (text == ps_mode_name(m)) return m;
  BRAID_THROW(Error, "ps.mode is '", text, "'; choose sync, async or ssp");
}

void validate(const PsRules& r) {
  BRAID_CHECK(r.workers >= 1, "ps: the job needs at least one worker, got ", r.workers);
  BRAID_CHECK(r.backup_workers >= 0 && r.backup_workers < r.workers, "ps.backup_workers is ",
              r.backup_workers, "; it must be in [0, ", r.workers,
              ") (workers - backup_workers gradients make a step)");
  BRAID_CHECK(r.mode == PsMode::sync || r.backup_workers == 0, "ps.backup_workers is ",
              r.backup_workers, " but ps.mode is ", ps_mode_name(r.mode),
              "; backup workers belong to sync mode");
  BRAID_CHECK(r.staleness_bound >= 0, "ps.staleness_bound is ", r.staleness_bound,
              "; it must be >= 0");
  BRAID_CHECK(!r.staleness_lr || r.mode != PsMode::sync,
              "ps.staleness_lr applies to async and ssp modes; sync gradients are never stale");
  BRAID_CHECK(!r.federated || (r.mode == PsMode::sync && r.backup_workers == 0),
              "fedavg: rounds are synchronous and every live worker's clients count; drop "
              "ps.mode ",
              ps_mode_name(r.mode), " and ps.backup_workers");
  if (r.federated) validate(*r.federated);
}

PsShard::PsShard(KeyRange range, std::span<const optim::Segment> segments,
                 std::span<const float> initial, const optim::OptimizerConfig& optimizer,
                 PsRules rules)
    : range_(range),
      rules_(rules),
      params_(initial.begin(), initial.end()),
      clock_(static_cast<size_t>(rules.workers), 0),
      live_(static_cast<size_t>(rules.workers), true),
      histogram_(kHistogramBuckets, 0) {
  validate(rules_);
  BRAID_CHECK(static_cast<int64_t>(initial.size()) == range.size(), "ps shard: ", initial.size(),
              " initial values for a range of ", range.size(), " floats");
  optimizer_ = optim::make_optimizer(optimizer, segments_in(segments, range), range.size());
  if (rules_.mode == PsMode::sync) sum_.assign(static_cast<size_t>(range.size()), 0.0f);
  if (rules_.federated)
    server_optimizer_ = std::make_unique<ServerOptimizer>(*rules_.federated, range.size());
}

int PsShard::live_workers() const {
  return static_cast<int>(std::count(live_.begin(), live_.end(), true));
}

int PsShard::push(const Push& p, std::span<const float> grads) {
  BRAID_CHECK(p.worker >= 0 && p.worker < rules_.workers, "ps shard: a push from worker ", p.worker,
              " of ", rules_.workers);
  BRAID_CHECK(static_cast<int64_t>(grads.size()) == range_.size(), "ps shard: worker ", p.worker,
              " pushed ", grads.size(), " floats for a range of ", range_.size());
  auto& clock = clock_[static_cast<size_t>(p.worker)];
  clock = std::max(clock, p.step + 1);
  if (rules_.mode != PsMode::sync) {
    const int64_t staleness = std::max<int64_t>(0, version_ - p.based_on);
    const float lr = rules_.staleness_lr ? p.lr / static_cast<float>(1 + staleness) : p.lr;
    apply(grads, lr, staleness);
    return 1;
  }
  // Sync: the open step is version_; anything older arrived after its step was applied.
  if (p.step < version_) {
    ++dropped_;
    return 0;
  }
  BRAID_CHECK(p.step == version_, "ps shard: worker ", p.worker, " pushed a gradient for step ",
              p.step, " while step ", version_,
              " is open; a sync worker pulls step t's parameters before pushing for t");
  for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += grads[i];
  ++arrived_;
  weight_sum_ += static_cast<double>(p.weight);
  return complete_step(p.lr);
}

int PsShard::complete_step(float lr) {
  const int needed = rules_.federated ? live_workers() : rules_.workers - rules_.backup_workers;
  if (arrived_ == 0 || arrived_ < needed) return 0;
  if (rules_.federated) {
    server_optimizer_->step(params_, sum_, weight_sum_);
    ++version_;
    ++histogram_[0];
  } else {
    scale_into(sum_.data(), sum_.data(), range_.size(), 1.0f / static_cast<float>(arrived_));
    apply(sum_, lr, 0);
  }
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  arrived_ = 0;
  weight_sum_ = 0;
  return 1;
}

void PsShard::apply(std::span<const float> grads, float lr, int64_t staleness) {
  optimizer_->step(params_.data(), grads.data(), lr);
  ++version_;
  const auto bucket = std::min<size_t>(static_cast<size_t>(staleness), kHistogramBuckets - 1);
  ++histogram_[bucket];
}

int64_t PsShard::slowest_live_clock() const {
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < clock_.size(); ++w)
    if (live_[w]) slowest = std::min(slowest, clock_[w]);
  return slowest;
}

bool PsShard::may_pull(int64_t step) const {
  switch (rules_.mode) {
    case PsMode::sync:
      return version_ >= step;
    case PsMode::async:
      return true;
    case PsMode::ssp:
      // Step `step` may start while the slowest live worker has pushed at least
      // step - bound steps.
      return step - slowest_live_clock() <= rules_.staleness_bound;
  }
  return true;
}

void PsShard::lose_worker(int worker) {
  BRAID_CHECK(worker >= 0 && worker < rules_.workers, "ps shard: lose_worker(", worker, ") of ",
              rules_.workers);
  live_[static_cast<size_t>(worker)] = false;
  if (rules_.mode != PsMode::sync) return;
  if (rules_.federated) {
    // The round goes on with the others; it may be complete now.
    BRAID_CHECK(live_workers() > 0, "fedavg: every worker is gone");
    complete_step(0.0f);
    return;
  }
  // Sync without enough backups left: no step can complete any more.
  BRAID_CHECK(live_workers() >= rules_.workers - rules_.backup_workers, "ps: worker ", worker,
              " is gone and sync mode needs ", rules_.workers - rules_.backup_workers,
              " gradients a step with ", rules_.backup_workers, " backup workers; only ",
              live_workers(),
              " workers are left (use ps.backup_workers, or async or ssp mode, "
              "to go on without it)");
}

void PsShard::readmit_worker(int worker) {
  BRAID_CHECK(worker >= 0 && worker < rules_.workers, "ps shard: readmit_worker(", worker, ") of ",
              rules_.workers);
  BRAID_CHECK(rules_.mode != PsMode::sync, "ps: worker ", worker,
              " was counted lost and spoke again; sync mode cannot take it back (its step is "
              "gone), so it must be restarted with the job");
  live_[static_cast<size_t>(worker)] = true;
}

void PsShard::readmit_worker(int worker, int64_t step) {
  readmit_worker(worker);
  auto& clock = clock_[static_cast<size_t>(worker)];
  clock = std::max(clock, step);
}

int64_t PsShard::rejoin_worker(int worker) {
  BRAID_CHECK(worker >= 0 && worker < rules_.workers, "ps shard: rejoin_worker(", worker, ") of ",
              rules_.workers);
  const auto w = static_cast<size_t>(worker);
  live_[w] = false;
  int64_t step = clock_[w];
  if (rules_.mode == PsMode::sync) {
    step = version_;
  } else if (rules_.mode == PsMode::ssp && live_workers() > 0) {
    step = std::max(step, slowest_live_clock());
  }
  clock_[w] = step;
  live_[w] = true;
  return step;
}

PsShardSnapshot PsShard::snapshot() const {
  PsShardSnapshot s;
  s.params = params_;
  s.optimizer = optimizer_->state();
  if (server_optimizer_ && server_optimizer_->state_size() > 0) {
    Tensor state =
        Tensor::empty(Shape{server_optimizer_->state_size()}, DType::f32, MemCategory::optimizer);
    std::copy(server_optimizer_->state().begin(), server_optimizer_->state().end(), state.f32());
    s.optimizer.emplace_back("fedavg_server_state", state);
  }
  s.version = version_;
  s.clocks = clock_;
  return s;
}

void PsShard::restore(const PsShardSnapshot& s) {
  BRAID_CHECK(s.params.size() == params_.size(), "ps shard: a checkpoint of ", s.params.size(),
              " parameters for a range of ", params_.size(),
              "; resume with the servers, workers and model the run was saved with");
  BRAID_CHECK(s.clocks.size() == clock_.size(), "ps shard: a checkpoint of ", s.clocks.size(),
              " workers for a job of ", clock_.size(), "; resume with as many workers");
  optim::NamedTensors local = s.optimizer;
  const auto server = std::find_if(local.begin(), local.end(),
                                   [](const auto& t) { return t.first == "fedavg_server_state"; });
  BRAID_CHECK((server != local.end()) == (server_optimizer_ && server_optimizer_->state_size() > 0),
              "ps shard: the checkpoint's federated server state does not fit this run's "
              "(fedavg.server_optimizer differs?)");
  if (server != local.end()) {
    server_optimizer_->load_state(
        {server->second.f32(), static_cast<size_t>(server->second.numel())});
    local.erase(server);
  }
  optimizer_->load_state(local);
  params_ = s.params;
  version_ = s.version;
  clock_ = s.clocks;
}

}  // namespace braid::parallel
