#include "parallel/ps_server.h"

#include "core/error.h"

namespace braid::parallel {

PsServer::PsServer(std::shared_ptr<comm::Group> world, PsServerOptions options)
    : world_(std::move(world)), options_(std::move(options)) {
  BRAID_CHECK(world_, "ps server: needs the job's world group");
  const PsLayout& l = options_.layout;
  BRAID_CHECK(world_->size() == l.workers + l.servers, "ps server: a job of ", l.workers,
              " workers and ", l.servers, " servers has ", l.workers + l.servers,
              " ranks, but the group has ", world_->size());
  BRAID_CHECK(options_.server >= 0 && options_.server < l.servers, "ps server: index ",
              options_.server, " of ", l.servers, " servers");
  validate(options_.rules);
  // The workers split off a group of their own; a server takes part and keeps nothing.
  world_->split(1, world_->rank());
  range_ = split_key_ranges(options_.segments, options_.buffer_size,
                            l.servers)[static_cast<size_t>(options_.server)];
  staging_.assign(static_cast<size_t>(range_.size()), 0.0f);
}

void PsServer::run() {
  PsRequest request;
  int source = -1;
  while (done_ < options_.layout.workers) {
    world_->wait(world_->irecv_any(kRequestTag, &request, sizeof request, &source));
    handle(request, source);
  }
  BRAID_CHECK(waiting_.empty(), "ps server ", options_.server, ": ", waiting_.size(),
              " pulls left unanswered when every worker was done");
}

void PsServer::handle(const PsRequest& r, int source) {
  BRAID_CHECK(options_.layout.is_worker(source) && r.worker == source, "ps server ",
              options_.server, ": a request from rank ", source, " claiming worker ", r.worker,
              "; only workers 0..", options_.layout.workers - 1, " send requests");
  const size_t bytes = staging_.size() * sizeof(float);
  switch (r.kind) {
    case PsRequestKind::init:
      BRAID_CHECK(!shard_, "ps server ", options_.server, ": a second init, from worker ",
                  r.worker);
      world_->recv(source, kInitTag, staging_.data(), bytes);
      shard_.emplace(range_, options_.segments, staging_, options_.optimizer, options_.rules);
      answer_waiting_pulls();
      return;
    case PsRequestKind::push: {
      BRAID_CHECK(shard_, "ps server ", options_.server, ": a push from worker ", r.worker,
                  " before worker 0 sent the initial parameters");
      world_->recv(source, kPushTag, staging_.data(), bytes);
      shard_->push({.worker = r.worker, .step = r.step, .based_on = r.based_on, .lr = r.lr},
                   staging_);
      answer_waiting_pulls();
      return;
    }
    case PsRequestKind::pull:
      // Another worker's first pull may overtake worker 0's init: it waits for it.
      if (shard_ && shard_->may_pull(r.step)) {
        answer(r.worker);
      } else {
        waiting_.push_back({r.worker, r.step});
      }
      return;
    case PsRequestKind::done:
      ++done_;
      return;
  }
  BRAID_THROW(Error, "ps server ", options_.server, ": worker ", r.worker,
              " sent a request of unknown kind ", static_cast<uint32_t>(r.kind));
}

// The version, then the parameters; both sends complete before the next push changes them.
void PsServer::answer(int worker) {
  const int64_t version = shard_->version();
  const std::span<const float> params = shard_->params();
  const comm::RequestId ids[2] = {
      world_->isend(worker, kVersionTag, &version, sizeof version),
      world_->isend(worker, kParamsTag, params.data(), params.size() * sizeof(float))};
  world_->wait(ids);
}

void PsServer::answer_waiting_pulls() {
  if (!shard_) return;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (shard_->may_pull(it->step)) {
      answer(it->worker);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace braid::parallel
