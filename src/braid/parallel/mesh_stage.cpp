// MeshStrategy's pipeline stage at work (mesh_strategy.h): one micro-batch's forward or
// backward on this stage, the point-to-point messages around it, and the tied weights.
#include "parallel/mesh_stage.h"

#include "core/kernels.h"
#include "core/timer.h"
#include "nn/loss.h"
#include "parallel/mesh_strategy.h"

namespace braid::parallel {
namespace {

enum TagKind : uint32_t { kActivation = 0, kGradient = 1, kTieGradient = 2, kTieValue = 3 };

// Point-to-point tags: the position above, then the receiving chunk (or tie), the kind.
uint32_t tag(int position, uint32_t kind, size_t chunk_or_tie = 0) {
  return (static_cast<uint32_t>(position) << 12) | (static_cast<uint32_t>(chunk_or_tie) << 2) |
         kind;
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

void MeshStrategy::run_units_forward(Chunk& c, Slot& slot, const Tensor& x,
                                     const nn::ForwardContext& ctx) {
  auto& caches = popts_.recompute ? c.recompute_caches : slot.caches;
  const Tensor* h = &x;
  for (size_t u = c.first_unit; u < c.end_unit; ++u)
    h = &units_[u].module->forward(*h, *caches[u - c.first_unit], ctx);
}

double MeshStrategy::loss_and_gradient(const Tensor& logits, const Tensor& targets, float scale) {
  if (vocab_ > 0)  // the GPT cut by width: each rank holds a slice of the vocabulary
    return nn::vocab_parallel_cross_entropy(logits, targets, vocab_first_, vocab_, *reducer_, &dy_,
                                            loss_work_, {.grad_scale = scale})
        .loss;
  return nn::softmax_cross_entropy(
             logits, targets, &dy_,
             {.grad_scale = scale, .label_smoothing = options_.label_smoothing})
      .loss;
}

void MeshStrategy::forward_action(Chunk& c, int position, int64_t step) {
  const int k = order_[static_cast<size_t>(position)];
  const bool first = c.index == 0, last = c.index == chunk_count() - 1;
  Slot& slot = c.slots[static_cast<size_t>(position) % c.slots.size()];
  Stopwatch free;
  wait_all(slot.sends);  // the slot's memory is free again
  ptimes_.waiting += free.elapsed();
  if (first) {
    slot.x = &micro_[k].inputs;
  } else {
    slot.input.ensure(c.in_shape, DType::f32, MemCategory::activations);
    wait_timed(start_receive(pipe_, stage_of_chunk(c.index - 1),
                             tag(position, kActivation, static_cast<size_t>(c.index)),
                             slot.input.raw(), slot.input.nbytes(),
                             {"receive of the activation of micro-batch", k}));
    slot.x = &slot.input;
  }
  if (last) {
    // The last chunk's forward runs with its loss and backward (recompute) or is kept in
    // the slot's caches until then.
    if (popts_.recompute) return;
    Stopwatch w;
    run_units_forward(c, slot, *slot.x, train_context(step, k));
    times_.forward += w.elapsed();
    return;
  }
  Stopwatch w;
  if (popts_.recompute) wait_all(c.recompute_sends);
  run_units_forward(c, slot, *slot.x, train_context(step, k));
  const Tensor& out = popts_.recompute ? c.recompute_caches.back()->out : slot.caches.back()->out;
  const Tensor* to_send = &out;
  if (popts_.recompute) {
    slot.output.ensure(out.shape(), DType::f32, MemCategory::activations);
    slot.output.copy_from(out);
    to_send = &slot.output;
  }
  times_.forward += w.elapsed();
  post_send(pipe_, stage_of_chunk(c.index + 1),
            tag(position, kActivation, static_cast<size_t>(c.index + 1)), to_send->raw(),
            to_send->nbytes(), {"send of the activation of micro-batch", k}, slot.sends);
}

void MeshStrategy::backward_action(Chunk& c, int position, int64_t step) {
  const int k = order_[static_cast<size_t>(position)];
  const bool ordered = options_.deterministic && popts_.micro_batches > 1;
  const bool last = c.index == chunk_count() - 1;
  Slot& slot = c.slots[static_cast<size_t>(position) % c.slots.size()];
  if (!c.backward_here) return;
  nn::ParamSet& params = *tparams_;
  // Deterministic mode sums each micro-batch's gradient from zero: this chunk's range.
  if (ordered && position > 0) {
    params.zero_grads(c.first_id, c.end_id);
    for (const Tie& t : ties_)  // the tied weight this chunk's units write first
      if (t.user_chunk == c.index) params.zero_grads(t.id, t.id + 1);
  }
  for (Tie& t : ties_)  // the tied gradient of the last micro-batch is written again below
    if (t.user_chunk == c.index) wait_all(t.grad_sends);
  if (!last) {
    dy_.ensure(c.out_shape, DType::f32, MemCategory::activation_grads);
    wait_timed(start_receive(pipe_, stage_of_chunk(c.index + 1),
                             tag(position, kGradient, static_cast<size_t>(c.index)), dy_.raw(),
                             dy_.nbytes(), {"receive of the gradient of micro-batch", k}));
  }
  Stopwatch w;
  if (popts_.recompute) {
    wait_all(c.recompute_sends);
    run_units_forward(c, slot, *slot.x, train_context(step, k));
  }
  auto& caches = popts_.recompute ? c.recompute_caches : slot.caches;
  if (last)
    loss_sum_ += loss_and_gradient(caches.back()->out, micro_[k].targets,
                                   grad_scale_ * (scaler_ ? scaler_->scale() : 1.0f));
  const Tensor* g = &dy_;
  for (size_t u = c.end_unit; u-- > std::max(c.first_unit, first_learning_unit_);) {
    for (size_t i = 0; i < ties_.size(); ++i) {
      Tie& t = ties_[i];
      if (ordered && t.owner_chunk == c.index && t.owner_unit == u) {
        // One process: the user's gradient is written first, this unit adds to it.
        times_.backward += w.elapsed();
        wait_timed(start_receive(pipe_, t.user, tag(position, kTieGradient, i), t.staging.raw(),
                                 t.staging.nbytes(), {"receive of a tied weight's gradient", k}));
        w.lap();
        bool overwrite = false;
        Tensor grad = params.grad_for_write(t.id, overwrite);
        if (overwrite)
          grad.copy_from(t.staging);
        else
          add_inplace(t.staging.f32(), grad.f32(), grad.numel());
      }
    }
    g = &units_[u].module->backward(*g, *caches[u - c.first_unit], u > first_learning_unit_);
  }
  for (size_t i = 0; i < ties_.size(); ++i) {
    Tie& t = ties_[i];
    if (!ordered || t.user_chunk != c.index) continue;
    bool overwrite = false;
    const Tensor grad = params.grad_for_write(t.id, overwrite);
    post_send(pipe_, t.owner, tag(position, kTieGradient, i), grad.raw(), grad.nbytes(),
              {"send of a tied weight's gradient", k}, t.grad_sends);
  }
  if (ordered && c.end > c.begin) {
    float* grads = params.grads(c.first_id, c.end_id);
    c.micro_sum.add(position, grads + c.begin, grads + c.begin, 0, c.end - c.begin);
  }
  times_.backward += w.elapsed();
  if (c.sends_dx)
    post_send(pipe_, stage_of_chunk(c.index - 1),
              tag(position, kGradient, static_cast<size_t>(c.index - 1)), g->raw(), g->nbytes(),
              {"send of the gradient of micro-batch", k},
              popts_.recompute ? c.recompute_sends : slot.sends);
}

// Outside deterministic mode the user's gradient of a tied weight arrives once, summed over
// the micro-batches, and is added to the owner's.
void MeshStrategy::finish_ties_after_backward() {
  const int s = stage();  // a rank holds a tie's owner or user chunk, never both
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
