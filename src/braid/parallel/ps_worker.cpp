#include "parallel/ps_worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <thread>
#include <utility>

#include "comm/collectives.h"
#include "core/log.h"
#include "core/timer.h"

namespace braid::parallel {

namespace {
// How often a restarted worker's rejoin looks at the launcher's word on the server it asks.
constexpr auto kRejoinPollEvery = std::chrono::milliseconds(50);
}  // namespace

PsWorker::PsWorker(std::unique_ptr<nn::Module> module, StepOptions options,
                   std::shared_ptr<comm::Group> world, PsLayout layout,
                   const CodecConfig& push_codec)
    : Strategy(std::move(module), std::move(options)),
      world_(std::move(world)),
      layout_(layout),
      push_encoder_(make_push_encoder(push_codec)) {
  BRAID_CHECK(world_, "ps worker: needs the job's world group");
  BRAID_CHECK(world_->size() == layout_.size(), "ps worker: a job of ", layout_.workers,
              " workers and ", layout_.servers, " servers has ", layout_.size(),
              " ranks, but the group has ", world_->size());
  BRAID_CHECK(layout_.is_worker(world_->rank()), "ps worker: rank ", world_->rank(),
              " is a server in this layout (workers are ranks 0..", layout_.workers - 1, ")");
  build();
  // Collective over the world: the servers split off too (colour 1) and ignore theirs. A
  // restarted worker joins a running job: no collective, and the servers hold the model.
  if (layout_.incarnation == 0) workers_ = world_->split(0, world_->rank());
  seeded_ = layout_.incarnation > 0;
  ranges_ = split_key_ranges(optimizer_->segments(), params_.size(), layout_.servers);
  versions_.assign(ranges_.size(), 0);
  replies_.assign(ranges_.size(), PsPullReply{});
  push_.final_floats.assign(ranges_.size(), 0);
  push_.started.assign(ranges_.size(), false);
  push_.requests.assign(ranges_.size(), PsRequest{});
  push_.ids.assign(ranges_.size(), Ids{});
  pull_arrived_.assign(ranges_.size(), true);
  attached_.assign(ranges_.size(), 0);
  if (push_encoder_) {
    for (const KeyRange& r : ranges_) {
      push_memory_.emplace_back(static_cast<size_t>(r.size()), 0.0f);
      push_wire_.emplace_back(push_encoder_->encoded_bytes(r.size()));
    }
    push_memory_norm2_.assign(ranges_.size(), 0.0);
  }
  params_.add_ready_listener([this](int64_t begin, int64_t end) { on_ready(begin, end); });
  params_.set_use_listener([this](int64_t begin, int64_t end) { on_use(begin, end); });
}

void PsWorker::on_use(int64_t begin, int64_t end) {
  const auto pull =
      std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.is_pull; });
  if (pull == pending_.end()) return;
  Stopwatch watch;
  for (size_t s = 0; s < ranges_.size(); ++s)
    if (std::min(end, ranges_[s].end) > std::max(begin, ranges_[s].begin)) receive_pull_from(s);
  waited_in_forward_ += watch.elapsed();
}

void PsWorker::set_restarts(std::shared_ptr<PsRestarts> restarts) {
  restarts_ = std::move(restarts);
  // A restarted worker starts here: each server's process of now connects to it as it
  // learns of the restart.
  for (int s = 0; s < layout_.servers; ++s)
    attached_[static_cast<size_t>(s)] = restarts_->incarnation(layout_.server_rank(s));
}

PsWorker::Ids PsWorker::start_pull_from(int s, int64_t step) {
  const auto i = static_cast<size_t>(s);
  const KeyRange& r = ranges_[i];
  const int rank = layout_.server_rank(s);
  // Both receives are posted before the request goes out.
  Ids ids = {world_->irecv(rank, kVersionTag, &replies_[i], sizeof(PsPullReply)),
             world_->irecv(rank, kParamsTag, params_.params() + r.begin,
                           static_cast<size_t>(r.size()) * sizeof(float))};
  const PsRequest request{.kind = PsRequestKind::pull, .worker = world_->rank(), .step = step};
  // The request is on its way before it leaves scope.
  try {
    wait_server(s, {world_->isend(rank, kRequestTag, &request, sizeof request)},
                "a pull's request");
  } catch (const comm::PeerError&) {
    // The receives fail with it: the caller's wait on them sees the server gone.
  }
  return ids;
}

void PsWorker::receive_pull_from(size_t s) {
  if (pull_arrived_[s]) return;
  const auto pull =
      std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.is_pull; });
  BRAID_CHECK(pull != pending_.end(), "ps worker: no pull is under way");
  const int server = static_cast<int>(s);
  request_pulls(*pull, server);  // forward asks for it: requested now if it was not
  for (;;) {
    try {
      wait_server(server, pull->by_server[s], "pulling the parameters");
      break;
    } catch (const comm::PeerError& e) {
      reconnect(server, pull->incarnations[s], e);
      pull->incarnations[s] = server_incarnation(server);
      pull->by_server[s] = start_pull_from(server, pull->step);
    }
  }
  pull_arrived_[s] = true;
  pull_in_flight_ -= static_cast<size_t>(ranges_[s].size()) * sizeof(float);
  request_pulls(*pull, -1);  // its credit goes to the next range
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

// A server that dies before the first checkpoint cannot be restarted (it would have
// nothing to start from), so the initial parameters are never sent again.
void PsWorker::seed_servers() {
  if (seeded_ || world_->rank() != 0) return;
  seeded_ = true;
  for (int s = 0; s < layout_.servers; ++s) {
    const KeyRange& r = ranges_[static_cast<size_t>(s)];
    request_once(s, {.kind = PsRequestKind::init, .worker = 0});
    const comm::RequestId id =
        world_->isend(layout_.server_rank(s), kInitTag, params_.params() + r.begin,
                      static_cast<size_t>(r.size()) * sizeof(float));
    wait_server(s, {id}, "sending the initial parameters");
  }
}

int64_t PsWorker::rejoin() {
  BRAID_CHECK(layout_.incarnation > 0, "ps worker ", world_->rank(),
              ": rejoin() is for a restarted worker");
  std::vector<PsRejoinReply> replies(static_cast<size_t>(layout_.servers));
  int64_t step = 0;
  for (int s = 0; s < layout_.servers; ++s) {
    const auto i = static_cast<size_t>(s);
    // The servers connect to this process as they learn of its restart: until then the
    // exchange waits (the job's deadline bounds it, naming the server).
    rejoin_server(s, &replies[i]);
    versions_[i] = replies[i].version;
    step = std::max(step, replies[i].step);
    if (replies[i].stop_at >= 0 && (stop_at_ < 0 || replies[i].stop_at < stop_at_)) {
      stop_at_ = replies[i].stop_at;
      stop_reason_ = replies[i].stop_reason;
      stop_worker_ = replies[i].stop_worker;
    }
  }
  next_step_ = step;
  return step;
}

void PsWorker::rejoin_server(int s, PsRejoinReply* reply) {
  const int rank = layout_.server_rank(s);
  const comm::Deadline until = world_->deadline();
  const auto release = [&](const Ids& ids) {
    for (const comm::RequestId id : ids) {
      try {
        world_->test(id);  // a request the reconnection failed: released
      } catch (const Error&) {
      }
    }
  };
  for (;;) {
    const int incarnation = server_incarnation(s);
    const PsRequest request{.kind = PsRequestKind::rejoin, .worker = world_->rank()};
    Ids ids = {world_->irecv(rank, kRejoinTag, reply, sizeof(PsRejoinReply)),
               world_->isend(rank, kRequestTag, &request, sizeof request)};
    std::optional<comm::RankRestart> word;
    try {
      for (;;) {
        std::erase_if(ids, [&](comm::RequestId id) { return world_->test(id); });
        if (ids.empty()) return;
        if (until.expired())
          BRAID_THROW(TimeoutError, "ps worker ", world_->rank(),
                      ": no answer from parameter server ps ", s, " (rank ", rank,
                      "), rejoining the job, within ", until.waited_seconds(),
                      " s (raise BRAID_TIMEOUT_S if the servers need longer)");
        // The poll of the launcher's word paces this loop.
        if (!restarts_) {
          std::this_thread::sleep_for(kRejoinPollEvery);
          continue;
        }
        word =
            restarts_->await_decision(rank, incarnation, comm::Deadline::after(kRejoinPollEvery));
        if (word) break;
      }
    } catch (const comm::PeerError& e) {
      reconnect(s, incarnation, e);
      release(ids);
      continue;
    }
    connect_restarted(
        s, *word,
        comm::PeerError(detail::concat("ps worker ", world_->rank(), ": ps ", s, " (rank ", rank,
                                       ") died while this restarted "
                                       "worker was rejoining it")));
    release(ids);
  }
}

void PsWorker::reconnect(int s, int incarnation, const comm::PeerError& e) {
  if (!restarts_) throw e;
  const int rank = layout_.server_rank(s);
  if (server_incarnation(s) > incarnation) return;  // reconnected since
  // The launcher writes its word as it reaps the dead process.
  const std::optional<comm::RankRestart> word =
      restarts_->await_decision(rank, incarnation, comm::Deadline::after(std::chrono::seconds(10)));
  if (!word)
    BRAID_THROW(comm::PeerError, e.what(),
                "; the launcher said nothing about restarting it within 10 s");
  connect_restarted(s, *word, e);
}

void PsWorker::connect_restarted(int s, const comm::RankRestart& word, const comm::PeerError& e) {
  const int rank = layout_.server_rank(s);
  if (!word.restarted)
    BRAID_THROW(comm::PeerError, e.what(),
                "; the launcher does not restart it (no restarts left, or it exited with an "
                "error of its own: see its output)");
  log_warn("ps worker ", world_->rank(), ": ps ", s, " (rank ", rank,
           ") died and is being restarted (restart ", word.incarnation + 1,
           "); waiting for it (within ", world_->timeout().count() / 1000.0, " s)");
  try {
    restarts_->connect(*world_, rank, world_->deadline());
  } catch (const Error& err) {
    BRAID_THROW(comm::PeerError, "ps worker ", world_->rank(), ": ps ", s,
                " was restarted, but its new process did not connect: ", err.what(),
                " (raise BRAID_TIMEOUT_S if it needs longer to start)");
  }
  attached_[static_cast<size_t>(s)] = restarts_->incarnation(rank);
  log_warn("ps worker ", world_->rank(), ": reconnected to ps ", s, " (restart ",
           server_incarnation(s), ") at step ", next_step_,
           "; the updates its range had since the run's last checkpoint are lost");
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
      request_once(s, {.kind = PsRequestKind::fail, .worker = world_->rank()});
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

void PsWorker::request_once(int server, const PsRequest& r) {
  const comm::RequestId id = world_->isend(layout_.server_rank(server), kRequestTag, &r, sizeof r);
  wait_server(server, {id}, "a request");
}

void PsWorker::request(int server, const PsRequest& r) {
  for (;;) {
    const int incarnation = server_incarnation(server);
    try {
      return request_once(server, r);
    } catch (const comm::PeerError& e) {
      reconnect(server, incarnation, e);
    }
  }
}

void PsWorker::wait_server(int s, const Ids& ids, const char* what) {
  try {
    world_->wait(std::span<const comm::RequestId>(ids));
  } catch (const comm::PeerError& e) {
    BRAID_THROW(comm::PeerError, "ps worker ", world_->rank(), ": a parameter server failed: ps ",
                s, " (rank ", layout_.server_rank(s), "), ", what, ": ", e.what());
  } catch (const TimeoutError& e) {
    BRAID_THROW(TimeoutError, "ps worker ", world_->rank(), ": no answer from parameter server ps ",
                s, " (rank ", layout_.server_rank(s), "), ", what, ": ", e.what());
  }
}

int PsWorker::start_pull(int64_t step) {
  for (const Pending& p : pending_)
    BRAID_CHECK(!p.is_pull, "ps worker: pull ", p.timestamp,
                " is still under way (pulls land in the parameter buffer): wait() for it first");
  seed_servers();
  Pending p{.timestamp = next_timestamp_++, .is_pull = true, .step = step};
  const auto servers = static_cast<size_t>(layout_.servers);
  p.by_server.assign(servers, Ids{});
  p.incarnations.assign(servers, 0);
  std::fill(pull_arrived_.begin(), pull_arrived_.end(), false);
  next_pull_ = 0;
  pull_in_flight_ = 0;
  pending_.push_back(std::move(p));
  request_pulls(pending_.back(), -1);
  return pending_.back().timestamp;
}

void PsWorker::request_pulls(Pending& pull, int upto) {
  while (next_pull_ < layout_.servers) {
    const auto s = static_cast<size_t>(next_pull_);
    const auto bytes = static_cast<size_t>(ranges_[s].size()) * sizeof(float);
    const bool within =
        pull_credit_ == 0 || pull_in_flight_ == 0 || pull_in_flight_ + bytes <= pull_credit_;
    if (!within && next_pull_ > upto) return;
    pull.incarnations[s] = server_incarnation(next_pull_);
    pull.by_server[s] = start_pull_from(next_pull_, pull.step);
    pull_in_flight_ += bytes;
    most_pull_in_flight_ = std::max(most_pull_in_flight_, pull_in_flight_);
    ++next_pull_;
  }
}

void PsWorker::wait(int timestamp) {
  const auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](const Pending& p) { return p.timestamp == timestamp; });
  BRAID_CHECK(it != pending_.end(), "ps worker: no exchange with timestamp ", timestamp,
              " is under way (waited for already, or never started)");
  if (it->is_pull) {
    for (size_t s = 0; s < ranges_.size(); ++s) receive_pull_from(s);
    pending_.erase(std::find_if(pending_.begin(), pending_.end(),
                                [&](const Pending& p) { return p.timestamp == timestamp; }));
    return;
  }
  Pending p = std::move(*it);
  pending_.erase(it);
  for (int s = 0; s < layout_.servers; ++s) {
    try {
      wait_server(s, p.by_server[static_cast<size_t>(s)], "pushing the gradient");
    } catch (const comm::PeerError& e) {
      // The push is lost with the server's state since its checkpoint: not sent again.
      reconnect(s, p.incarnations[static_cast<size_t>(s)], e);
    }
  }
}

void PsWorker::announce_stop(int64_t step) {
  if (stop_at_ < 0 || step < stop_at_) stop_at_ = step;
  for (int s = 0; s < layout_.servers; ++s)
    request(s, {.kind = PsRequestKind::stop, .worker = world_->rank(), .step = step});
}

// Every server saves at once; a server restarted meanwhile is asked again (its new process
// saves the range it reloaded).
void PsWorker::save_outside(const std::string& dir) {
  seed_servers();
  const auto n = static_cast<size_t>(layout_.servers);
  std::vector<int64_t> saved(n);
  std::vector<PsRequest> requests(n);
  std::vector<Ids> ids(n);
  const auto start = [&](int s) {
    const auto i = static_cast<size_t>(s);
    const int rank = layout_.server_rank(s);
    requests[i] = {.kind = PsRequestKind::save,
                   .worker = world_->rank(),
                   .step = static_cast<int64_t>(dir.size())};
    ids[i] = {world_->irecv(rank, kSavedTag, &saved[i], sizeof(int64_t)),
              world_->isend(rank, kRequestTag, &requests[i], sizeof(PsRequest)),
              world_->isend(rank, kSaveTag, dir.data(), dir.size())};
  };
  std::vector<int> incarnations;
  for (int s = 0; s < layout_.servers; ++s) {
    incarnations.push_back(server_incarnation(s));
    start(s);
  }
  for (int s = 0; s < layout_.servers; ++s) {
    for (;;) {
      try {
        wait_server(s, ids[static_cast<size_t>(s)], "saving a checkpoint");
        break;
      } catch (const comm::PeerError& e) {
        reconnect(s, incarnations[static_cast<size_t>(s)], e);
        incarnations[static_cast<size_t>(s)] = server_incarnation(s);
        start(s);
      }
    }
  }
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
  push_.ids[i].push_back(world_->isend(rank, kRequestTag, &push_.requests[i], sizeof(PsRequest)));
  const void* payload = params_.grads() + r.begin;
  size_t bytes = static_cast<size_t>(r.size()) * sizeof(float);
  push_report_.dense_bytes += static_cast<double>(bytes);
  if (push_encoder_) {
    const EncodeSite site{.step = step, .rank = world_->rank(), .bucket = i};
    push_memory_norm2_[i] = push_encoder_->encode(params_.grads() + r.begin, push_memory_[i].data(),
                                                  r.size(), push_wire_[i].data(), site);
    payload = push_wire_[i].data();
    bytes = push_wire_[i].size();
  }
  push_report_.wire_bytes += static_cast<double>(bytes);
  push_.ids[i].push_back(world_->isend(rank, kPushTag, payload, bytes));
}

int PsWorker::start_push(float lr, int64_t step, int64_t weight) {
  for (const Pending& p : pending_)
    BRAID_CHECK(p.is_pull, "ps worker: push ", p.timestamp,
                " is still under way (its requests are reused): wait() for it first");
  push_.armed = false;
  next_step_ = step + 1;  // what synchronize() waits for, whoever drives the steps
  for (int s = 0; s < layout_.servers; ++s)
    if (!push_.started[static_cast<size_t>(s)]) send_range(s, lr, step, weight);
  double memory_norm2 = 0;
  for (double x : push_memory_norm2_) memory_norm2 += x;
  push_report_.error_norm = std::sqrt(memory_norm2);
  codec_report_ = std::exchange(push_report_, CodecReport{});
  Pending p{.timestamp = next_timestamp_++, .is_pull = false};
  p.by_server.swap(push_.ids);
  push_.ids.assign(ranges_.size(), Ids{});
  for (int s = 0; s < layout_.servers; ++s) p.incarnations.push_back(server_incarnation(s));
  std::fill(push_.started.begin(), push_.started.end(), false);
  std::fill(push_.final_floats.begin(), push_.final_floats.end(), 0);
  pending_.push_back(std::move(p));
  return pending_.back().timestamp;
}

void PsWorker::tune_pull_credit() {
  size_t total = 0, largest = 0;
  for (const KeyRange& r : ranges_) {
    const auto bytes = static_cast<size_t>(r.size()) * sizeof(float);
    total += bytes;
    largest = std::max(largest, bytes);
  }
  std::vector<size_t> candidates;
  for (const size_t c : {total, std::max(largest, total / 4), largest})
    if (std::find(candidates.begin(), candidates.end(), c) == candidates.end())
      candidates.push_back(c);
  pull_tuner_.emplace(std::move(candidates), "pull credit");
}

double PsWorker::step(const data::Batch& batch, float lr, int64_t step) {
  if (pull_tuner_ && !pull_tuner_->done()) {
    if (const auto credit = pull_tuner_->begin_step(since_step_.lap(), {})) pull_credit_ = *credit;
    if (pull_tuner_->done()) log_info("ps worker ", world_->rank(), ": ", pull_tuner_->summary());
  }
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
  // A server restarted after this is told by the store that this worker finished.
  if (restarts_) restarts_->mark_done(world_->rank());
}

void PsWorker::sum_over_ranks(double* values, size_t count, const char* what) {
  BRAID_CHECK(workers_, "ps worker ", world_->rank(), ": the ", what,
              " is a sum over every worker, and this restarted worker is in no workers' group "
              "(it talks to the servers only); drop what needs it (the timeline)");
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
