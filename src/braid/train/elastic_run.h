// Elastic training: one rank's run in a job whose members come and go (braid launch
// --min-ranks M --max-restarts K). The run goes round by round (comm/membership.h):
//
//   1. ask for a place in the next round and wait until it closes;
//   2. connect that round's world, and take the training state from the round's source
//      (the member holding the newest commit) with one broadcast: a newcomer gets it from a
//      live rank, never from disk, and survivors that committed different steps agree;
//   3. build a Trainer for the round's world (the global batch stays the launch's: each
//      rank's share changes; or, with elastic.scale_lr, each rank keeps its batch and the
//      learning rate follows the world) and run it, committing the state in memory every
//      elastic.commit_every steps at a step boundary;
//   4. when a collective fails (a member died, its link was cut, it stopped making
//      progress), tear the round down, which makes every other member's collective fail at
//      once too (a closed transport is seen as gone), and go to 1 with the last commit: the
//      steps since it are redone. When a newcomer asks for a place, the members agree
//      through the stop vote to end the run at one step boundary and go to 1 with a commit
//      of that very step.
//
// The job ends when a round's run ends (done, converged, stopped by a signal): its rank 0
// marks the job finished in the store, so a process still asking for a place is told to
// leave. A non-communication error (bad data, divergence) ends this rank's run as usual.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm/group.h"
#include "comm/membership.h"
#include "comm/store.h"
#include "train/config.h"
#include "train/trainer.h"

namespace braid::train {

struct ElasticSetup {
  comm::Store* store = nullptr;  // the job's (prefixed) store, where rounds meet
  std::string member;            // this process's id in the rounds
  // This round's world group (transport keyed by the round's number).
  std::function<std::shared_ptr<comm::Group>(const comm::Round&)> connect;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // one round's rendezvous
  int launch_world = 1;    // the ranks the job was launched with: its global batch's ranks
  std::string resume_dir;  // round 1 starts from this checkpoint when set
  // On the trainers of round 1, the launch's own (outputs to set up on rank 0); a restarted
  // process or a newcomer never calls it.
  std::function<void(Trainer&)> on_first_trainer;
  // On every round's trainer, this process's (an event stream's observer, kept across rounds).
  std::function<void(Trainer&)> on_every_trainer;
};

// The config of a round of `world` ranks: each rank's batch is its share of the job's
// global batch (global_batch, else config.batch x launch_world), even or not. With
// elastic.scale_lr each rank keeps config.batch instead: the round's global batch is
// config.batch x world, and its loaders continue the epoch at the next sample not taken
// (data/loader.h, state_at_sample).
TrainConfig round_config(const TrainConfig& config, int launch_world, int world);
// The factor on the learning-rate schedule of a round of `world` ranks
// (Trainer::set_lr_scale): world / launch_world with elastic.scale_lr, the linear scaling
// rule (Goyal et al. 2017, "Accurate, Large Minibatch SGD") for its global batch; else 1.
double round_lr_scale(const TrainConfig& config, int launch_world, int world);

// Runs until the job ends (see above); the outcome is the last round's. Throws what a
// non-communication failure throws, and Error when the job cannot continue (too few
// members left, or no step completes after several rounds).
RunOutcome run_elastic(const TrainConfig& config, const ElasticSetup& setup);

}  // namespace braid::train
