// FedAvgRoundUnit: Trainer::run's unit under strategy fedavg, federated averaging (McMahan et al.
// 2017) on a worker of a parameter-server job. The training set is split over fedavg.clients
// clients (data/client_split.h, seeded: every process computes the same split). Each round r, every
// worker draws the same fraction C of the clients (fedavg_round.h), trains its share of them from
// the global model (fedavg_client.h: E local epochs at the config's batch and learning rate,
// FedProx's mu), and pushes the sum of their weighted model changes with their sample count; the
// servers apply the weighted mean through the server optimizer once every live worker pushed
// (ps_shard.h), and the next pull reads the new model. A worker that dies leaves its clients of
// that round out; the others go on.
//
// Rounds stand in for steps (progress_unit.h): metrics, evaluation (eval_every rounds, 0: every
// round, on the chief), stop rules, checkpoints (checkpoint_every rounds, 0: at the end) and stop
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
#include "train/progress_unit.h"
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

class FedAvgRoundUnit : public ProgressUnit {
 public:
  FedAvgRoundUnit(Trainer& t, int64_t stop_at_round)
      : t_(t), ps_(dynamic_cast<parallel::PsWorker*>(t.strategy_.get())), stop_at_(stop_at_round) {
    BRAID_CHECK(ps_, "strategy fedavg runs on a parameter-server worker");
    BRAID_CHECK(t.model_.task == Task::classification,
                "strategy fedavg splits labelled data over its clients: use a classification "
                "dataset (fashion-mnist, npy)");
  }

  RunStarted start() override {
    const TrainConfig& c = t_.config_;
    const TrainConfig::FedAvg& f = c.fedavg;
    source_ = t_.train_loader_->shared_source();
    BRAID_CHECK(f.clients <= source_->size(), "fedavg.clients is ", f.clients,
                " but the training set holds ", source_->size(),
                " samples; every client needs one");
    const std::vector<int32_t> labels = labels_of(*source_);
    data::ClientSplitSpec spec;
    spec.kind = data::parse_client_split_kind(f.split);
    spec.alpha = f.alpha;
    spec.labels_per_client = static_cast<int>(f.labels_per_client);
    spec.seed = c.seed;
    clients_ = static_cast<int>(f.clients);
    split_ = data::split_clients(labels, t_.model_.num_classes, clients_, spec);
    for (const auto& k : split_) sizes_.push_back(static_cast<int64_t>(k.size()));
    const int per_round = parallel::clients_per_round(clients_, f.fraction);
    rounds_ = f.rounds > 0
                  ? f.rounds
                  : static_cast<int64_t>(std::ceil(
                        static_cast<double>(c.epochs) * clients_ /
                        (static_cast<double>(per_round) * static_cast<double>(f.local_epochs))));
    t_.schedule_ = t_.make_schedule(rounds_);
    client_ = std::make_unique<parallel::FedAvgClient>(
        *ps_, source_,
        parallel::FedAvgClientOptions{.batch = c.batch,
                                      .local_epochs = f.local_epochs,
                                      .prox_mu = static_cast<float>(f.prox_mu),
                                      .augment = t_.train_loader_->options().augment});
    if (client_->buffer_floats() > 0 && t_.writes_outputs())
      log_warn(
          "fedavg: the model's running statistics (batch norm) are not averaged; the "
          "chief's own are saved and evaluated");
    log_info("fedavg: ", clients_, " clients (", f.split, "), ", per_round, " a round over ",
             t_.world_, " workers, ", f.local_epochs, " local epochs at batch ", c.batch, "; ",
             rounds_, " rounds; server optimizer ", f.server_optimizer);
    delta_.assign(static_cast<size_t>(t_.params().size()), 0.0f);
    return {.model_kind = std::string(t_.module().kind()),
            .parameters = t_.params().count(),
            .total = rounds_,
            .unit = "round",
            .epochs = c.epochs,
            .batch = c.batch,
            .data_ranks = t_.world_,
            .world = t_.world_,
            .optimizer = std::string(f.server_optimizer),
            .strategy = std::string(t_.strategy_->name())};
  }

  const char* metrics_file() const override {
    return t_.writes_outputs() ? "metrics.jsonl" : nullptr;
  }

  bool already_done() override { return reached_end(); }

  Advance advance() override {
    Stopwatch round_watch;
    const int64_t round = t_.step_;
    const TrainConfig& c = t_.config_;
    ps_->pull(round);
    const std::vector<int> chosen =
        parallel::choose_clients(c.seed, round, clients_, c.fedavg.fraction);
    const std::vector<int> mine =
        parallel::assign_clients(chosen, sizes_, t_.world_)[static_cast<size_t>(t_.rank_)];
    std::fill(delta_.begin(), delta_.end(), 0.0f);
    int64_t samples = 0;
    double loss = 0;
    const float lr = t_.learning_rate();
    for (const int k : mine) {
      const parallel::ClientUpdate u =
          client_->train(round, k, split_[static_cast<size_t>(k)], lr, delta_);
      samples += u.samples;
      loss += u.loss * static_cast<double>(u.samples);
    }
    // What the push sends. A worker with no client this round still pushes (weight 0): the
    // round waits for it.
    std::copy(delta_.begin(), delta_.end(), t_.params().grads());
    ps_->push(lr, round, samples);
    ++t_.step_;
    const double seconds = round_watch.elapsed();
    last_ = StepDone{};
    last_.step = t_.step_;
    last_.epoch = t_.epoch_;
    last_.loss = samples > 0 ? loss / static_cast<double>(samples) : 0.0;
    last_.lr = lr;
    last_.rate_unit = "samples/s";
    last_.rate = static_cast<double>(samples) / seconds;
    last_.step_ms = 1e3 * seconds;
    last_.round = StepDone::Round{static_cast<int64_t>(mine.size()), samples};
    if (c.compression.codec != "none") {  // the push's encoding (parallel/ps_push_codec.h)
      const parallel::CodecReport& wire = ps_->last_codec_report();
      last_.wire =
          StepDone::Wire{c.compression.codec, wire.wire_bytes, wire.ratio(), wire.error_norm};
    }
    return Advance::unit;
  }

  // A round's own figures, not a window's: a round is long.
  std::optional<StepDone> report(const Stopwatch& run) override {
    if (t_.step_ % t_.config_.log_every != 0 && t_.step_ != rounds_) return std::nullopt;
    last_.eta_seconds = static_cast<double>(rounds_ - t_.step_) * last_.step_ms / 1e3;
    last_.run_seconds = run.elapsed();
    return last_;
  }

  // eval_every 0: every round.
  bool eval_due() const override {
    return t_.config_.eval_every == 0 || t_.step_ % t_.config_.eval_every == 0;
  }

  std::optional<Evaluated> evaluate(const char* when, const Stopwatch& run) override {
    if (!t_.strategy_->evaluates()) return std::nullopt;
    return t_.evaluated(when, t_.step_, run);
  }

  bool reached_end() const override {
    return t_.step_ >= rounds_ || (stop_at_ > 0 && t_.step_ == stop_at_);
  }

  // A worker that leaves a round leaves its clients out; the others go on.
  std::string unfinished_reason() const override { return ""; }
  FinalCheckpoint final_checkpoint() const override { return FinalCheckpoint::always; }
  int64_t outcome_step() const override { return t_.step_; }

 private:
  Trainer& t_;
  parallel::PsWorker* ps_;
  const int64_t stop_at_;
  std::shared_ptr<const data::Source> source_;
  int clients_ = 0;
  std::vector<std::vector<int64_t>> split_;
  std::vector<int64_t> sizes_;
  int64_t rounds_ = 0;
  std::unique_ptr<parallel::FedAvgClient> client_;
  // The round's sum of n_k (w_k - w) over this worker's clients. Not the gradient buffer,
  // which the push sends: every local step of a client computes its gradient there, so
  // accumulating there would wipe the clients before the last and add its last gradient.
  std::vector<float> delta_;
  StepDone last_;
};

std::unique_ptr<ProgressUnit> make_fedavg_round_unit(Trainer& trainer, int64_t stop_at_round) {
  return std::make_unique<FedAvgRoundUnit>(trainer, stop_at_round);
}

}  // namespace braid::train
