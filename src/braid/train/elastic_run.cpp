#include "train/elastic_run.h"

#include <cstring>
#include <filesystem>

#include "comm/collectives.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/strategy.h"
#include "train/config_agreement.h"
#include "train/data_setup.h"
#include "train/model_spec.h"
#include "train/shard_recovery.h"
#include "train/stop_signal.h"
#include "train/strategy_setup.h"

namespace braid::train {
namespace {

bool is_model_parallel(const std::string& strategy) {
  return strategy == "pipeline" || strategy == "tensor" || strategy == "mesh";
}

// Rounds in a row that may fail before a single step completes: past it the failure is
// not a lost member but something every round meets (a disk that is full, a bug).
constexpr int kMaxFruitlessRounds = 5;
// How often rank 0 looks in the store for a newcomer asking for a place.
constexpr double kPendingPollSeconds = 0.05;

// The source's commit on every member of the round: its size, then its bytes.
TrainCommit share_commit(comm::Group& group, int source, const TrainCommit& mine) {
  std::vector<uint8_t> bytes;
  if (group.rank() == source) bytes = mine.bytes();
  int64_t size = static_cast<int64_t>(bytes.size());
  comm::broadcast(group, &size, 1, DType::i64, source);
  // Sent as 8-byte words: a broadcast moves elements of a dtype, and bytes are any.
  const size_t words = (static_cast<size_t>(size) + 7) / 8;
  bytes.resize(words * 8);
  comm::broadcast(group, bytes.data(), words, DType::i64, source);
  bytes.resize(static_cast<size_t>(size));
  return TrainCommit::from_bytes(bytes);
}

std::string members_text(const comm::Round& r) {
  std::string s;
  for (const auto& m : r.members) s += (s.empty() ? "" : " ") + m;
  return s;
}

}  // namespace

TrainConfig round_config(const TrainConfig& config, int launch_world, int world) {
  TrainConfig c = config;
  if (is_model_parallel(c.strategy)) {
    // A mesh is cut for its size: every round has the launch's ranks (restarts fill in).
    BRAID_CHECK(world == launch_world, "elastic: strategy ", c.strategy, " needs all ",
                launch_world, " ranks in every round, but this one has ", world,
                "; launch with --min-ranks ", launch_world,
                " and --max-restarts K, so lost ranks are restarted and waited for");
    return c;
  }
  if (config.elastic.scale_lr) {
    // Steps of the round's own size, read by sample (a step grid shifted where the epoch
    // was begun at another size), and an lr to match (round_lr_scale).
    c.global_batch = config.batch * world;
    return c;
  }
  // The job's global batch: as set, else the launch's ranks x batch. Each round's ranks
  // share it (data/sampler.h, step blocks), evenly or not.
  if (c.global_batch == 0) c.global_batch = config.batch * launch_world;
  BRAID_CHECK(c.global_batch >= world, "elastic: the job's global batch ", c.global_batch,
              " cannot give each of ", world, " ranks a sample; raise global_batch or --max-ranks");
  return c;
}

double round_lr_scale(const TrainConfig& config, int launch_world, int world) {
  BRAID_CHECK(launch_world >= 1 && world >= 1, "elastic: worlds of ", launch_world, " and ", world,
              " ranks");
  if (!config.elastic.scale_lr) return 1;
  return static_cast<double>(world) / static_cast<double>(launch_world);
}

RunOutcome run_elastic(const TrainConfig& config, const ElasticSetup& setup) {
  BRAID_CHECK(setup.store && setup.connect, "run_elastic: no store or connect");
  BRAID_CHECK(config.zero_stage == 0 || config.ema_decay == 0,
              "elastic ZeRO jobs keep no weight average yet (ema_decay ", config.ema_decay,
              "): drop ema_decay, or zero_stage");
  const std::string& asked = config.strategy;
  const bool local_sgd = asked == "local_sgd";
  const bool model_parallel =
      is_model_parallel(asked) || (asked == "auto" && mesh_shape(config, setup.launch_world));
  BRAID_CHECK(local_sgd || model_parallel || asked == "auto" || asked == "ddp" || asked == "single",
              "elastic jobs train with strategy ddp (zero_stage 0-3), local_sgd, pipeline, "
              "tensor or mesh (this config has ",
              asked, "): parameter servers and federated averaging keep their own membership");
  TrainConfig base = config;
  base.strategy = local_sgd        ? "local_sgd"
                  : model_parallel ? (asked == "auto" ? "mesh" : asked)
                                   : "ddp";
  if (config.elastic.scale_lr && config.global_batch > 0 &&
      config.global_batch != config.batch * setup.launch_world)
    log_warn("elastic.scale_lr: each rank keeps its batch of ", config.batch, ", so global_batch ",
             config.global_batch, " is not used (the launch's global batch is ",
             config.batch * setup.launch_world, ")");
  if (config.elastic.scale_lr && config.schedule.name == "cosine" && config.max_steps == 0)
    log_warn(
        "elastic.scale_lr with a cosine schedule over epochs: a round of another world "
        "takes another number of steps per epoch, so the horizon moves with it (the lr "
        "jumps at the change); set max_steps to keep one horizon");
  // A process of another config is refused here, alone, before it asks for a place.
  check_config_of_job(*setup.store, base);
  TrainCommit commit;  // this process's newest
  int64_t ask = 0;     // the round to ask for (0: the next to close)
  int fruitless = 0;
  int64_t reached = -1;  // the last step this process completed
  // The data is read once, before the first round: a newcomer that read it after getting a
  // place would hold up the round's every member while it reads.
  DataCache data;
  {
    const BuiltModel model = build_model(base.model, base.seq_len);
    make_loaders(base, model, DataPlacement{.cache = &data});
  }
  bool first_trainer = true;
  int previous_world = 0;
  std::string reason = "started";  // why the next round forms
  while (true) {
    const comm::Round round = comm::join_round(
        *setup.store, setup.member, ask, commit.empty() ? comm::kNoCommit : commit.step,
        comm::Deadline::after(setup.timeout), [] { return stop_requested() != 0; });
    if (round.finished) {
      log_info("elastic: the job finished before ", setup.member, " got a place; nothing to do");
      RunOutcome out;
      out.step = commit.step;
      return out;
    }
    set_log_rank(round.rank);
    Stopwatch since_round;
    const int64_t reached_before = reached;
    try {
      std::shared_ptr<comm::Group> group = setup.connect(round);
      const double connected = since_round.elapsed();
      const TrainConfig cfg = round_config(base, setup.launch_world, round.world());
      check_same_config(*group, cfg);
      Trainer trainer(cfg, group, true, &data);
      const double lr_scale = round_lr_scale(base, setup.launch_world, round.world());
      if (lr_scale != 1) trainer.set_lr_scale(lr_scale);
      // DDP's steps change nothing until they succeeded: a commit then copies almost nothing.
      trainer.make_transactional();
      // Model parallelism gathers a commit to rank 0; rank 1 keeps a copy.
      trainer.strategy().keep_gathered_copy(true);
      const double built = since_round.elapsed();
      bool has_state = false;
      TrainCommit shared;
      if (trainer.strategy().shards_state()) {
        // ZeRO: the members put a whole commit together on rank 0 from their shards.
        has_state = gather_shards(*group, commit, trainer.params(),
                                  trainer.strategy().optimizer_state_layout(), shared);
        if (has_state) shared = share_commit(*group, 0, shared);
      } else if (round.source_step != comm::kNoCommit) {
        has_state = true;
        shared = share_commit(*group, round.source, commit);
      }
      const double shared_at = since_round.elapsed();
      commit.round = round.number;
      if (has_state) {
        trainer.restore(shared);
      } else if (round.number > 1 && std::filesystem::exists(std::filesystem::path(base.out) /
                                                             "checkpoint" / "state.json")) {
        // Every member that held the state is gone: the run's last checkpoint is what is left.
        if (trainer.strategy().shards_state())
          log_warn("elastic: the members of round ", round.number,
                   " hold no whole commit (the ranks lost held every copy of a shard: "
                   "neighbours lost together); resuming from the run's checkpoint in ",
                   base.out);
        else
          log_warn("elastic: no member of round ", round.number,
                   " holds the training state; resuming from the run's checkpoint in ", base.out);
        trainer.load_checkpoint(base.out);
      } else if (!setup.resume_dir.empty()) {
        trainer.load_checkpoint(setup.resume_dir);
      } else if (round.number > 1 && reached >= 0) {
        // Steps were trained, but their state is gone with the lost members and nothing was
        // saved yet: say so rather than go on from step 0 quietly.
        log_warn("elastic: no member of round ", round.number,
                 " holds the training state and the run has no checkpoint yet; training again "
                 "from step 0");
      }
      if (round.number > 1) {
        MembershipChanged change;
        change.generation = round.number;
        change.previous_world = previous_world;
        change.world = round.world();
        change.reason = reason;
        change.resumed_from_step = trainer.global_step();
        change.ready_seconds = since_round.elapsed();
        change.global_batch = cfg.global_batch;
        change.lr_scale = lr_scale;
        trainer.note_membership(change);
        log_info("elastic: round ", round.number, ": ", round.world(), " ranks (",
                 members_text(round), ") at step ", trainer.global_step(),
                 cfg.global_batch > 0 ? detail::concat(", global batch ", cfg.global_batch) : "",
                 base.elastic.scale_lr ? detail::concat(", lr x ", lr_scale) : std::string(),
                 "; ready in ", since_round.elapsed(), " s (connect ", connected, ", build ",
                 built - connected, ", state ", shared_at - built, ")");
      }
      if (round.number == 1 && first_trainer && setup.on_first_trainer)
        setup.on_first_trainer(trainer);
      first_trainer = false;
      if (setup.on_every_trainer) setup.on_every_trainer(trainer);
      Stopwatch last_poll;
      const int64_t every = std::max<int64_t>(1, config.elastic.commit_every);
      int64_t committed_at = trainer.global_step();
      trainer.set_step_boundary([&](int64_t step) {
        reached = step;
        // Every `every` steps, at the first step after which every rank holds the same model
        // (local SGD: its next average).
        if (step - committed_at >= every && trainer.strategy().replicas_agree(step)) {
          trainer.commit(commit);
          committed_at = step;
        }
        // Only rank 0 looks (the vote carries it to all), and not at every step.
        if (trainer.rank() != 0 || last_poll.elapsed() < kPendingPollSeconds) return false;
        last_poll.lap();
        return comm::pending_round(*setup.store) > round.number;
      });
      previous_world = round.world();
      RunOutcome out;
      try {
        out = trainer.run();
      } catch (const IoError&) {
        trainer.seal_commit(commit);  // while the trainer still holds the live state
        throw;
      } catch (const TimeoutError&) {
        trainer.seal_commit(commit);
        throw;
      }
      if (out.regroup && out.leaving) {
        comm::leave_round(*setup.store, setup.member, round.number + 1);
        log_warn("elastic: ", setup.member, " leaves the job at step ", out.step,
                 ": it was asked to stop, the others were not and go on without it");
        out.regroup = false;
        return out;
      }
      if (out.regroup) {
        reason = "a member left or a newcomer asked for a place";
        trainer.commit(commit);
        trainer.seal_commit(commit);
        ask = round.number + 1;
        fruitless = 0;
        continue;
      }
      if (trainer.rank() == 0) comm::mark_finished(*setup.store, out.step);
      return out;
    } catch (const IoError& e) {
      reason = std::string("a member was lost: ") + e.what();
    } catch (const TimeoutError& e) {
      reason = std::string("a member stopped making progress: ") + e.what();
    }
    log_warn("elastic: round ", round.number, ": ", reason,
             !commit.empty() ? detail::concat("; rolling back to step ", commit.step)
             : model_parallel && reached >= 0
                 ? std::string("; rolling back to the last commit ranks 0 and 1 hold")
                 : std::string("; starting over"));
    fruitless = reached == reached_before ? fruitless + 1 : 0;
    BRAID_CHECK(fruitless < kMaxFruitlessRounds, "elastic: ", fruitless,
                " rounds in a row failed before a step completed (last at step ", reached,
                "); giving up: the failure is not a lost member");
    ask = round.number + 1;
  }
}

}  // namespace braid::train
