// A parameter server: serves one key range of the model to the job's workers, running the
// range's optimizer on the gradients they push under the consistency rule of ps_shard.h,
// until every worker is done. Speaks ps_protocol.h over the world group.
//
// One thread (the caller of run()) drives the group. Pulls that the rule does not allow
// yet (sync: the step's update is not applied; ssp: the worker is too far ahead; any: the
// initial parameters have not arrived) wait in a queue and are answered after the push that allows
// them. Each answer's sends complete before the next push changes the parameters, so a worker never
// reads a half-updated range. A worker that dies fails the server at the group's deadline (a named
// error), in every mode for now.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "comm/group.h"
#include "parallel/ps_protocol.h"
#include "parallel/ps_shard.h"

namespace braid::parallel {

struct PsServerOptions {
  PsLayout layout;
  int server = 0;  // this server's index, in [0, layout.servers)
  // The model's tensors (optimizer segments, in offset order) and its flat size: every
  // server cuts the same key ranges from them (key_ranges.h).
  std::vector<optim::Segment> segments;
  int64_t buffer_size = 0;
  optim::OptimizerConfig optimizer;
  PsRules rules;
};

class PsServer {
 public:
  PsServer(std::shared_ptr<comm::Group> world, PsServerOptions options);

  // Serves until every worker sent done. Throws what the group throws (a dead worker: a
  // PeerError or TimeoutError naming it), or braid::Error for a request out of protocol.
  void run();

  const KeyRange& range() const { return range_; }
  // Valid once a worker's init arrived (after run() returned, always).
  const PsShard& shard() const { return *shard_; }

 private:
  void handle(const PsRequest& r, int source);
  void answer(int worker);
  void answer_waiting_pulls();

  std::shared_ptr<comm::Group> world_;
  PsServerOptions options_;
  KeyRange range_;
  std::vector<float> staging_;  // a push's gradient, or the initial values
  std::optional<PsShard> shard_;
  struct WaitingPull {
    int worker;
    int64_t step;
  };
  std::deque<WaitingPull> waiting_;
  int done_ = 0;
};

}  // namespace braid::parallel
