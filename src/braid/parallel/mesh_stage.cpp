// MeshStrategy's pipeline stage at work (mesh_strategy.h): one micro-batch's forward or
// backward on this stage, the point-to-point messages around it, and the tied weights.
#include "core/kernels.h"
#include "core/timer.h"
#include "nn/loss.h"
#include "parallel/mesh_strategy.h"
#include "parallel/mesh_stage.h"

namespace braid::parallel {
namespace {

// Point-to-point tags: the position (or tie) above, the message's kind in the low bits.
enum TagKind : uint32_t { kActivation = 0, kGradient = 1, kTieGradient = 2, kTieValue = 3 };

uint32_t tag(int position, uint32_t kind, size_t tie = 0) {
  return (static_cast<uint32_t>(position) << 8) | (static_cast<uint32_t>(tie) << 2) | kind;
}

}  // namespace

void MeshStrategy::wait_timed(const comm::Handle& handle) {
  Stopwatch w;
  handle.wait();
  ptimes_.waiting += w.elapsed();
}

void MeshStrategy::wait_all(std::vector<comm::Handle>& handles) {
  for (const comm::Handle& h : handles) h.wait();
  handles.clear();
}

comm::Handle MeshStrategy::start_receive(comm::Group* g, int from, uint32_t t, void* data,
                                         size_t bytes, comm::OpLabel label) {
  return engine_->submit(label, [=](comm::Group&) { g->recv(from, t, data, bytes); });
}

// Sends run on the progress thread, which keeps pushing them while this thread computes.
void MeshStrategy::post_send(comm::Group* g, int to, uint32_t t, const void* data, size_t bytes,
                             comm::OpLabel label, std::vector<comm::Handle>& into) {
  into.push_back(engine_->submit(label, [=](comm::Group&) { g->send(to, t, data, bytes); }));
}

size_t MeshStrategy::slot_of(int position) const {
  return static_cast<size_t>(position) % slots_.size();
}

void MeshStrategy::run_units_forward(Slot& slot, const Tensor& x, const nn::ForwardContext& ctx) {
  auto& caches = popts_.recompute ? recompute_caches_ : slot.caches;
  const Tensor* h = &x;
  for (size_t u = first_unit_; u < end_unit_; ++u)
    h = &units_[u].module->forward(*h, *caches[u - first_unit_], ctx);
}

double MeshStrategy::loss_and_gradient(const Tensor& logits, const Tensor& targets, float scale) {
  if (vocab_ > 0)  // the GPT cut by width: each rank holds a slice of the vocabulary
    return nn::vocab_parallel_cross_entropy(logits, targets, vocab_first_, vocab_, *reducer_,
                                            &dy_, loss_work_, {.grad_scale = scale})
        .loss;
  return nn::softmax_cross_entropy(logits, targets, &dy_,
                                   {.grad_scale = scale,
                                    .label_smoothing = options_.label_smoothing})
      .loss;
}

void MeshStrategy::forward_action(int position, int64_t step) {
  const int s = stage(), n = stages();
  const int k = order_[static_cast<size_t>(position)];
  Slot& slot = slots_[slot_of(position)];
  wait_all(slot.sends);  // the slot's memory is free again
  if (s == 0) {
    slot.x = &micro_[k].inputs;
  } else {
    slot.input.ensure(in_shape_, DType::f32, MemCategory::activations);
    wait_timed(start_receive(pipe_, s - 1, tag(position, kActivation), slot.input.raw(),
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
  post_send(pipe_, s + 1, tag(position, kActivation), to_send->raw(), to_send->nbytes(),
            {"send of the activation of micro-batch", k}, slot.sends);
}

void MeshStrategy::backward_action(int position, int64_t step) {
  const int s = stage(), n = stages();
  const int k = order_[static_cast<size_t>(position)];
  const bool ordered = options_.deterministic && popts_.micro_batches > 1;
  Slot& slot = slots_[slot_of(position)];
  if (!backward_here_) return;
  nn::ParamSet& params = *tparams_;
  if (ordered && position > 0) params.zero_grads();
  for (Tie& t : ties_)  // the tied gradient of the last micro-batch is written again below
    if (t.user == s) wait_all(t.grad_sends);
  if (s < n - 1) {
    dy_.ensure(out_shape_, DType::f32, MemCategory::activation_grads);
    wait_timed(start_receive(pipe_, s + 1, tag(position, kGradient), dy_.raw(), dy_.nbytes(),
                             {"receive of the gradient of micro-batch", k}));
  }
  Stopwatch w;
  if (popts_.recompute) {
    wait_all(recompute_sends_);
    run_units_forward(slot, *slot.x, train_context(step, k));
  }
  auto& caches = popts_.recompute ? recompute_caches_ : slot.caches;
  if (s == n - 1)
    loss_sum_ += loss_and_gradient(caches.back()->out, micro_[k].targets,
                                   grad_scale_ * (scaler_ ? scaler_->scale() : 1.0f));
  const Tensor* g = &dy_;
  for (size_t u = end_unit_; u-- > std::max(first_unit_, first_learning_unit_);) {
    for (size_t i = 0; i < ties_.size(); ++i) {
      Tie& t = ties_[i];
      if (ordered && t.owner == s && t.owner_unit == u) {
        // One process: the user's gradient is written first, this unit adds to it.
        times_.backward += w.elapsed();
        wait_timed(start_receive(pipe_, t.user, tag(position, kTieGradient, i), t.staging.raw(),
                                 t.staging.nbytes(), {"receive of a tied weight's gradient", k}));
        w.lap();
        bool overwrite = false;
        Tensor grad = params.grad_for_write(t.id, overwrite);
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
    const Tensor grad = params.grad_for_write(t.id, overwrite);
    post_send(pipe_, t.owner, tag(position, kTieGradient, i), grad.raw(), grad.nbytes(),
              {"send of a tied weight's gradient", k}, t.grad_sends);
  }
  if (ordered && end_ > begin_) {
    float* grads = params.grads(first_id_, end_id_);
    micro_sum_.add(position, grads + begin_, grads + begin_, 0, end_ - begin_);
  }
  times_.backward += w.elapsed();
  if (sends_dx_)
    post_send(pipe_, s - 1, tag(position, kGradient), g->raw(), g->nbytes(),
              {"send of the gradient of micro-batch", k},
              popts_.recompute ? recompute_sends_ : slot.sends);
}

// Outside deterministic mode the user's gradient of a tied weight arrives once, summed over
// the micro-batches, and is added to the owner's.
void MeshStrategy::finish_ties_after_backward() {
  const int s = stage();
  const bool ordered = options_.deterministic && popts_.micro_batches > 1;
  for (size_t i = 0; i < ties_.size(); ++i) {
    Tie& t = ties_[i];
    if (t.user == s) {
      wait_all(t.grad_sends);
      if (ordered) continue;
      const Tensor grad = tparams_->grad(t.id);
      post_send(pipe_, t.owner, tag(popts_.micro_batches, kTieGradient, i), grad.raw(),
                grad.nbytes(), "send of a tied weight's gradient", t.grad_sends);
    } else if (t.owner == s && !ordered) {
      wait_timed(start_receive(pipe_, t.user, tag(popts_.micro_batches, kTieGradient, i),
                               t.staging.raw(), t.staging.nbytes(),
                               "receive of a tied weight's gradient"));
      Tensor grad = tparams_->grad(t.id);
      add_inplace(t.staging.f32(), grad.f32(), grad.numel());
    }
  }
}

// The owner's updated values of each tied weight go to its user, which takes them before it
// next reads them (settle_tied_values).
void MeshStrategy::send_updated_ties() {
  const int s = stage();
  for (size_t i = 0; i < ties_.size(); ++i) {
    Tie& t = ties_[i];
    const Tensor value = tparams_->param(t.id);
    if (t.owner == s) {
      post_send(pipe_, t.user, tag(0, kTieValue, i), value.raw(), value.nbytes(),
                "send of a tied weight's values", sends_);
    } else if (t.user == s) {
      t.value_recv = start_receive(pipe_, t.owner, tag(0, kTieValue, i), value.raw(),
                                   value.nbytes(), "receive of a tied weight's values");
      t.value_pending = true;
    }
  }
}

void MeshStrategy::settle_tied_values() {
  for (Tie& t : ties_)
    if (t.value_pending) wait_timed(t.value_recv), t.value_pending = false;
}

}  // namespace braid::parallel
