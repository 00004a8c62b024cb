#include "parallel/ps_worker.h"

#include <algorithm>
#include <exception>

#include "comm/collectives.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/ps_pull.h"

namespace braid::parallel {

PsWorker::PsWorker(std::unique_ptr<nn::Module> module, StepOptions options,
                   std::shared_ptr<comm::Group> world, PsLayout layout)
    : Strategy(std::move(module), std::move(options)), world_(std::move(world)), layout_(layout) {
  BRAID_CHECK(world_, "ps worker: needs the job's world group");
  BRAID_CHECK(world_->size() == layout_.size(), "ps worker: a job of ", layout_.workers,
              " workers and ", layout_.servers, " servers has ", layout_.size(),
              " ranks, but the group has ", world_->size());
  BRAID_CHECK(layout_.is_worker(world_->rank()), "ps worker: rank ", world_->rank(),
              " is a server in this layout (workers are ranks 0..", layout_.workers - 1, ")");
  build();
  // Collective over the world: the servers split off too (colour 1) and ignore theirs.
  workers_ = world_->split(0, world_->rank());
  ranges_ = split_key_ranges(optimizer_->segments(), params_.size(), layout_.servers);
  versions_.assign(ranges_.size(), 0);
  replies_.assign(ranges_.size(), PsPullReply{});
  push_.final_floats.assign(ranges_.size(), 0);
  push_.started.assign(ranges_.size(), false);
  push_.requests.assign(ranges_.size(), PsRequest{});
  pull_arrived_.assign(ranges_.size(), true);
  params_.add_ready_listener([this](int64_t begin, int64_t end) { on_ready(begin, end); });
  params_.set_use_listener([this](int64_t begin, int64_t end) { on_use(begin, end); });
}

void PsWorker::on_use(int64_t begin, int64_t end) {
  const auto pull =
      std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.is_pull; });
  if (pull == pending_.end()) return;
  Stopwatch watch;
  for (size_t s = 0; s < ranges_.size(); ++s)
    if (std::min(end, ranges_[s].end) > std::max(begin, ranges_[s].begin))
      receive_pull_from(s, pull->ids);
  waited_in_forward_ += watch.elapsed();
}

void PsWorker::receive_pull_from(size_t s, std::span<const comm::RequestId> ids) {
  if (pull_arrived_[s]) return;
  wait_servers(ids.subspan(2 * s, 2), "pulling the parameters");
  pull_arrived_[s] = true;
  versions_[s] = replies_[s].version;
  if (replies_[s].stop_at >= 0 && (stop_at_ < 0 || replies_[s].stop_at < stop_at_)) {
    stop_at_ = replies_[s].stop_at;
    stop_reason_ = replies_[s].stop_reason;
    stop_worker_ = replies_[s].stop_worker;
  }
}

void PsWorker::on_ready(int64_t begin, int64_t end) {
  if (!push_.armed) return;
  for (size_t s = 0; s < ranges_.size(); ++s) {
    const KeyRange& r = ranges_[s];
    const int64_t overlap = std::min(end, r.end) - std::max(begin, r.begin);
    if (overlap <= 0) continue;
    push_.final_floats[s] += overlap;
    if (push_.final_floats[s] == r.size() && !push_.started[s] && pull_arrived_[s])
      send_range(static_cast<int>(s), push_.lr, push_.step, 1);
  }
}

void PsWorker::seed_servers() {
  if (seeded_ || world_->rank() != 0) return;
  seeded_ = true;
  for (int s = 0; s < layout_.servers; ++s) {
    const KeyRange& r = ranges_[static_cast<size_t>(s)];
    request(s, {.kind = PsRequestKind::init, .worker = 0});
    const comm::RequestId id =
        world_->isend(layout_.server_rank(s), kInitTag, params_.params() + r.begin,
                      static_cast<size_t>(r.size()) * sizeof(float));
    wait_servers(std::span<const comm::RequestId>(&id, 1), "sending the initial parameters");
  }
}

PsWorker::~PsWorker() {
  if (finished_) return;
  const bool failing = std::uncaught_exceptions() > 0;
  try {
    if (!failing) {
      finish();
      return;
    }
    finished_ = true;
    for (int s = 0; s < layout_.servers; ++s)
      request(s, {.kind = PsRequestKind::fail, .worker = world_->rank()});
  } catch (const std::exception& e) {
    log_warn("ps worker ", world_->rank(), ": could not tell the servers it ",
             failing ? "failed" : "is done", ": ", e.what());
  }
}

std::string PsWorker::stop_unfinished_reason() const {
  if (stop_reason_ != PsStopReason::worker_left) return "";
  return detail::concat("worker ", stop_worker_, " left the job after step ", stop_at_,
                        " and sync mode cannot complete a step without it");
}

void PsWorker::request(int server, const PsRequest& r) {
  const comm::RequestId id = world_->isend(layout_.server_rank(server), kRequestTag, &r, sizeof r);
  wait_servers(std::span<const comm::RequestId>(&id, 1), "a request");
}

void PsWorker::wait_servers(std::span<const comm::RequestId> ids, const char* what) {
  try {
    world_->wait(ids);
  } catch (const comm::PeerError& e) {
    BRAID_THROW(comm::PeerError, "ps worker ", world_->rank(), ": a parameter server failed (",
                what, "): ", e.what(), " (servers are ranks ", layout_.workers, "..",
                layout_.workers + layout_.servers - 1, ": ps 0..", layout_.servers - 1, ")");
  } catch (const TimeoutError& e) {
    BRAID_THROW(TimeoutError, "ps worker ", world_->rank(),
                ": no answer from the parameter servers (", what, "): ", e.what());
  }
}

int PsWorker::start_pull(int64_t step) {
  for (const Pending& p : pending_)
    BRAID_CHECK(!p.is_pull, "ps worker: pull ", p.timestamp,
                " is still under way (pulls land in the parameter buffer): wait() for it first");
  seed_servers();
  // Both receives of every server are posted before any request goes out.
  Pending p{next_timestamp_++, true,
            post_pull_receives(*world_, layout_, ranges_, replies_, params_.params())};
  for (int s = 0; s < layout_.servers; ++s)
    request(s, {.kind = PsRequestKind::pull, .worker = world_->rank(), .step = step});
  std::fill(pull_arrived_.begin(), pull_arrived_.end(), false);
  pending_.push_back(std::move(p));
  return pending_.back().timestamp;
}

void PsWorker::wait(int timestamp) {
  const auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](const Pending& p) { return p.timestamp == timestamp; });
  BRAID_CHECK(it != pending_.end(), "ps worker: no exchange with timestamp ", timestamp,
              " is under way (waited for already, or never started)");
  Pending p = std::move(*it);
  pending_.erase(it);
  if (!p.is_pull) {
    wait_servers(p.ids, "pushing the gradient");
    return;
  }
  for (size_t s = 0; s < ranges_.size(); ++s) receive_pull_from(s, p.ids);
}

void PsWorker::announce_stop(int64_t step) {
  if (stop_at_ < 0 || step < stop_at_) stop_at_ = step;
  for (int s = 0; s < layout_.servers; ++s)
    request(s, {.kind = PsRequestKind::stop, .worker = world_->rank(), .step = step});
}

void PsWorker::save_outside(const std::string& dir) {
  seed_servers();
  std::vector<int64_t> saved(ranges_.size());
  std::vector<comm::RequestId> ids;
  for (int s = 0; s < layout_.servers; ++s)
    ids.push_back(world_->irecv(layout_.server_rank(s), kSavedTag, &saved[static_cast<size_t>(s)],
                                sizeof(int64_t)));
  for (int s = 0; s < layout_.servers; ++s) {
    request(s, {.kind = PsRequestKind::save,
                .worker = world_->rank(),
                .step = static_cast<int64_t>(dir.size())});
    const comm::RequestId id =
        world_->isend(layout_.server_rank(s), kSaveTag, dir.data(), dir.size());
    wait_servers(std::span<const comm::RequestId>(&id, 1), "saving a checkpoint");
  }
  wait_servers(ids, "saving a checkpoint");
}

void PsWorker::send_range(int s, float lr, int64_t step, int64_t weight) {
  const auto i = static_cast<size_t>(s);
  const KeyRange& r = ranges_[i];
  push_.started[i] = true;
  // The request stays alive in push_.requests until its send completes.
  push_.requests[i] = {.kind = PsRequestKind::push,
                       .worker = world_->rank(),
                       .step = step,
                       .based_on = versions_[i],
                       .lr = lr,
                       .weight = weight};
  const int rank = layout_.server_rank(s);
  push_.ids.push_back(world_->isend(rank, kRequestTag, &push_.requests[i], sizeof(PsRequest)));
  push_.ids.push_back(world_->isend(rank, kPushTag, params_.grads() + r.begin,
                                    static_cast<size_t>(r.size()) * sizeof(float)));
}

int PsWorker::start_push(float lr, int64_t step, int64_t weight) {
  for (const Pending& p : pending_)
    BRAID_CHECK(p.is_pull, "ps worker: push ", p.timestamp,
                " is still under way (its requests are reused): wait() for it first");
  push_.armed = false;
  next_step_ = step + 1;  // what synchronize() waits for, whoever drives the steps
  for (int s = 0; s < layout_.servers; ++s)
    if (!push_.started[static_cast<size_t>(s)]) send_range(s, lr, step, weight);
  Pending p{next_timestamp_++, false, {}};
  p.ids.swap(push_.ids);
  std::fill(push_.started.begin(), push_.started.end(), false);
  std::fill(push_.final_floats.begin(), push_.final_floats.end(), 0);
  pending_.push_back(std::move(p));
  return pending_.back().timestamp;
}

double PsWorker::step(const data::Batch& batch, float lr, int64_t step) {
  Stopwatch watch;
  times_ = {};
  // Forward waits for each server's range just before its first layer that reads it.
  const int pull = start_pull(step);
  if (!module_->announces_use()) wait(pull);
  times_.communication_exposed += watch.lap();
  waited_in_forward_ = 0;
  micro_.split(batch, options_.accumulate_steps);
  // A range is final when the one backward reports it; with micro-batches, only after the
  // last, so those push after backward.
  push_.armed = options_.accumulate_steps == 1;
  push_.lr = lr;
  push_.step = step;
  const double loss = accumulate_micro_batches(micro_, step, world_->rank(), layout_.workers);
  times_.forward -= waited_in_forward_;
  times_.communication_exposed += waited_in_forward_;
  watch.lap();
  if (module_->announces_use()) wait(pull);  // every range arrived in forward: nothing waits
  push(lr, step);
  times_.communication_exposed += watch.lap();
  times_.total = watch.elapsed();
  return loss;
}

void PsWorker::finish() {
  if (finished_) return;
  finished_ = true;
  seed_servers();  // a run of no steps still leaves the servers able to finish
  for (int s = 0; s < layout_.servers; ++s)
    request(s, {.kind = PsRequestKind::done, .worker = world_->rank()});
}

void PsWorker::sum_over_ranks(double* values, size_t count, const char* what) {
  try {
    comm::allreduce(*workers_, values, count, DType::f64, ReduceOp::sum);
  } catch (const IoError& e) {
    BRAID_THROW(comm::PeerError, "ps worker ", world_->rank(), ": the ", what,
                " over the workers failed: ", e.what());
  }
}

void PsWorker::start_sum_over_ranks(double* values, size_t count, const char* what) {
  BRAID_CHECK(pending_values_ == nullptr, "ps worker: a sum over ranks is already under way");
  pending_values_ = values;
  pending_count_ = count;
  pending_what_ = what;
}

void PsWorker::finish_sum_over_ranks() {
  if (pending_values_ == nullptr) return;
  double* values = pending_values_;
  pending_values_ = nullptr;
  sum_over_ranks(values, pending_count_, pending_what_);
}

}  // namespace braid::parallel
