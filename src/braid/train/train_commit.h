// A commit: a trainer's whole state in memory, taken at a step boundary (Trainer::commit)
// and put back (Trainer::restore), on this rank or, through bytes(), on another. Elastic
// training keeps one per rank, taken every elastic.commit_every steps, and rolls back to it
// when a rank is lost; a newcomer receives the newest one from a live rank.
//
// It holds what a checkpoint holds (checkpoint.h), less what every rank of a job already
// agrees on (the config, the kernel choices): the model's state_dict tensors, the
// optimizer's state in the full logical layout, the weight average, and the position
// (step, epoch, loader, stop rules, loss scaler) as JSON. Tensors are stored as raw bytes
// in state_dict order; the receiving trainer supplies names, shapes and dtypes, which the
// commit checks by total size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/state_shard.h"

namespace braid::train {

struct TrainCommit {
  int64_t step = -1;               // -1: empty
  std::string position;            // JSON: step, epoch, loader, stop rules, ...
  std::vector<uint8_t> model;      // state_dict tensors, back to back
  std::vector<uint8_t> optimizer;  // optimizer state tensors, back to back
  std::vector<uint8_t> average;    // the weight average's tensors (empty without one)
  // A commit of a transactional strategy (Strategy::make_transactional) copies only the
  // model's buffers (batch norm's running statistics, which forward changes) and leaves the
  // parameters and optimizer state in the trainer, whose steps change them only once they
  // succeeded: `live`. Trainer::seal_commit copies them before the trainer goes.
  bool live = false;
  std::vector<uint8_t> buffers;

  // A strategy that shards its state (ZeRO: Strategy::shards_state) commits shards instead
  // of the whole state: this rank's and its left neighbour's (passed on at the commit), of
  // the newest two commits, since a rank lost during a commit leaves some ranks with the
  // new one and some with the one before. The next round puts a whole state together from
  // the newest commit every shard of which a member holds (train/shard_recovery.h).
  // `round`: the elastic round this commit's trainer runs in (set by its caller).
  int64_t round = 0;
  parallel::StateShard mine[2], left[2];

  bool empty() const { return step < 0; }
  bool sharded() const { return !mine[0].empty() || !mine[1].empty(); }
  // One buffer holding everything (to send to another rank), and back. Sealed only.
  std::vector<uint8_t> bytes() const;
  static TrainCommit from_bytes(const std::vector<uint8_t>& bytes);
};

}  // namespace braid::train
