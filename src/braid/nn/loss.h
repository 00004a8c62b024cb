// Losses: plain functions that return the loss and, on request, write its gradient. They
// are not Modules: a loss ends the forward pass and starts the backward one in a single
// fused call, so the trainer hands dlogits straight to the model's backward.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace braid::nn {

struct LossResult {
  double loss = 0;      // mean over the counted rows (0 when none is counted)
  int64_t correct = 0;  // counted rows whose argmax (first maximum) equals the label
  int64_t count = 0;    // rows whose label is not -1
};

struct CrossEntropyOptions {
  float grad_scale = 1.0f;       // multiplies the gradient (loss scaling, 1/accumulation)
  float label_smoothing = 0.0f;  // eps in [0, 1): the target is (1 - eps) onehot + eps / C
};

// Cross-entropy on softmax, as torch.nn.CrossEntropyLoss(ignore_index=-1, reduction='mean',
// label_smoothing=eps).
//   logits [..., C] f32 (rank >= 2; leading dimensions are flattened into N rows)
//   labels i32 with N elements (any shape), each in [0, C) or -1 for "ignore this row":
//          an ignored row adds nothing to loss, correct or count, and gets zero gradient.
// When dlogits != nullptr it is ensure()d to logits' shape and receives
//   grad_scale * (softmax(logits) - target) / count, target = (1 - eps) onehot(label) + eps / C.
// Numerically stable (row max subtracted, log-sum-exp accumulated in double); one pass per
// row writes exp() straight into dlogits. Labels are validated before anything is written:
// a label outside [0, C) other than -1 is an error naming its row, its value and C.
LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                 const CrossEntropyOptions& options = {});

// softmax_cross_entropy over logits whose classes are split across the ranks of `reducer`
// (Megatron's vocabulary-parallel cross-entropy): this rank holds classes [first_class,
// first_class + C_local) of `classes`, as logits [..., C_local]; labels are global class
// ids, the same on every rank. Three collective reductions over rows (the row maxima; then
// the sums of exponentials, the label's logit and the argmax hits) give every rank the
// dense loss and its own columns of the dense gradient, without gathering the logits.
// `work` is caller-owned scratch (kept between steps). Label smoothing is not built.
class TensorReducer;
LossResult vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& labels,
                                        int64_t first_class, int64_t classes,
                                        TensorReducer& reducer, Tensor* dlogits, Tensor& work,
                                        const CrossEntropyOptions& options = {});

// Mean squared error over all elements, as torch.nn.MSELoss(reduction='mean'):
//   pred, target f32 of the same shape (no broadcasting: a mismatch is an error naming both).
// When dpred != nullptr it is ensure()d to pred's shape and receives
//   grad_scale * 2 * (pred - target) / numel.
// The sum is accumulated in double. An empty tensor has loss 0.
double mse_loss(const Tensor& pred, const Tensor& target, Tensor* dpred, float grad_scale = 1.0f);

}  // namespace braid::nn
