#include "parallel/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "comm/group.h"
#include "core/kernels.h"
#include "core/log.h"
#include "core/timer.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "parallel/same_model.h"

namespace braid::parallel {
namespace {

// Point-to-point tags: the position (or tie) above, the message's kind in the low bits.
enum TagKind : uint32_t { kActivation = 0, kGradient = 1, kTieGradient = 2, kTieValue = 3 };
constexpr uint32_t kStateTag = 0xFFFF0000u;  // + state tensor: optimizer state to rank 0

uint32_t tag(int position, uint32_t kind, size_t tie = 0) {
  return (static_cast<uint32_t>(position) << 8) | (static_cast<uint32_t>(tie) << 2) | kind;
}

std::vector<optim::Segment> stage_segments(const nn::ParamSet& params, nn::ParamSet::Id first,
                                           nn::ParamSet::Id end, int64_t begin) {
  std::vector<optim::Segment> out;
  for (nn::ParamSet::Id id = first; id < end; ++id) {
    const nn::ParamInfo& p = params.info(id);
    out.push_back({p.name, p.offset - begin, p.numel(), p.decay});
  }
  return out;
}

std::string format_ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g ms", seconds * 1e3);
  return text;
}

}  // namespace

struct Pipeline::Slot {
  std::vector<std::unique_ptr<nn::Cache>> caches;  // the stage's units' (none with recompute)
  Tensor input;                  // a stage after the first: the received activation
  Tensor output;                 // recompute: the stage's output, kept for its send
  const Tensor* x = nullptr;     // the micro-batch's input to this stage
  std::vector<comm::Handle> sends;  // sends still reading the slot's memory
};

// A parameter declared by one stage's unit (owner) and read by a later stage's (user).
struct Pipeline::Tie {
  nn::ParamSet::Id id = 0;
  size_t owner_unit = 0;
  int owner = 0, user = 0;
  Tensor staging;           // the owner's: the user's gradient as it arrives
  comm::Handle value_recv;  // the user's: this step's values from the owner
  bool value_pending = false;
  std::vector<comm::Handle> grad_sends;  // the user's: gradients still on the wire
};

Pipeline::Pipeline(std::unique_ptr<nn::Module> module, StepOptions options,
                   std::shared_ptr<comm::Group> group, PipelineOptions pipeline)
    : Strategy(std::move(module), std::move(options)),
      group_(std::move(group)),
      popts_(std::move(pipeline)) {
  BRAID_CHECK(group_, "pipeline: needs a group of its stages");
  BRAID_CHECK(popts_.micro_batches >= 1, "pipeline.micro_batches must be >= 1, got ",
              popts_.micro_batches);
  BRAID_CHECK(options_.accumulate_steps == 1,
              "pipeline: the batch is already cut into pipeline.micro_batches (",
              popts_.micro_batches, "); drop accumulate_steps (", options_.accumulate_steps,
              ") or fold it into micro_batches");
  build(nullptr, /*with_optimizer=*/false);
  check_same_model(*group_, params_, "pipeline");
  units_ = module_->pipeline_units();
  BRAID_CHECK(!units_.empty(), "pipeline: model '", module_->kind(),
              "' cannot be cut into stages (a Sequential model or a GPT can)");
  BRAID_CHECK(static_cast<int>(units_.size()) >= group_->size(), "pipeline: ", group_->size(),
              " stages need at least as many layers, but the model has ", units_.size(),
              "; use fewer ranks");
  first_learning_unit_ = units_.size();
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].end > units_[u].first) {
      first_learning_unit_ = u;
      break;
    }
  if (popts_.recompute)
    for (const nn::PipelineUnit& u : units_)
      BRAID_CHECK(u.buffers_end == u.buffers_first, "pipeline.recompute: layer ", u.name,
                  " keeps running statistics (BatchNorm), which a second forward would update "
                  "twice; drop recompute or the BatchNorm layers");
  // From here the progress thread drives the group: every p2p and collective goes through it.
  engine_ = std::make_unique<comm::ProgressEngine>(group_);
  if (!popts_.cut.empty()) {
    BRAID_CHECK(popts_.cut.size() == static_cast<size_t>(group_->size()) + 1 &&
                    popts_.cut.front() == 0 && popts_.cut.back() == units_.size() &&
                    std::is_sorted(popts_.cut.begin(), popts_.cut.end()) &&
                    std::adjacent_find(popts_.cut.begin(), popts_.cut.end()) == popts_.cut.end(),
                "pipeline: a cut needs ", group_->size() + 1,
                " increasing unit boundaries from 0 to ", units_.size());
    cut_ = popts_.cut;
    prepare_stage();
  }
}

Pipeline::~Pipeline() {
  // Sends still reading this rank's memory finish before it goes (a failed group throws:
  // nothing to keep in step with any more).
  try {
    for (Slot& s : slots_) wait_all(s.sends);
    wait_all(sends_);
  } catch (const std::exception&) {
  }
}

int Pipeline::rank() const { return group_->rank(); }
int Pipeline::world_size() const { return group_->size(); }
int Pipeline::stage() const { return group_->rank(); }
int Pipeline::stages() const { return group_->size(); }

void Pipeline::measure_and_cut(const data::Batch& micro) {
  // Every unit's forward and backward on the first micro-batch, twice (the first pays for
  // first touches); the faster of the two counts. BatchNorm's statistics are put back.
  std::vector<Tensor> saved;
  for (const nn::NamedBuffer& b : params_.buffers()) {
    saved.push_back(Tensor::empty(b.value.shape(), b.value.dtype(), MemCategory::workspace));
    saved.back().copy_from(b.value);
  }
  std::vector<double> cost(units_.size(), std::numeric_limits<double>::infinity());
  std::vector<std::unique_ptr<nn::Cache>> caches;
  for (const nn::PipelineUnit& u : units_) caches.push_back(u.module->make_cache());
  for (int round = 0; round < 2; ++round) {
    params_.zero_grads();
    std::vector<double> t(units_.size(), 0);
    const nn::ForwardContext ctx = train_context(0, 0);
    const Tensor* h = &micro.inputs;
    for (size_t u = 0; u < units_.size(); ++u) {
      Stopwatch w;
      h = &units_[u].module->forward(*h, *caches[u], ctx);
      t[u] += w.elapsed();
    }
    Stopwatch w;
    nn::softmax_cross_entropy(*h, micro.targets, &dy_, {});
    t.back() += w.elapsed();
    const Tensor* g = &dy_;
    for (size_t u = units_.size(); u-- > first_learning_unit_;) {
      Stopwatch wb;
      g = &units_[u].module->backward(*g, *caches[u], u > first_learning_unit_);
      t[u] += wb.elapsed();
    }
    for (size_t u = 0; u < units_.size(); ++u) cost[u] = std::min(cost[u], t[u]);
  }
  params_.zero_grads();
  for (size_t i = 0; i < saved.size(); ++i) {
    Tensor live = params_.buffers()[i].value;  // shares the layer's memory
    live.copy_from(saved[i]);
  }
  // Every rank cuts from the same (summed) times.
  engine_->iallreduce(cost.data(), cost.size(), DType::f64, ReduceOp::sum, "layer timing sum")
      .wait();
  cut_ = balance_stages(cost, group_->size());
  prepare_stage();
  if (group_->rank() == 0) {
    std::string text = "pipeline: " + std::to_string(group_->size()) + " stages, " +
                       std::string(schedule_name(popts_.schedule)) + ", " +
                       std::to_string(popts_.micro_batches) + " micro-batches" +
                       (popts_.recompute ? ", recompute" : "") + "; cut by measured time: ";
    for (int s = 0; s < group_->size(); ++s) {
      double sum = 0;
      for (size_t u = cut_[s]; u < cut_[s + 1]; ++u) sum += cost[u];
      text += (s ? " | " : "") + std::string("stage ") + std::to_string(s) + ": " +
              units_[cut_[s]].name +
              (cut_[s + 1] - cut_[s] > 1 ? ".." + units_[cut_[s + 1] - 1].name : "") + " (" +
              format_ms(sum / group_->size()) + ")";
    }
    log_info(text);
  }
}

std::string Pipeline::describe_cut() const {
  std::string text;
  for (size_t s = 0; s + 1 < cut_.size(); ++s)
    text += (s ? " | " : "") + std::string("stage ") + std::to_string(s) + ": " +
            units_[cut_[s]].name + (cut_[s + 1] - cut_[s] > 1 ? ".." + units_[cut_[s + 1] - 1].name : "");
  return text;
}

void Pipeline::prepare_stage() {
  const int s = group_->rank(), n = group_->size();
  first_unit_ = cut_[static_cast<size_t>(s)];
  end_unit_ = cut_[static_cast<size_t>(s) + 1];
  first_id_ = units_[first_unit_].first;
  end_id_ = units_[end_unit_ - 1].end;
  begin_ = params_.range_begin(first_id_);
  end_ = end_id_ > first_id_ ? params_.range_end(end_id_) : begin_;
  backward_here_ = end_unit_ > first_learning_unit_;
  sends_dx_ = s > 0 && first_unit_ > first_learning_unit_;
  stage_optimizer_ = optim::make_optimizer(
      options_.optimizer, stage_segments(params_, first_id_, end_id_, begin_), end_ - begin_);
  auto stage_of_unit = [&](size_t u) {
    return static_cast<int>(std::upper_bound(cut_.begin(), cut_.end(), u) - cut_.begin()) - 1;
  };
  ties_.clear();
  for (size_t u = 0; u < units_.size(); ++u)
    for (nn::ParamSet::Id id : units_[u].tied) {
      size_t owner = 0;
      while (owner < units_.size() && !(id >= units_[owner].first && id < units_[owner].end))
        ++owner;
      BRAID_CHECK(owner < units_.size(), "pipeline: layer ", units_[u].name,
                  " reads a parameter no layer declares");
      const int os = stage_of_unit(owner), us = stage_of_unit(u);
      if (os == us) continue;
      BRAID_CHECK(os < us, "pipeline: layer ", units_[u].name, " reads ", params_.info(id).name,
                  " of a later stage; only weights tied forward (as the GPT's head) are built");
      Tie t;
      t.id = id;
      t.owner_unit = owner;
      t.owner = os;
      t.user = us;
      if (s == os)
        t.staging = Tensor::empty({params_.info(id).numel()}, DType::f32, MemCategory::gradients);
      ties_.push_back(std::move(t));
    }
  (void)n;
  const int limit = popts_.recompute ? in_flight_limit(popts_.schedule, s, n, popts_.micro_batches)
                                     : in_flight_limit(popts_.schedule, s, n, popts_.micro_batches);
  slots_.clear();
  slots_.resize(static_cast<size_t>(limit));
  for (Slot& slot : slots_)
    if (!popts_.recompute)
      for (size_t u = first_unit_; u < end_unit_; ++u)
        slot.caches.push_back(units_[u].module->make_cache());
  recompute_caches_.clear();
  if (popts_.recompute)
    for (size_t u = first_unit_; u < end_unit_; ++u)
      recompute_caches_.push_back(units_[u].module->make_cache());
  actions_ = stage_actions(popts_.schedule, s, n, popts_.micro_batches);
  if (options_.deterministic && popts_.micro_batches > 1)
    micro_sum_ = TreeSum(end_ - begin_, popts_.micro_batches);
  prepared_ = true;
  if (!gathered_state_.empty()) {  // a state loaded before the cut was known
    const optim::NamedTensors full = std::move(gathered_state_);
    gathered_state_.clear();
    load_optimizer_state(full);
  }
}

size_t Pipeline::slot_of(int position) const {
  return static_cast<size_t>(position) % slots_.size();
}

void Pipeline::wait_timed(const comm::Handle& handle) {
  Stopwatch w;
  handle.wait();
  ptimes_.waiting += w.elapsed();
}

void Pipeline::wait_all(std::vector<comm::Handle>& handles) {
  for (const comm::Handle& h : handles) h.wait();
  handles.clear();
}

comm::Handle Pipeline::start_receive(int from, uint32_t t, void* data, size_t bytes,
                                     comm::OpLabel label) {
  return engine_->submit(label, [=](comm::Group& g) { g.recv(from, t, data, bytes); });
}

void Pipeline::run_units_forward(Slot& slot, const Tensor& x, const nn::ForwardContext& ctx) {
  auto& caches = popts_.recompute ? recompute_caches_ : slot.caches;
  const Tensor* h = &x;
  for (size_t u = first_unit_; u < end_unit_; ++u)
    h = &units_[u].module->forward(*h, *caches[u - first_unit_], ctx);
}

// Sends run on the progress thread, which keeps pushing them while this thread computes.
void Pipeline::post_send(int to, uint32_t t, const void* data, size_t bytes, comm::OpLabel label,
                         std::vector<comm::Handle>& into) {
  into.push_back(engine_->submit(label, [=](comm::Group& g) { g.send(to, t, data, bytes); }));
}

void Pipeline::forward_action(int position, int64_t step) {
  const int s = group_->rank(), n = group_->size();
  const int k = order_[static_cast<size_t>(position)];
  Slot& slot = slots_[slot_of(position)];
  wait_all(slot.sends);  // the slot's memory is free again
  if (s == 0) {
    slot.x = &micro_[k].inputs;
  } else {
    slot.input.ensure(in_shape_, DType::f32, MemCategory::activations);
    wait_timed(start_receive(s - 1, tag(position, kActivation), slot.input.raw(),
                             slot.input.nbytes(), {"receive of the activation of micro-batch", k}));
    slot.x = &slot.input;
  }
  if (s == n - 1) {
    // The last stage's forward runs with its loss and backward (recompute) or is kept in
    // the slot's caches until then.
    if (popts_.recompute) return;
    Stopwatch w;
    run_units_forward(slot, *slot.x, train_context(step, k));
    times_.forward += w.elapsed();
    return;
  }
  Stopwatch w;
  if (popts_.recompute) wait_all(recompute_sends_);
  run_units_forward(slot, *slot.x, train_context(step, k));
  const Tensor& out = popts_.recompute ? recompute_caches_.back()->out : slot.caches.back()->out;
  const Tensor* to_send = &out;
  if (popts_.recompute) {
    slot.output.ensure(out.shape(), DType::f32, MemCategory::activations);
    slot.output.copy_from(out);
    to_send = &slot.output;
  }
  times_.forward += w.elapsed();
  post_send(s + 1, tag(position, kActivation), to_send->raw(), to_send->nbytes(),
            {"send of the activation of micro-batch", k}, slot.sends);
}

void Pipeline::backward_action(int position, int64_t step) {
  const int s = group_->rank(), n = group_->size();
  const int k = order_[static_cast<size_t>(position)];
  const bool ordered = options_.deterministic && popts_.micro_batches > 1;
  Slot& slot = slots_[slot_of(position)];
  if (!backward_here_) return;
  if (ordered && position > 0) params_.zero_grads();
  for (Tie& t : ties_)  // the tied gradient of the last micro-batch is written again below
    if (t.user == s) wait_all(t.grad_sends);
  if (s < n - 1) {
    dy_.ensure(out_shape_, DType::f32, MemCategory::activation_grads);
    wait_timed(start_receive(s + 1, tag(position, kGradient), dy_.raw(), dy_.nbytes(),
                             {"receive of the gradient of micro-batch", k}));
  }
  Stopwatch w;
  if (popts_.recompute) {
    wait_all(recompute_sends_);
    run_units_forward(slot, *slot.x, train_context(step, k));
  }
  auto& caches = popts_.recompute ? recompute_caches_ : slot.caches;
  if (s == n - 1) {
    const float scale = grad_scale_ * (scaler_ ? scaler_->scale() : 1.0f);
    loss_sum_ += nn::softmax_cross_entropy(caches.back()->out, micro_[k].targets, &dy_,
                                           {.grad_scale = scale,
                                            .label_smoothing = options_.label_smoothing})
                     .loss;
  }
  const Tensor* g = &dy_;
  for (size_t u = end_unit_; u-- > std::max(first_unit_, first_learning_unit_);) {
    for (size_t i = 0; i < ties_.size(); ++i) {
      Tie& t = ties_[i];
      if (ordered && t.owner == s && t.owner_unit == u) {
        // One process: the user's gradient is written first, this unit adds to it.
        times_.backward += w.elapsed();
        wait_timed(start_receive(t.user, tag(position, kTieGradient, i), t.staging.raw(),
                                 t.staging.nbytes(), {"receive of a tied weight's gradient", k}));
        w.lap();
        bool overwrite = false;
        Tensor grad = params_.grad_for_write(t.id, overwrite);
        if (overwrite) grad.copy_from(t.staging);
        else add_inplace(t.staging.f32(), grad.f32(), grad.numel());
      }
    }
    g = &units_[u].module->backward(*g, *caches[u - first_unit_], u > first_learning_unit_);
  }
  for (size_t i = 0; i < ties_.size(); ++i) {
    Tie& t = ties_[i];
    if (!ordered || t.user != s) continue;
    bool overwrite = false;
    const Tensor grad = params_.grad_for_write(t.id, overwrite);
    post_send(t.owner, tag(position, kTieGradient, i), grad.raw(), grad.nbytes(),
              {"send of a tied weight's gradient", k}, t.grad_sends);
  }
  if (ordered && end_ > begin_) {
    float* grads = params_.grads(first_id_, end_id_);
    micro_sum_.add(position, grads + begin_, grads + begin_, 0, end_ - begin_);
  }
  times_.backward += w.elapsed();
  if (sends_dx_)
    post_send(s - 1, tag(position, kGradient), g->raw(), g->nbytes(),
              {"send of the gradient of micro-batch", k},
              popts_.recompute ? recompute_sends_ : slot.sends);
}

// Outside deterministic mode the user's gradient of a tied weight arrives once, summed over
// the micro-batches, and is added to the owner's.
void Pipeline::finish_ties_after_backward() {
  const int s = group_->rank();
  const bool ordered = options_.deterministic && popts_.micro_batches > 1;
  for (size_t i = 0; i < ties_.size(); ++i) {
    Tie& t = ties_[i];
    if (t.user == s) {
      wait_all(t.grad_sends);
      if (ordered) continue;
      const Tensor grad = params_.grad(t.id);
      post_send(t.owner, tag(popts_.micro_batches, kTieGradient, i), grad.raw(), grad.nbytes(),
                "send of a tied weight's gradient", t.grad_sends);
    } else if (t.owner == s && !ordered) {
      wait_timed(start_receive(t.user, tag(popts_.micro_batches, kTieGradient, i),
                               t.staging.raw(), t.staging.nbytes(),
                               "receive of a tied weight's gradient"));
      Tensor grad = params_.grad(t.id);
      add_inplace(t.staging.f32(), grad.f32(), grad.numel());
    }
  }
}

// The owner's updated values of each tied weight go to its user, which takes them before it
// next reads them (settle_tied_values).
void Pipeline::send_updated_ties() {
  const int s = group_->rank();
  for (size_t i = 0; i < ties_.size(); ++i) {
    Tie& t = ties_[i];
    const Tensor value = params_.param(t.id);
    if (t.owner == s) {
      post_send(t.user, tag(0, kTieValue, i), value.raw(), value.nbytes(),
                "send of a tied weight's values", sends_);
    } else if (t.user == s) {
      t.value_recv = start_receive(t.owner, tag(0, kTieValue, i), value.raw(), value.nbytes(),
                                   "receive of a tied weight's values");
      t.value_pending = true;
    }
  }
}

void Pipeline::settle_tied_values() {
  for (Tie& t : ties_)
    if (t.value_pending) wait_timed(t.value_recv), t.value_pending = false;
}

double Pipeline::step(const data::Batch& batch, float lr, int64_t step) {
  Stopwatch watch;
  times_ = {};
  ptimes_ = {};
  const int m = popts_.micro_batches;
  micro_.split(batch, m);
  if (!prepared_) measure_and_cut(micro_[0]);
  settle_tied_values();
  wait_all(sends_);
  const bool ordered = options_.deterministic && m > 1;
  order_.resize(static_cast<size_t>(m));
  for (int p = 0; p < m; ++p)
    order_[static_cast<size_t>(p)] = ordered ? micro_sum_.order()[static_cast<size_t>(p)] : p;
  // Every micro-batch has the same shape: the activations at this stage's two ends.
  Shape shape = micro_[0].inputs.shape();
  for (size_t u = 0; u < end_unit_; ++u) {
    if (u == first_unit_) in_shape_ = shape;
    shape = units_[u].module->output_shape(shape);
  }
  out_shape_ = shape;
  grad_scale_ = m > 1 && !ordered ? 1.0f / static_cast<float>(m) : 1.0f;
  loss_sum_ = 0;
  params_.zero_grads();
  for (const PipelineAction& a : actions_) {
    if (a.kind == PipelineAction::forward) forward_action(a.position, step);
    else backward_action(a.position, step);
  }
  finish_ties_after_backward();
  float* grads = params_.grads(first_id_, end_id_) + begin_;
  const int64_t len = end_ - begin_;
  if (ordered && len > 0) scale_into(grads, grads, len, 1.0f / static_cast<float>(m));
  // One small all-reduce for the loss (from the last stage) and fp16's overflow vote.
  double shared[2] = {loss_sum_, 0};
  if (scaler_)
    shared[1] = optim::LossScaler::has_overflow({grads, static_cast<size_t>(len)}) ? 1 : 0;
  // Until every stage is here the pipeline is still draining: this stage's tail of the
  // bubble, so the wait counts as waiting and the schedule ends after it.
  Stopwatch comm_watch;
  engine_->iallreduce(shared, 2, DType::f64, ReduceOp::sum, "the step's loss sum").wait();
  ptimes_.waiting += comm_watch.elapsed();
  ptimes_.schedule = watch.lap();
  ptimes_.compute = times_.forward + times_.backward;
  times_.communication_exposed = ptimes_.waiting;
  bool skip = false;
  if (scaler_) {
    const float scale = scaler_->scale();
    skip = scaler_->update(shared[1] > 0);
    if (!skip && len > 0) scale_into(grads, grads, len, 1.0f / scale);
  }
  if (!skip) {
    const auto& segments = stage_optimizer_->segments();
    if (options_.clip_grad_norm > 0) {
      double sq = optim::grad_sum_squares(grads, segments);
      engine_->iallreduce(&sq, 1, DType::f64, ReduceOp::sum, "gradient norm").wait();
      optim::scale_grads(grads, segments,
                         optim::clip_coefficient(std::sqrt(sq), options_.clip_grad_norm));
    }
    stage_optimizer_->step(params_.params() + begin_, grads, lr);
  }
  send_updated_ties();
  times_.optimizer = watch.lap();
  times_.total = ptimes_.schedule + times_.optimizer;
  return shared[0] / m;
}

void Pipeline::sync_parameters() {
  settle_tied_values();
  engine_
      ->ibroadcast(params_.params(), static_cast<size_t>(params_.size()), DType::f32, 0,
                   "broadcast of the parameters")
      .wait();
  for (const nn::NamedBuffer& b : params_.buffers())
    engine_
        ->ibroadcast(b.value.raw(), static_cast<size_t>(b.value.numel()), b.value.dtype(), 0,
                     "broadcast of a buffer")
        .wait();
}

// Every stage's parameters and buffers to every rank, from the stage that owns them.
void Pipeline::synchronize() {
  if (!prepared_) return;  // no step yet: every rank holds the initial model
  settle_tied_values();
  for (int s = 0; s < group_->size(); ++s) {
    const size_t fu = cut_[static_cast<size_t>(s)], eu = cut_[static_cast<size_t>(s) + 1];
    const nn::ParamSet::Id first = units_[fu].first, end = units_[eu - 1].end;
    if (end > first) {
      const int64_t b = params_.range_begin(first), e = params_.range_end(end);
      engine_
          ->ibroadcast(params_.params() + b, static_cast<size_t>(e - b), DType::f32, s,
                       {"broadcast of the parameters of stage", s})
          .wait();
    }
    for (size_t u = fu; u < eu; ++u)
      for (size_t i = units_[u].buffers_first; i < units_[u].buffers_end; ++i) {
        const Tensor& v = params_.buffers()[i].value;
        engine_
            ->ibroadcast(v.raw(), static_cast<size_t>(v.numel()), v.dtype(), s,
                         {"broadcast of the buffers of stage", s})
            .wait();
      }
  }
}

void Pipeline::sum_over_ranks(double* values, size_t count, const char* what) {
  engine_->iallreduce(values, count, DType::f64, ReduceOp::sum, comm::OpLabel(what)).wait();
}

void Pipeline::start_sum_over_ranks(double* values, size_t count, const char* what) {
  BRAID_CHECK(pending_sum_.done(), "pipeline: a sum over ranks is already under way");
  pending_sum_ =
      engine_->iallreduce(values, count, DType::f64, ReduceOp::sum, comm::OpLabel(what));
}

void Pipeline::finish_sum_over_ranks() {
  pending_sum_.wait();
  pending_sum_ = {};
}

std::string_view Pipeline::optimizer_name() const {
  return optim::make_optimizer(options_.optimizer, {}, 0)->name();
}

void Pipeline::gather_for_checkpoint() {
  gathered_full_.clear();
  const bool root = group_->rank() == 0;
  if (!prepared_) {
    // No step yet: a fresh optimizer's state, or the one loaded and not yet cut.
    if (root && !gathered_state_.empty()) gathered_full_ = gathered_state_;
    else if (root) {
      std::vector<optim::Segment> all = stage_segments(params_, 0, params_.layout().size(), 0);
      gathered_full_ = optim::make_optimizer(options_.optimizer, all, params_.size())->state();
    }
    return;
  }
  const optim::NamedTensors mine = stage_optimizer_->state();
  for (size_t k = 0; k < mine.size(); ++k) {
    const auto& [name, t] = mine[k];
    if (t.dtype() != DType::f32) {
      if (root) gathered_full_.emplace_back(name, t);
      continue;
    }
    if (!root) {
      const uint32_t state_tag = kStateTag + static_cast<uint32_t>(k);
      const void* data = t.raw();
      const size_t bytes = t.nbytes();
      engine_
          ->submit("send of optimizer state for a checkpoint",
                   [=](comm::Group& g) { g.send(0, state_tag, data, bytes); })
          .wait();
      continue;
    }
    Tensor full = Tensor::empty({params_.size()}, DType::f32, MemCategory::optimizer);
    for (int s = 0; s < group_->size(); ++s) {
      const size_t fu = cut_[static_cast<size_t>(s)], eu = cut_[static_cast<size_t>(s) + 1];
      const nn::ParamSet::Id first = units_[fu].first, end = units_[eu - 1].end;
      const int64_t b = end > first ? params_.range_begin(first) : 0;
      const int64_t e = end > first ? params_.range_end(end) : 0;
      if (s == 0) std::memcpy(full.f32() + b, t.raw(), static_cast<size_t>(e - b) * sizeof(float));
      else
        start_receive(s, kStateTag + static_cast<uint32_t>(k), full.f32() + b,
                      static_cast<size_t>(e - b) * sizeof(float),
                      {"receive of optimizer state from stage", s})
            .wait();
    }
    gathered_full_.emplace_back(name, full);
  }
}

optim::NamedTensors Pipeline::optimizer_state() const {
  BRAID_CHECK(group_->rank() == 0 && !gathered_full_.empty(),
              "pipeline: the full optimizer state is gathered on rank 0 by gather_for_checkpoint()");
  return gathered_full_;
}

void Pipeline::load_optimizer_state(const optim::NamedTensors& state) {
  for (const auto& [name, t] : state)
    BRAID_CHECK(t.dtype() != DType::f32 || t.numel() == params_.size(), "optimizer state '", name,
                "' holds ", t.numel(), " floats; this model's layout has ", params_.size());
  if (!prepared_) {  // the stage is known at the first step: kept until then
    gathered_state_ = state;
    return;
  }
  optim::NamedTensors part;
  for (const auto& [name, t] : state) {
    if (t.dtype() != DType::f32) {
      part.emplace_back(name, t);
      continue;
    }
    Tensor slice = Tensor::empty({end_ - begin_}, DType::f32, MemCategory::optimizer);
    std::memcpy(slice.f32(), t.f32() + begin_, static_cast<size_t>(end_ - begin_) * sizeof(float));
    part.emplace_back(name, slice);
  }
  stage_optimizer_->load_state(part);
}

}  // namespace braid::parallel
