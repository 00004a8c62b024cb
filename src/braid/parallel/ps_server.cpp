#include "parallel/ps_server.h"

#include <algorithm>
#include <thread>

#include "comm/blame.h"
#include "core/error.h"
#include "core/log.h"

namespace braid::parallel {
namespace {

// How often the server wakes from waiting on requests to look at its workers when none
// has a silence deadline sooner: cheap (a process check each), and a dead worker in sync
// mode is reported within this of its death.
constexpr std::chrono::milliseconds kCheckEvery{500};
// How often the launcher's restart log is read while a restart is under way.
constexpr std::chrono::milliseconds kRestartLookEvery{100};
// How long a worker found dead waits for the launcher's word on it (the launcher writes it
// as it reaps the process, within milliseconds).
constexpr std::chrono::milliseconds kWordWait{10000};

}  // namespace

PsServer::PsServer(std::shared_ptr<comm::Group> world, PsServerOptions options)
    : world_(std::move(world)), options_(std::move(options)) {
  BRAID_CHECK(world_, "ps server: needs the job's world group");
  const PsLayout& l = options_.layout;
  BRAID_CHECK(world_->size() == l.size(), "ps server: a job of ", l.workers, " workers and ",
              l.servers, " servers has ", l.size(), " ranks, but the group has ", world_->size());
  BRAID_CHECK(options_.server >= 0 && options_.server < l.servers, "ps server: index ",
              options_.server, " of ", l.servers, " servers");
  validate(options_.rules);
  // The workers split off a group of their own; a server takes part and keeps nothing. A
  // restarted process joins a running job: no collective.
  if (l.incarnation == 0) world_->split(1, world_->rank());
  range_ = split_key_ranges(options_.segments, options_.buffer_size,
                            l.servers)[static_cast<size_t>(options_.server)];
  staging_.assign(static_cast<size_t>(range_.size()), 0.0f);
  push_decoder_ = make_push_encoder(options_.push_codec);
  if (push_decoder_) push_wire_.resize(push_decoder_->encoded_bytes(range_.size()));
  members_.assign(static_cast<size_t>(l.workers), Member::live);
  worker_pushes_.assign(static_cast<size_t>(l.workers), 0);
  first_push_s_.assign(static_cast<size_t>(l.workers), 0.0);
  last_push_s_.assign(static_cast<size_t>(l.workers), 0.0);
  last_heard_.assign(static_cast<size_t>(l.workers), Clock::now());
  why_lost_.assign(static_cast<size_t>(l.workers), "");
  options_.worker_deadline = std::max(options_.worker_deadline, options_.worker_timeout);
  comebacks_.assign(static_cast<size_t>(l.workers), std::nullopt);
  awaiting_word_.assign(static_cast<size_t>(l.workers), std::nullopt);
  silent_since_restart_.assign(static_cast<size_t>(l.workers), false);
  if (l.incarnation > 0) start_restarted();
}

void PsServer::start_restarted() {
  BRAID_CHECK(options_.resume_from, "ps server ", options_.server,
              ": a restarted server needs the run's checkpoint to start from");
  BRAID_CHECK(options_.rules.mode != PsMode::sync, "ps server ", options_.server,
              ": restarted, but a sync job's server cannot rejoin it (its steps went on "
              "without this range); restarting servers needs ps.mode async or ssp");
  shard_.emplace(range_, options_.segments, options_.resume_from->params, options_.optimizer,
                 options_.rules);
  shard_->restore(*options_.resume_from);
  options_.resume_from.reset();
  for (int w = 0; w < options_.layout.workers; ++w) {
    const auto i = static_cast<size_t>(w);
    shard_->lose_worker(w);
    if (options_.restarts && options_.restarts->done(w)) {
      members_[i] = Member::done;
    } else if (options_.restarts && options_.restarts->stays_gone(w)) {
      members_[i] = Member::gone;
      why_lost_[i] = "it died before this server restarted, with no restarts left";
    } else {
      members_[i] = Member::lost;
      why_lost_[i] = "not heard from since this server restarted";
      silent_since_restart_[i] = true;
    }
  }
}

void PsServer::run() {
  started_ = Clock::now();
  PsRequest request;
  int source = -1;
  const auto live = [&] { return std::count(members_.begin(), members_.end(), Member::live); };
  // Workers are looked at only when no request came for a while: one that said done and
  // exited must not count as lost while its done still waits to be read.
  std::chrono::milliseconds wait_for = check_workers(false);
  // An evaluator is served until it says done (it does once it saw no worker left).
  evaluator_live_ = options_.layout.evaluators > 0;
  while (live() > 0 || evaluator_live_ || may_come_back()) {
    const comm::RequestId id = world_->irecv_any(kRequestTag, &request, sizeof request, &source);
    try {
      world_->wait(std::span<const comm::RequestId>(&id, 1), comm::Deadline::after(wait_for));
    } catch (const TimeoutError&) {
      // The wait released the receive; look at the workers and post it again.
      wait_for = check_workers(true);
      continue;
    } catch (const comm::PeerError&) {
      // Every other rank is gone: the workers still counted live died (or the transport
      // cannot say which, and the error stands).
      const auto before = live() + (evaluator_live_ ? 1 : 0);
      wait_for = check_workers(true);
      if (live() + (evaluator_live_ ? 1 : 0) == before) {
        if (!may_come_back()) throw;
        // Nobody to hear from until a restarted worker connects.
        std::this_thread::sleep_for(std::min(wait_for, kRestartLookEvery));
      }
      continue;
    }
    handle(request, source);
    // Under steady traffic the wait never times out: silence is looked at as requests come
    // (the process check waits for a quiet moment, see above).
    wait_for = check_workers(false);
  }
  for (const WaitingPull& w : waiting_)
    BRAID_CHECK(options_.layout.is_evaluator(w.worker) ||
                    members_[static_cast<size_t>(w.worker)] != Member::live,
                "ps server ", options_.server, ": worker ", w.worker,
                "'s pull was left unanswered when every worker was done");
  check_outcome();
}

bool PsServer::may_come_back() const {
  const auto pending = [](const auto& v) {
    return std::any_of(v.begin(), v.end(), [](const auto& o) { return o.has_value(); });
  };
  return std::find(members_.begin(), members_.end(), Member::lost) != members_.end() ||
         pending(comebacks_) || pending(awaiting_word_);
}

std::chrono::milliseconds PsServer::look_at_restarts() {
  const auto now = Clock::now();
  if (now < next_restart_look_)
    return std::chrono::duration_cast<std::chrono::milliseconds>(next_restart_look_ - now);
  next_restart_look_ = now + kRestartLookEvery;
  PsRestarts& restarts = *options_.restarts;
  for (const comm::RankRestart& e : restarts.poll()) {
    if (!options_.layout.is_worker(e.rank)) continue;  // a server's restart is the workers' to see
    const auto w = static_cast<size_t>(e.rank);
    if (members_[w] == Member::live || members_[w] == Member::lost)
      lose(e.rank, "its process was killed", true);
    awaiting_word_[w].reset();  // this is the word
    if (e.restarted) {
      comebacks_[w] = Comeback{e.incarnation + 1, now, false};
    } else {
      comebacks_[w].reset();
      log_warn("ps server ", options_.server, ": worker ", e.rank,
               " is not restarted (the launcher has no restarts left); going on without it");
    }
  }
  for (int worker = 0; worker < options_.layout.workers; ++worker) {
    const auto w = static_cast<size_t>(worker);
    if (awaiting_word_[w] && now - *awaiting_word_[w] >= kWordWait) awaiting_word_[w].reset();
    if (silent_since_restart_[w] && members_[w] == Member::lost && restarts.done(worker)) {
      // It finished (said done to this server's predecessor) before this server restarted.
      members_[w] = Member::done;
      silent_since_restart_[w] = false;
    }
    std::optional<Comeback>& c = comebacks_[w];
    if (!c) continue;
    if (now - c->since >= options_.worker_deadline) {
      log_warn("ps server ", options_.server, ": restarted worker ", worker, " (restart ",
               c->incarnation, ") did not rejoin within ",
               options_.worker_deadline.count() / 1000.0, " s; going on without it");
      c.reset();
      continue;
    }
    if (c->connected || !restarts.published(world_->global_rank(worker))) continue;
    try {
      restarts.connect(*world_, world_->global_rank(worker),
                       comm::Deadline::after(std::chrono::seconds(10)));
      c->connected = true;
    } catch (const Error& e) {
      log_warn("ps server ", options_.server, ": cannot connect to restarted worker ", worker,
               " (restart ", c->incarnation, "): ", e.what(), "; going on without it");
      c.reset();
    }
  }
  return kRestartLookEvery;
}

void PsServer::rejoin(int worker) {
  const auto w = static_cast<size_t>(worker);
  // A server restarted after the worker was heard of the worker's restart as old news.
  const int incarnation = comebacks_[w] ? comebacks_[w]->incarnation
                          : options_.restarts
                              ? options_.restarts->incarnation(world_->global_rank(worker))
                              : 0;
  comebacks_[w].reset();
  awaiting_word_[w].reset();
  silent_since_restart_[w] = false;
  members_[w] = Member::live;
  why_lost_[w].clear();
  last_heard_[w] = Clock::now();
  const int64_t step = shard_ ? shard_->rejoin_worker(worker) : 0;
  const PsRejoinReply reply{.step = step,
                            .version = shard_ ? shard_->version() : 0,
                            .stop_at = stop_at_,
                            .stop_reason = stop_at_ >= 0 ? stop_reason_ : PsStopReason::none,
                            .stop_worker = stop_worker_};
  rejoins_.push_back({worker, incarnation, step, worker_pushes_[w]});
  const auto live = std::count(members_.begin(), members_.end(), Member::live);
  log_warn("ps server ", options_.server, ": worker ", worker, " rejoined (restart ", incarnation,
           ") at step ", step, "; it counts again (", live, " live worker", live == 1 ? "" : "s",
           ")");
  const comm::RequestId id = world_->isend(worker, kRejoinTag, &reply, sizeof reply);
  const BlockedOn blocked(*this, worker);
  try {
    world_->wait(std::span<const comm::RequestId>(&id, 1),
                 comm::Deadline::after(std::max(silence_limit(), std::chrono::milliseconds(1000))));
  } catch (const Error& e) {
    lose(worker, detail::concat("did not take its rejoin's answer: ", e.what()), true);
    return;
  }
  answer_waiting_pulls();
}

void PsServer::check_outcome() const {
  const auto done = std::count(members_.begin(), members_.end(), Member::done);
  std::string lost;
  for (const std::string& line : lost_log_) lost += (lost.empty() ? "" : "; ") + line;
  BRAID_CHECK(done > 0, "ps server ", options_.server, ": no worker finished its run (", lost,
              "); the job failed");
  BRAID_CHECK(members_[0] == Member::done, "ps server ", options_.server,
              ": the chief (worker 0) did not finish its run (", why_lost_[0],
              "), so the run's end was never saved; the job failed");
}

std::chrono::milliseconds PsServer::check_workers(bool may_lose) {
  std::chrono::milliseconds next = kCheckEvery;
  if (options_.restarts) next = std::min(next, look_at_restarts());
  const auto now = Clock::now();
  if (may_lose && evaluator_live_) {
    const std::string gone = world_->transport().peer_gone(
        world_->global_rank(options_.layout.workers + options_.layout.servers));
    if (!gone.empty()) {
      evaluator_live_ = false;
      log_warn("ps server ", options_.server, ": lost the evaluator (", gone, ")");
    }
  }
  for (int w = 0; w < options_.layout.workers; ++w) {
    const Member m = members_[static_cast<size_t>(w)];
    if (m == Member::done || m == Member::gone) continue;
    if (may_lose) {
      const std::string gone = world_->transport().peer_gone(world_->global_rank(w));
      if (!gone.empty()) {
        lose(w, gone, true);
        continue;
      }
    }
    if (m == Member::lost) {
      // Lost by silence: it may still speak, until the job's deadline.
      const auto silent =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_[size_t(w)]);
      if (silent >= options_.worker_deadline) {
        lose(w,
             detail::concat("silent for ", silent.count() / 1000.0, " s, past the job's deadline (",
                            options_.worker_deadline.count() / 1000.0, " s; ",
                            comm::no_progress_from(world_->global_rank(w)), ")"),
             true);
        continue;
      }
      next = std::min(next, options_.worker_deadline - silent);
      continue;
    }
    // A worker waiting for its pull's answer (sync, ssp) is not silent: the server is.
    const bool waiting = std::any_of(waiting_.begin(), waiting_.end(),
                                     [&](const WaitingPull& p) { return p.worker == w; });
    if (options_.worker_timeout.count() == 0 || waiting) continue;
    const auto silent =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_[size_t(w)]);
    if (silent >= options_.worker_timeout) {
      const bool never_pushed = worker_pushes_[static_cast<size_t>(w)] == 0;
      lose(w,
           detail::concat("silent for ", silent.count() / 1000.0, " s (ps.worker_timeout_s is ",
                          options_.worker_timeout.count() / 1000.0, ")",
                          never_pushed ? ", before its first push: a timeout shorter than one "
                                         "step drops workers that are still computing"
                                       : "",
                          "; ", comm::no_progress_from(world_->global_rank(w))),
           false);
      continue;
    }
    next = std::min(next, options_.worker_timeout - silent);
  }
  return std::max(next, std::chrono::milliseconds(1));
}

void PsServer::lose(int worker, const std::string& why, bool gone) {
  const auto w = static_cast<size_t>(worker);
  const bool was_counted = members_[w] == Member::live;
  // Dead, it may be restarted: wait (bounded) for the launcher's word.
  if (options_.restarts && gone && (members_[w] == Member::live || members_[w] == Member::lost) &&
      !comebacks_[w])
    awaiting_word_[w] = Clock::now();
  members_[w] = gone ? Member::gone : Member::lost;
  why_lost_[w] = why;
  std::erase_if(waiting_, [&](const WaitingPull& p) { return p.worker == worker; });
  lost_log_.push_back(detail::concat("worker ", worker, ": ", why));
  const auto live = std::count(members_.begin(), members_.end(), Member::live);
  log_warn("ps server ", options_.server, ": ", was_counted ? "lost" : "gave up on", " worker ",
           worker, " (", why, "); going on with ", live, " live worker", live == 1 ? "" : "s");
  // Sync mode without a backup to cover it throws here, naming the worker and why.
  if (shard_ && was_counted) {
    try {
      shard_->lose_worker(worker);
    } catch (const Error& e) {
      BRAID_THROW(Error, e.what(), " (worker ", worker, ": ", why, ")");
    }
  }
  answer_waiting_pulls();  // ssp: the slowest worker may have been the lost one
}

// The evaluator reads the model (pulls answered at once), stops the run, and says done.
void PsServer::handle_evaluator(const PsRequest& r, int source) {
  switch (r.kind) {
    case PsRequestKind::pull:
      if (shard_) {
        answer(source);
      } else {
        waiting_.push_back({source, -1});
      }
      return;
    case PsRequestKind::stop:
      if (stop_at_ < 0 || r.step < stop_at_) {
        stop_at_ = r.step;
        stop_reason_ = PsStopReason::converged;
      }
      answer_waiting_pulls();
      return;
    case PsRequestKind::done:
    case PsRequestKind::fail:
      evaluator_live_ = false;
      return;
    default:
      BRAID_THROW(Error, "ps server ", options_.server, ": the evaluator (rank ", source,
                  ") sent a request of kind ", static_cast<uint32_t>(r.kind),
                  "; it only pulls, stops and finishes");
  }
}

void PsServer::handle(const PsRequest& r, int source) {
  if (options_.layout.is_evaluator(source) && r.worker == source)
    return handle_evaluator(r, source);
  BRAID_CHECK(options_.layout.is_worker(source) && r.worker == source, "ps server ",
              options_.server, ": a request from rank ", source, " claiming worker ", r.worker,
              "; only workers 0..", options_.layout.workers - 1,
              " and the evaluator send requests");
  const auto w = static_cast<size_t>(source);
  last_heard_[w] = Clock::now();
  if (r.kind == PsRequestKind::rejoin) return rejoin(source);
  // Gone for good (failed, died, or silent past the deadline): nothing it says counts.
  if (members_[w] == Member::gone) return;
  if (r.kind == PsRequestKind::fail) {
    lose(source, "its run failed (its own error is in its output)", true);
    return;
  }
  if (members_[w] == Member::lost && r.kind != PsRequestKind::done) {
    const bool steps = r.kind == PsRequestKind::pull || r.kind == PsRequestKind::push;
    if (silent_since_restart_[w]) {
      // This server restarted from a checkpoint older than the worker's last steps.
      log_info("ps server ", options_.server, ": worker ", source, " reached this restarted server",
               steps ? detail::concat(" at step ", r.step) : "", "; it counts again");
      silent_since_restart_[w] = false;
    } else {
      log_warn("ps server ", options_.server, ": worker ", source,
               " counted lost spoke again; it counts again");
    }
    if (shard_ && steps)
      shard_->readmit_worker(source, r.step);
    else if (shard_)
      shard_->readmit_worker(source);
    members_[w] = Member::live;
  }
  const size_t bytes = staging_.size() * sizeof(float);
  switch (r.kind) {
    case PsRequestKind::init:
      BRAID_CHECK(!shard_, "ps server ", options_.server, ": a second init, from worker ",
                  r.worker);
      world_->recv(source, kInitTag, staging_.data(), bytes);
      shard_.emplace(range_, options_.segments, staging_, options_.optimizer, options_.rules);
      if (options_.resume_from) {
        shard_->restore(*options_.resume_from);
        options_.resume_from.reset();
      }
      for (int lost = 0; lost < options_.layout.workers; ++lost)
        if (members_[static_cast<size_t>(lost)] == Member::lost) shard_->lose_worker(lost);
      answer_waiting_pulls();
      return;
    case PsRequestKind::push: {
      BRAID_CHECK(shard_, "ps server ", options_.server, ": a push from worker ", r.worker,
                  " before worker 0 sent the initial parameters");
      // Died or stopped halfway through its gradient: nothing is applied.
      if (push_decoder_) {
        if (!receive_from_worker(source, kPushTag, push_wire_.data(), push_wire_.size())) return;
        push_decoder_->decode(push_wire_.data(), range_.size(), staging_.data());
      } else if (!receive_from_worker(source, kPushTag, staging_.data(), bytes)) {
        return;
      }
      ++pushes_;
      {
        const double at = std::chrono::duration<double>(Clock::now() - started_).count();
        if (worker_pushes_[w]++ == 0) first_push_s_[w] = at;
        last_push_s_[w] = at;
      }
      // A step at or past the chief's stop was computed before the worker learnt of it.
      if (stop_at_ >= 0 && r.step >= stop_at_) return;
      shard_->push({.worker = r.worker,
                    .step = r.step,
                    .based_on = r.based_on,
                    .lr = r.lr,
                    .weight = r.weight},
                   staging_);
      answer_waiting_pulls();
      return;
    }
    case PsRequestKind::pull:
      ++pulls_;
      // Another worker's first pull may overtake worker 0's init: it waits for it.
      if (shard_ && may_answer(r.step)) {
        answer(r.worker);
      } else {
        waiting_.push_back({r.worker, r.step});
      }
      return;
    case PsRequestKind::stop:
      if (stop_at_ < 0 || r.step < stop_at_) {
        stop_at_ = r.step;
        stop_reason_ = PsStopReason::converged;
      }
      answer_waiting_pulls();
      return;
    case PsRequestKind::save: {
      BRAID_CHECK(r.step > 0 && r.step < 4096, "ps server ", options_.server,
                  ": a save request with a path of ", r.step, " bytes");
      std::string dir(static_cast<size_t>(r.step), '\0');
      world_->recv(source, kSaveTag, dir.data(), dir.size());
      BRAID_CHECK(shard_ && options_.save, "ps server ", options_.server,
                  ": asked to save before it holds parameters, or with nowhere to save");
      options_.save(dir, shard_->snapshot());
      const int64_t version = shard_->version();
      world_->send(source, kSavedTag, &version, sizeof version);
      return;
    }
    case PsRequestKind::done:
      members_[w] = Member::done;
      if (shard_) finish_worker(source);
      answer_waiting_pulls();
      return;
    case PsRequestKind::fail:
    case PsRequestKind::rejoin:
      return;  // handled above
  }
  BRAID_THROW(Error, "ps server ", options_.server, ": worker ", r.worker,
              " sent a request of unknown kind ", static_cast<uint32_t>(r.kind));
}

bool PsServer::receive_from_worker(int worker, uint32_t tag, void* data, size_t bytes) {
  const comm::RequestId id = world_->irecv(worker, tag, data, bytes);
  const std::chrono::milliseconds limit = silence_limit();
  const BlockedOn blocked(*this, worker);
  try {
    if (limit.count() > 0)
      world_->wait(std::span<const comm::RequestId>(&id, 1), comm::Deadline::after(limit));
    else
      world_->wait(std::span<const comm::RequestId>(&id, 1));
    return true;
  } catch (const TimeoutError&) {
    lose(worker,
         detail::concat("stopped sending within ", limit.count() / 1000.0, " s (",
                        comm::no_progress_from(world_->global_rank(worker)), ")"),
         true);
  } catch (const comm::PeerError& e) {
    lose(worker, e.what(), true);
  }
  return false;
}

// A message under way takes milliseconds; one stuck for half the job's deadline (or the
// silence timeout, if longer) means the worker stopped. Never shorter than that, so a
// silence timeout set too short does not cut transfers.
PsServer::BlockedOn::BlockedOn(PsServer& server, int worker)
    : server_(server), worker_(worker), since_(Clock::now()) {}

// The others could not be heard while the server waited on one worker: that time is not
// their silence.
PsServer::BlockedOn::~BlockedOn() {
  const Clock::duration blocked = Clock::now() - since_;
  for (size_t w = 0; w < server_.last_heard_.size(); ++w)
    if (static_cast<int>(w) != worker_) server_.last_heard_[w] += blocked;
}

std::chrono::milliseconds PsServer::silence_limit() const {
  return std::max(options_.worker_timeout, options_.worker_deadline / 2);
}

// A worker that finished early (fewer steps, or stopped by a signal before the others) no
// longer holds SSP back. In sync mode without a backup to cover it, no step past its last
// can complete: that step becomes a stop, so the others end there too instead of waiting.
void PsServer::finish_worker(int worker) {
  const PsRules& rules = shard_->rules();
  const int live_after = shard_->live_workers() - 1;
  if (rules.mode != PsMode::sync || live_after >= rules.workers - rules.backup_workers) {
    shard_->lose_worker(worker);
    return;
  }
  const int64_t last = shard_->clock(worker);
  if (stop_at_ < 0 || last < stop_at_) {
    stop_at_ = last;
    stop_reason_ = PsStopReason::worker_left;
    stop_worker_ = worker;
  }
}

bool PsServer::may_answer(int64_t step) const {
  return (stop_at_ >= 0 && step >= stop_at_) || shard_->may_pull(step);
}

// The reply header, then the parameters; both sends complete before the next push changes
// them. A worker that died meanwhile is lost, not fatal.
void PsServer::answer(int worker) {
  // Its silence counts from now: it waited on the server until this answer.
  if (options_.layout.is_worker(worker)) last_heard_[static_cast<size_t>(worker)] = Clock::now();
  const PsPullReply reply{
      .version = shard_->version(),
      .stop_at = stop_at_,
      .live_workers = std::count(members_.begin(), members_.end(), Member::live),
      .stop_reason = stop_at_ >= 0 ? stop_reason_ : PsStopReason::none,
      .stop_worker = stop_worker_};
  const std::span<const float> params = shard_->params();
  const comm::RequestId ids[2] = {
      world_->isend(worker, kVersionTag, &reply, sizeof reply),
      world_->isend(worker, kParamsTag, params.data(), params.size() * sizeof(float))};
  // A worker that stopped mid-answer (its ring full) must not stall the server past its
  // silence timeout: it is given up on, and the others are served.
  const std::chrono::milliseconds limit = silence_limit();
  const BlockedOn blocked(*this, worker);
  try {
    if (limit.count() > 0 && options_.layout.is_worker(worker))
      world_->wait(ids, comm::Deadline::after(limit));
    else
      world_->wait(ids);
  } catch (const TimeoutError& e) {
    if (!options_.layout.is_worker(worker)) throw;
    lose(worker,
         detail::concat("did not take its pull's answer within ", limit.count() / 1000.0, " s (",
                        comm::no_progress_from(world_->global_rank(worker)), ")"),
         true);
  } catch (const comm::PeerError& e) {
    if (options_.layout.is_evaluator(worker)) {
      evaluator_live_ = false;
      log_warn("ps server ", options_.server, ": lost the evaluator (", e.what(), ")");
      return;
    }
    lose(worker, e.what(), true);
  }
}

void PsServer::answer_waiting_pulls() {
  if (!shard_) return;
  // answer() may lose a worker, which edits the queue: take the ready ones out first.
  std::vector<int> ready;
  std::erase_if(waiting_, [&](const WaitingPull& w) {
    if (!may_answer(w.step)) return false;
    ready.push_back(w.worker);
    return true;
  });
  for (const int worker : ready)
    if (options_.layout.is_evaluator(worker)
            ? evaluator_live_
            : members_[static_cast<size_t>(worker)] == Member::live)
      answer(worker);
}

PsServerStats PsServer::stats() const {
  PsServerStats s;
  s.pushes = pushes_;
  s.pulls = pulls_;
  s.lost = lost_log_;
  s.worker_pushes = worker_pushes_;
  s.first_push_s = first_push_s_;
  s.last_push_s = last_push_s_;
  s.rejoins = rejoins_;
  if (!shard_) return s;
  s.version = shard_->version();
  s.dropped = shard_->dropped();
  s.staleness_histogram = shard_->staleness_histogram();
  return s;
}

}  // namespace braid::parallel
