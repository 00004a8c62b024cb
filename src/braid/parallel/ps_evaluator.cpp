#include "parallel/ps_evaluator.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "parallel/ps_pull.h"

namespace braid::parallel {

PsEvaluator::PsEvaluator(std::unique_ptr<nn::Module> module, StepOptions options,
                         std::shared_ptr<comm::Group> world, PsLayout layout)
    : Strategy(std::move(module), std::move(options)), world_(std::move(world)), layout_(layout) {
  BRAID_CHECK(world_ && world_->size() == layout_.size() && layout_.is_evaluator(world_->rank()),
              "ps evaluator: runs on the last rank of a parameter-server job with an evaluator");
  build();
  world_->split(-1, world_->rank());  // collective: the workers split off their own group
  ranges_ = split_key_ranges(optimizer_->segments(), params_.size(), layout_.servers);
  replies_.assign(ranges_.size(), PsPullReply{});
}

PsEvaluator::~PsEvaluator() {
  try {
    finish();
  } catch (const std::exception& e) {
    log_warn("ps evaluator: could not tell the servers it is done: ", e.what());
  }
}

double PsEvaluator::step(const data::Batch&, float, int64_t) {
  BRAID_THROW(Error, "ps evaluator: the evaluator evaluates; it takes no training steps");
}

void PsEvaluator::request(int server, PsRequestKind kind, int64_t step) {
  const PsRequest r{.kind = kind, .worker = world_->rank(), .step = step};
  world_->send(layout_.server_rank(server), kRequestTag, &r, sizeof r);
}

void PsEvaluator::synchronize() {
  const std::vector<comm::RequestId> ids =
      post_pull_receives(*world_, layout_, ranges_, replies_, params_.params());
  for (int s = 0; s < layout_.servers; ++s) request(s, PsRequestKind::pull, -1);
  world_->wait(ids);
  version_ = std::numeric_limits<int64_t>::max();
  live_workers_ = 0;
  for (const PsPullReply& r : replies_) {
    version_ = std::min(version_, r.version);
    live_workers_ = std::max(live_workers_, r.live_workers);
    if (r.stop_at >= 0) stop_at_ = r.stop_at;
  }
}

void PsEvaluator::announce_stop(int64_t step) {
  (void)step;  // the workers' steps are theirs: every worker stops at its next boundary
  stop_at_ = 0;
  for (int s = 0; s < layout_.servers; ++s) request(s, PsRequestKind::stop, 0);
}

void PsEvaluator::finish() {
  if (finished_) return;
  finished_ = true;
  for (int s = 0; s < layout_.servers; ++s) request(s, PsRequestKind::done, 0);
}

}  // namespace braid::parallel
