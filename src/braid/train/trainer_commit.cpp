// Trainer::commit and restore: the training state in memory (train_commit.h), for elastic
// training's rollbacks and for newcomers, which take it from a live rank.
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/loader.h"
#include "optim/optimizer.h"
#include "parallel/strategy.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using nlohmann::json;

size_t total_bytes(const std::vector<NamedTensor>& tensors) {
  size_t n = 0;
  for (const auto& t : tensors) n += t.tensor.nbytes();
  return n;
}

// Copies the tensors back to back into `into`, which keeps its capacity between commits.
void pack(const std::vector<NamedTensor>& tensors, std::vector<uint8_t>& into) {
  into.resize(total_bytes(tensors));
  size_t at = 0;
  for (const auto& t : tensors) {
    if (t.tensor.nbytes() > 0) std::memcpy(into.data() + at, t.tensor.raw(), t.tensor.nbytes());
    at += t.tensor.nbytes();
  }
}

void unpack(const std::vector<uint8_t>& from, const std::vector<NamedTensor>& tensors,
            const char* what) {
  BRAID_CHECK(from.size() == total_bytes(tensors), "elastic commit: its ", what, " holds ",
              from.size(), " bytes but this trainer's holds ", total_bytes(tensors),
              " (a different model or optimizer on another rank?)");
  size_t at = 0;
  for (const auto& t : tensors) {
    if (t.tensor.nbytes() > 0) std::memcpy(t.tensor.raw(), from.data() + at, t.tensor.nbytes());
    at += t.tensor.nbytes();
  }
}

std::vector<NamedTensor> as_named(const optim::NamedTensors& state) {
  std::vector<NamedTensor> out;
  for (const auto& [name, tensor] : state) out.push_back({name, tensor});
  return out;
}

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get_u64(const std::vector<uint8_t>& in, size_t& at) {
  BRAID_CHECK(at + 8 <= in.size(), "elastic commit: truncated at byte ", at, " of ", in.size());
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{in[at + static_cast<size_t>(i)]} << (8 * i);
  at += 8;
  return v;
}
void put_block(std::vector<uint8_t>& out, const uint8_t* data, size_t n) {
  put_u64(out, n);
  out.insert(out.end(), data, data + n);
}
std::vector<uint8_t> get_block(const std::vector<uint8_t>& in, size_t& at) {
  const uint64_t n = get_u64(in, at);
  BRAID_CHECK(n <= in.size() - at, "elastic commit: a block of ", n, " bytes at byte ", at,
              " runs past its ", in.size());
  std::vector<uint8_t> out(in.begin() + static_cast<std::ptrdiff_t>(at),
                           in.begin() + static_cast<std::ptrdiff_t>(at + n));
  at += n;
  return out;
}

// The slot of the older commit of two, which the next one overwrites.
parallel::StateShard& older(parallel::StateShard (&slots)[2]) {
  return slots[0].step <= slots[1].step ? slots[0] : slots[1];
}

}  // namespace

std::vector<uint8_t> TrainCommit::bytes() const {
  BRAID_CHECK(!live, "elastic commit: bytes() of a commit not sealed (Trainer::seal_commit)");
  std::vector<uint8_t> out;
  out.reserve(40 + position.size() + model.size() + optimizer.size() + average.size());
  put_u64(out, static_cast<uint64_t>(step));
  put_block(out, reinterpret_cast<const uint8_t*>(position.data()), position.size());
  put_block(out, model.data(), model.size());
  put_block(out, optimizer.data(), optimizer.size());
  put_block(out, average.data(), average.size());
  return out;
}

TrainCommit TrainCommit::from_bytes(const std::vector<uint8_t>& bytes) {
  TrainCommit c;
  size_t at = 0;
  c.step = static_cast<int64_t>(get_u64(bytes, at));
  const std::vector<uint8_t> pos = get_block(bytes, at);
  c.position.assign(pos.begin(), pos.end());
  c.model = get_block(bytes, at);
  c.optimizer = get_block(bytes, at);
  c.average = get_block(bytes, at);
  return c;
}

void Trainer::make_transactional(bool on) {
  transactional_ = strategy_->make_transactional(on) && on;
}

void Trainer::commit_shards(TrainCommit& into, std::string position) {
  strategy_->finish_passing_shard(false);  // the last commit's, before its slots are chosen
  parallel::StateShard& mine = older(into.mine);
  mine.step = -1;  // until the whole of it is copied
  strategy_->cut_shard(mine);
  mine.round = into.round;
  mine.position = std::move(position);
  std::vector<NamedTensor> buffers;
  for (const nn::NamedBuffer& b : params().buffers()) buffers.push_back({b.name, b.value});
  pack(buffers, mine.buffers);
  mine.step = step_;
  into.step = step_;
  into.live = false;
  // The neighbour's shard of this commit: a rank lost now leaves this rank's own copy, and
  // the previous commit whole.
  strategy_->pass_shard_on(mine, older(into.left));
}

void Trainer::commit(TrainCommit& into) {
  if (strategy_->shards_state()) {
    BRAID_CHECK(!average_, "elastic training of a sharded strategy keeps no weight average yet; ",
                "drop the weight average or zero_stage");
    return commit_shards(into, position_json().dump());
  }
  if (!transactional_) {
    // Where the ranks' replicas differ (local SGD between averages), one model first.
    if (!strategy_->replicas_agree(step_)) strategy_->synchronize();
    strategy_->gather_for_checkpoint();
    if (!strategy_->holds_gathered_state()) {
      // Model parallelism: ranks 0 and 1 hold the gathered state; this rank commits nothing
      // and takes the state from one of them when a round forms.
      into.step = -1;
      into.live = false;
      return;
    }
  }
  into.step = step_;
  into.position = position_json().dump();
  into.live = transactional_;
  if (transactional_) {
    std::vector<NamedTensor> buffers;
    for (const nn::NamedBuffer& b : params().buffers()) buffers.push_back({b.name, b.value});
    pack(buffers, into.buffers);
    into.model.clear();
    into.optimizer.clear();
  } else {
    pack(state_dict(params()), into.model);
    pack(as_named(strategy_->optimizer_state()), into.optimizer);
  }
  if (average_)
    pack(average_->state_dict(), into.average);
  else
    into.average.clear();
}

nlohmann::json Trainer::position_json() const {
  json pos = {{"step", step_}, {"epoch", epoch_}};
  if (train_loader_) {
    // In samples of the epoch's order, not steps: the world restoring it may take another
    // global batch (elastic.scale_lr). An epoch this world took to its end is over, even
    // where a world of a smaller global batch could take a step more of its tail.
    const data::LoaderState ls = train_loader_->state();
    pos["loader"] = {{"epoch", ls.epoch},
                     {"samples", train_loader_->sample_of(ls)},
                     {"ended", ls.position >= train_loader_->batches_in_epoch()}};
  }
  pos["stop_rules"] = stop_rules_.state();
  if (const optim::LossScaler* s = strategy_->loss_scaler()) pos["loss_scaler"] = s->state();
  if (average_) pos["ema_updates"] = average_->updates();
  return pos;
}

void Trainer::seal_commit(TrainCommit& c) {
  if (c.sharded()) strategy_->finish_passing_shard(/*quietly=*/true);
  if (!c.live) return;
  if (c.step != step_) {
    // Steps completed after the commit (its run failed later, in an evaluation or a
    // checkpoint): the live state is theirs, whole.
    commit(c);
  }
  // The parameters and optimizer state as the commit's step left them (a transactional step
  // changes them only once it succeeded); the buffers as committed, since a failed step's
  // forward may have moved them.
  std::vector<NamedTensor> parameters;
  for (nn::ParamSet::Id id = 0; id < params().layout().size(); ++id)
    parameters.push_back({params().info(id).name, params().param(id)});
  pack(parameters, c.model);
  c.model.insert(c.model.end(), c.buffers.begin(), c.buffers.end());
  pack(as_named(strategy_->optimizer_state()), c.optimizer);
  c.live = false;
}

void Trainer::restore(const TrainCommit& from) {
  BRAID_CHECK(!from.empty(), "restore: the commit is empty");
  BRAID_CHECK(!from.live, "restore: the commit is not sealed (Trainer::seal_commit)");
  const json pos = json::parse(from.position);
  strategy_->prepare_to_load();
  unpack(from.model, state_dict(params()), "model");
  // Fresh tensors of the optimizer state's names and shapes, filled from the commit.
  optim::NamedTensors opt;
  for (const auto& [name, t] : strategy_->optimizer_state_layout())
    opt.emplace_back(name, Tensor::empty(t.shape(), t.dtype(), MemCategory::optimizer));
  std::vector<NamedTensor> views;
  for (const auto& [name, t] : opt) views.push_back({name, t});
  unpack(from.optimizer, views, "optimizer state");
  strategy_->load_optimizer_state(opt);
  strategy_->sync_parameters();
  step_ = pos.at("step").get<int64_t>();
  epoch_ = pos.at("epoch").get<int64_t>();
  step_offset_ = 0;
  resume_mid_epoch_ = false;
  if (train_loader_ && pos.contains("loader")) {
    const json& l = pos["loader"];
    const int64_t epoch = l.at("epoch").get<int64_t>(), samples = l.at("samples").get<int64_t>();
    // The loader of this world continues at the same sample, whatever global batch took
    // the ones before (with the same one, at the same step).
    if (epoch == epoch_ && l.at("ended").get<bool>()) {
      epoch_ = epoch + 1;  // as the committing world would have gone on
    } else if (epoch == epoch_ && samples > 0) {
      train_loader_->restore(train_loader_->state_at_sample(epoch, samples));
      resume_mid_epoch_ = true;
    }
    // Counted at this world's steps per epoch (steps_into_epoch).
    const data::LoaderState here =
        resume_mid_epoch_ ? train_loader_->state() : data::LoaderState{.epoch = epoch_};
    step_offset_ =
        step_ - (here.epoch * train_loader_->batches_per_epoch() + steps_into_epoch(here));
  }
  stop_rules_.load(pos.value("stop_rules", json()), "elastic commit");
  if (optim::LossScaler* s = strategy_->loss_scaler(); s && pos.contains("loss_scaler"))
    s->load(pos["loss_scaler"], "elastic commit");
  if (average_) {
    std::vector<NamedTensor> copies;
    for (const auto& t : average_->state_dict())
      copies.push_back(
          {t.name, Tensor::empty(t.tensor.shape(), t.tensor.dtype(), MemCategory::other)});
    unpack(from.average, copies, "weight average");
    average_->load(copies, pos.value("ema_updates", int64_t{0}), "elastic commit");
  }
}

}  // namespace braid::train
