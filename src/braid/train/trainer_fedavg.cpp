// Trainer::run_federated: federated averaging (McMahan et al. 2017) on a worker of a
// parameter-server job. The training set is split over fedavg.clients clients
// (data/client_split.h, seeded: every process computes the same split). Each round r,
// every worker draws the same fraction C of the clients (fedavg_round.h), trains its share
// of them from the global model (fedavg_client.h: E local epochs at the config's batch and
// learning rate, FedProx's mu), and pushes the sum of their weighted model changes with
// their sample count; the servers apply the weighted mean through the server optimizer
// once every live worker pushed (ps_shard.h), and the next pull reads the new model. A
// worker that dies leaves its clients of that round out; the others go on.
//
// Rounds stand in for steps: metrics, evaluation (eval_every rounds, 0: every round, on the
// chief), stop rules, checkpoints (checkpoint_every rounds, 0: at the end) and stop
// signals work per round. rounds = 0 runs as many rounds as make `epochs` passes over the
// training set: ceil(epochs / (C' x E)), C' the share of clients a round draws.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "comm/group.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/client_split.h"
#include "data/loader.h"
#include "optim/schedule.h"
#include "parallel/fedavg_client.h"
#include "parallel/fedavg_round.h"
#include "parallel/ps_worker.h"
#include "train/metrics.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

// The labels of every sample of `source`, read through fill() a slice at a time.
std::vector<int32_t> labels_of(const data::Source& source) {
  constexpr int64_t kSlice = 1024;
  std::vector<int32_t> labels(static_cast<size_t>(source.size()));
  Tensor inputs = Tensor::empty(data::batch_shape(kSlice, source.input_shape()),
                                source.input_dtype(), MemCategory::data);
  Tensor targets = Tensor::empty(data::batch_shape(kSlice, source.target_shape()), DType::i32,
                                 MemCategory::data);
  std::vector<data::SampleRef> refs;
  for (int64_t begin = 0; begin < source.size(); begin += kSlice) {
    const int64_t n = std::min(kSlice, source.size() - begin);
    refs.clear();
    for (int64_t i = 0; i < n; ++i) refs.push_back({begin + i, begin + i});
    Tensor in = inputs.slice_rows(0, n), out = targets.slice_rows(0, n);
    source.fill(refs, data::FillContext{}, in, out);
    std::copy_n(out.data<int32_t>(), n, labels.begin() + begin);
  }
  return labels;
}

}  // namespace

RunOutcome Trainer::run_federated(int64_t stop_at_round) {
  auto* ps = dynamic_cast<parallel::PsWorker*>(strategy_.get());
  BRAID_CHECK(ps, "strategy fedavg runs on a parameter-server worker");
  BRAID_CHECK(model_.task == Task::classification,
              "strategy fedavg splits labelled data over its clients: use a classification "
              "dataset (fashion-mnist, npy)");
  const TrainConfig::FedAvg& f = config_.fedavg;
  const bool writer = writes_outputs();
  if (writer) std::filesystem::create_directories(config_.out);
  MetricsLog metrics = writer ? MetricsLog(config_.out + "/metrics.jsonl") : MetricsLog();
  Progress progress(writer);

  const std::shared_ptr<const data::Source>& source = train_loader_->shared_source();
  BRAID_CHECK(f.clients <= source->size(), "fedavg.clients is ", f.clients,
              " but the training set "
              "holds ",
              source->size(), " samples; every client needs one");
  const std::vector<int32_t> labels = labels_of(*source);
  data::ClientSplitSpec spec;
  spec.kind = data::parse_client_split_kind(f.split);
  spec.alpha = f.alpha;
  spec.labels_per_client = static_cast<int>(f.labels_per_client);
  spec.seed = config_.seed;
  const auto clients = static_cast<int>(f.clients);
  const std::vector<std::vector<int64_t>> split =
      data::split_clients(labels, model_.num_classes, clients, spec);
  std::vector<int64_t> sizes;
  for (const auto& c : split) sizes.push_back(static_cast<int64_t>(c.size()));
  const int per_round = parallel::clients_per_round(clients, f.fraction);
  const int64_t rounds =
      f.rounds > 0 ? f.rounds
                   : static_cast<int64_t>(std::ceil(
                         static_cast<double>(config_.epochs) * clients /
                         (static_cast<double>(per_round) * static_cast<double>(f.local_epochs))));
  schedule_ = make_schedule(rounds);

  parallel::FedAvgClient client(
      *ps, source,
      parallel::FedAvgClientOptions{.batch = config_.batch,
                                    .local_epochs = f.local_epochs,
                                    .prox_mu = static_cast<float>(f.prox_mu),
                                    .augment = train_loader_->options().augment});
  if (client.buffer_floats() > 0 && writer)
    log_warn(
        "fedavg: the model's running statistics (batch norm) are not averaged; the "
        "chief's own are saved and evaluated");
  log_info("fedavg: ", clients, " clients (", f.split, "), ", per_round, " a round over ", world_,
           " workers, ", f.local_epochs, " local epochs at batch ", config_.batch, "; ", rounds,
           " rounds; server optimizer ", f.server_optimizer);

  Stopwatch run_watch;
  const std::string checkpoint_dir = config_.out + "/checkpoint";
  std::string stop_rule;
  int stopped_by = 0;
  // The round's sum of n_k (w_k - w) over this worker's clients. Not the gradient buffer,
  // which the push sends: every local step of a client computes its gradient there, so
  // accumulating there would wipe the clients before the last and add its last gradient.
  std::vector<float> delta(static_cast<size_t>(params().size()));
  for (; step_ < rounds && (stop_at_round <= 0 || step_ != stop_at_round);) {
    Stopwatch round_watch;
    const int64_t round = step_;
    ps->pull(round);
    const std::vector<int> chosen =
        parallel::choose_clients(config_.seed, round, clients, f.fraction);
    const std::vector<int> mine =
        parallel::assign_clients(chosen, sizes, world_)[static_cast<size_t>(rank_)];
    std::fill(delta.begin(), delta.end(), 0.0f);
    int64_t samples = 0;
    double loss = 0;
    const float lr = learning_rate();
    for (const int k : mine) {
      const parallel::ClientUpdate u =
          client.train(round, k, split[static_cast<size_t>(k)], lr, delta);
      samples += u.samples;
      loss += u.loss * static_cast<double>(u.samples);
    }
    // What the push sends. A worker with no client this round still pushes (weight 0): the
    // round waits for it.
    std::copy(delta.begin(), delta.end(), params().grads());
    ps->push(lr, round, samples);
    ++step_;
    const double seconds = round_watch.elapsed();
    const double mean_loss = samples > 0 ? loss / static_cast<double>(samples) : 0.0;
    if (step_ % config_.log_every == 0 || step_ == rounds) {
      metrics.write({{"event", "train"},
                     {"round", step_},
                     {"step", step_},
                     {"loss", mean_loss},
                     {"clients", mine.size()},
                     {"samples", samples},
                     {"lr", lr},
                     {"samples/s", static_cast<double>(samples) / seconds},
                     {"seconds", run_watch.elapsed()}});
      progress.update(detail::concat("round ", step_, "/", rounds, "  loss ", mean_loss, "  ",
                                     mine.size(), " clients here"));
    }
    const bool eval_now = config_.eval_every == 0 || step_ % config_.eval_every == 0;
    if (eval_now && strategy_->evaluates()) {
      const EvalResult r = evaluate(config_.eval_batches);
      metrics.write({{"event", "eval"},
                     {"round", step_},
                     {"step", step_},
                     {"loss", r.loss},
                     {"accuracy", r.accuracy},
                     {"samples", r.samples},
                     {"run_seconds", run_watch.elapsed()}});
      progress.print(
          detail::concat("eval  round ", step_, "  loss ", r.loss, "  accuracy ", r.accuracy));
      if (const std::optional<StopDecision> d = stop_rules_.observe(r, step_)) {
        stop_rule = d->rule;
        metrics.write(
            {{"event", "stop"}, {"rule", d->rule}, {"reason", d->reason}, {"step", step_}});
        progress.print(d->reason);
        strategy_->announce_stop(step_);
        break;
      }
    }
    if (config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0) checkpoint_now();
    if ((stopped_by = stop_requested()) != 0) break;
    if (strategy_->stop_announced()) {
      stop_rule = "announced";
      log_info("stopping at round ", step_,
               ": the run was judged converged (by the chief or the evaluator)");
      break;
    }
  }
  checkpoint_now();
  strategy_->finish();
  const std::string how = stopped_by != 0     ? "stopped by " + std::string(signal_name(stopped_by))
                          : stop_rule.empty() ? std::string("done")
                                              : "converged (" + stop_rule + ")";
  progress.print(detail::concat(how, ": ", step_, " rounds in ",
                                format_duration(run_watch.elapsed()), "; checkpoint in ",
                                checkpoint_dir));
  RunOutcome outcome;
  outcome.step = step_;
  outcome.stop_signal = stopped_by;
  outcome.stop_rule = stop_rule;
  return outcome;
}

}  // namespace braid::train
