// A loss of your own, trained by ZeRO (stage 2: optimizer state and gradients sharded over
// the ranks).
//
// FocalLoss (Lin et al., 2017, "Focal Loss for Dense Object Detection") is cross-entropy
// scaled by (1 - p_t)^gamma, where p_t is the softmax probability of the true class: rows
// the model already gets right count for less. It is an nn::LossFunction, given through
// StepOptions::loss, so the strategy ends every forward pass in it and starts backward
// from the gradient it writes; nothing else changes.
//
//   ./custom_loss [--steps N]                      one process (a world of 1)
//   braid launch -n 2 -- ./custom_loss [--steps N] two ranks
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "data/loader.h"
#include "example_common.h"
#include "launch/job.h"
#include "nn/activations.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/loss_function.h"
#include "nn/sequential.h"
#include "parallel/zero.h"

namespace {

using braid::Tensor;
namespace nn = braid::nn;

class FocalLoss final : public nn::LossFunction {
 public:
  explicit FocalLoss(float gamma) : gamma_(gamma) {}
  std::string_view name() const override { return "focal"; }
  bool classifies() const override { return true; }  // LossResult::correct is meaningful

  // pred: logits [N, C]; targets: i32 labels [N] in [0, C). The loss of a row is
  //   FL = -(1 - p)^g log p,   p = softmax(z)[t],
  // and its gradient by the chain rule through p (dp/dz_j = p (1[j = t] - p_j)):
  //   dFL/dz_j = k (1[j = t] - p_j),   k = g (1 - p)^(g-1) p log p - (1 - p)^g,
  // which is softmax - onehot (cross-entropy's) at g = 0. The mean over rows is
  // returned; dpred receives grad_scale x its gradient.
  nn::LossResult compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                         float grad_scale) const override {
    const int64_t n = pred.shape()[0], c = pred.shape()[-1];
    BRAID_CHECK(targets.numel() == n, "focal loss: ", n, " rows of logits but ", targets.numel(),
                " labels");
    const float* z = pred.f32();
    const int32_t* labels = targets.data<int32_t>();
    if (dpred != nullptr) dpred->ensure(pred.shape());
    nn::LossResult r;
    r.count = n;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = z + i * c;
      const int32_t t = labels[i];
      BRAID_CHECK(t >= 0 && t < c, "focal loss: label ", t, " of row ", i, " is not in [0, ", c,
                  ")");
      // log-softmax with the row's maximum subtracted: never overflows.
      const int64_t argmax = std::max_element(row, row + c) - row;
      const double top = row[argmax];
      double sum = 0;
      for (int64_t j = 0; j < c; ++j) sum += std::exp(row[j] - top);
      const double log_p = row[t] - top - std::log(sum);
      const double p = std::exp(log_p);
      const double q = 1.0 - p;
      r.loss += -std::pow(q, gamma_) * log_p;
      r.correct += argmax == t ? 1 : 0;
      if (dpred != nullptr) {
        const double k = gamma_ * std::pow(q, gamma_ - 1) * p * log_p - std::pow(q, gamma_);
        const double scale = grad_scale / static_cast<double>(n);
        float* d = dpred->f32() + i * c;
        for (int64_t j = 0; j < c; ++j) {
          const double pj = std::exp(row[j] - top) / sum;
          d[j] = static_cast<float>(scale * k * ((j == t ? 1.0 : 0.0) - pj));
        }
      }
    }
    r.loss /= static_cast<double>(std::max<int64_t>(n, 1));
    return r;
  }

 private:
  float gamma_;
};

std::unique_ptr<nn::Module> make_model() {
  auto model = std::make_unique<nn::Sequential>();
  model->add(std::make_unique<nn::Flatten>());
  model->add(std::make_unique<nn::Linear>(28 * 28, 128));
  model->add(std::make_unique<nn::ReLU>());
  model->add(std::make_unique<nn::Linear>(128, 10));
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  const example::Flags flags = example::parse_flags(argc, argv);
  try {
    braid::launch::Job job = braid::launch::join_job();  // alone: a world of 1

    braid::parallel::StepOptions options;
    options.optimizer.name = "adamw";  // its two moments are what ZeRO shards
    options.optimizer.weight_decay = 0.01;
    options.seed = 7;
    options.loss = std::make_shared<FocalLoss>(2.0f);
    braid::parallel::ZeroOptions zero;
    zero.stage = 2;
    braid::parallel::Zero strategy(make_model(), options, job.world, zero);

    auto train = example::fashion_mnist(flags.data, braid::data::Split::train);
    auto test = example::fashion_mnist(flags.data, braid::data::Split::test);
    braid::data::Loader loader(train, example::train_options(64, strategy));
    loader.start_epoch(0);
    int64_t epoch = 0;
    for (int64_t step = 0; step < flags.steps; ++step) {
      const double loss = strategy.step(example::next_batch(loader, epoch), 1e-3f, step);
      if (strategy.rank() == 0 && (step % 50 == 0 || step + 1 == flags.steps))
        std::printf("step %lld focal loss %.4f\n", static_cast<long long>(step), loss);
    }
    const double accuracy = example::test_accuracy(strategy, test);
    if (strategy.rank() == 0)
      std::printf("custom_loss: %d rank(s), ZeRO stage %d, %lld steps, test accuracy %.4f\n",
                  strategy.world_size(), zero.stage, static_cast<long long>(flags.steps), accuracy);
    strategy.finish();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_loss: %s\n", e.what());
    return 1;
  }
}
