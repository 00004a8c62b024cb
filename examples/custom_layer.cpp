// A layer of your own, trained by DDP.
//
// ScaleShift is y = x * gamma + beta per feature (a LayerNorm without the normalisation):
// two parameter vectors of its own, declared into the model's flat buffers like any
// built-in layer's, so DDP's buckets, checkpoints and every strategy see them with no
// change. The model is Flatten -> Linear(784, 128) -> ScaleShift(128) -> ReLU ->
// Linear(128, 10) on Fashion-MNIST.
//
//   ./custom_layer [--steps N]                      one process (a world of 1)
//   braid launch -n 2 -- ./custom_layer [--steps N] two ranks, each on half of every step
#include <cstdio>
#include <memory>
#include <string>

#include "data/loader.h"
#include "example_common.h"
#include "launch/job.h"
#include "nn/activations.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "parallel/ddp.h"

namespace {

using braid::Shape;
using braid::Tensor;
namespace nn = braid::nn;

class ScaleShift : public nn::Module {
 public:
  explicit ScaleShift(int64_t features) : features_(features) {}

  std::string_view kind() const override { return "ScaleShift"; }

  // Parameters get PyTorch-style names ("2.gamma") and live in the strategy's flat
  // buffers; the layer keeps only their ids. No weight decay on either, as for a norm's.
  void declare(nn::ParamSet& params, const std::string& prefix) override {
    params_ = &params;
    gamma_ = params.declare(prefix + "gamma", Shape{features_}, /*decay=*/false);
    beta_ = params.declare(prefix + "beta", Shape{features_}, /*decay=*/false);
  }

  // The identity to start with. The strategy calls it on every rank with the same seed
  // (and DDP then takes rank 0's values anyway).
  void init(braid::Rng&) override {
    float* g = params_->param(gamma_).f32();
    float* b = params_->param(beta_).f32();
    for (int64_t j = 0; j < features_; ++j) {
      g[j] = 1.0f;
      b[j] = 0.0f;
    }
  }

  Shape output_shape(const Shape& in) const override {
    BRAID_CHECK(in.rank() >= 1 && in[-1] == features_, "ScaleShift(", features_,
                ") got input shape ", in.str());
    return in;
  }

  // x [N, F] -> out [N, F]. The input stays alive until backward (Module's contract), so
  // the cache keeps a handle to it rather than a copy.
  const Tensor& forward(const Tensor& x, nn::Cache& cache, const nn::ForwardContext&) override {
    const Shape out_shape = output_shape(x.shape());
    cache.x = x;
    cache.out.ensure(out_shape);  // reused from the last step: no allocation
    const int64_t rows = x.numel() / features_;
    const float* g = params_->param(gamma_).f32();
    const float* b = params_->param(beta_).f32();
    const float* in = x.f32();
    float* out = cache.out.f32();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < features_; ++j)
        out[i * features_ + j] = in[i * features_ + j] * g[j] + b[j];
    return cache.out;
  }

  // dy [N, F]: dgamma += sum_i dy * x, dbeta += sum_i dy (added into the gradient views,
  // never overwritten: ParamSet::grad zeroes them at the first use of a step), and
  // dx = dy * gamma when the layer below needs it.
  const Tensor& backward(const Tensor& dy, nn::Cache& cache, bool need_dx) override {
    const int64_t rows = dy.numel() / features_;
    const float* x = cache.x.f32();
    const float* d = dy.f32();
    float* dg = params_->grad(gamma_).f32();
    float* db = params_->grad(beta_).f32();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < features_; ++j) {
        dg[j] += d[i * features_ + j] * x[i * features_ + j];
        db[j] += d[i * features_ + j];
      }
    if (!need_dx) return nn::no_grad();
    cache.dx.ensure(dy.shape());
    const float* g = params_->param(gamma_).f32();
    float* dx = cache.dx.f32();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < features_; ++j) dx[i * features_ + j] = d[i * features_ + j] * g[j];
    return cache.dx;
  }

 private:
  int64_t features_;
  nn::ParamSet* params_ = nullptr;
  nn::ParamSet::Id gamma_ = 0, beta_ = 0;
};

std::unique_ptr<nn::Module> make_model() {
  auto model = std::make_unique<nn::Sequential>();
  model->add(std::make_unique<nn::Flatten>());
  model->add(std::make_unique<nn::Linear>(28 * 28, 128));
  model->add(std::make_unique<ScaleShift>(128));
  model->add(std::make_unique<nn::ReLU>());
  model->add(std::make_unique<nn::Linear>(128, 10));
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  const example::Flags flags = example::parse_flags(argc, argv);
  try {
    // This rank's place in the job `braid launch` started (alone: a world of 1). The job
    // outlives the strategy that talks over its group.
    braid::launch::Job job = braid::launch::join_job();

    braid::parallel::StepOptions options;
    options.optimizer.name = "sgd";  // momentum 0.9 by default
    options.seed = 7;                // the same initial weights on every rank
    braid::parallel::Ddp ddp(make_model(), options, job.world);

    auto train = example::fashion_mnist(flags.data, braid::data::Split::train);
    auto test = example::fashion_mnist(flags.data, braid::data::Split::test);
    braid::data::Loader loader(train, example::train_options(64, ddp));
    loader.start_epoch(0);
    int64_t epoch = 0;
    for (int64_t step = 0; step < flags.steps; ++step) {
      const double loss = ddp.step(example::next_batch(loader, epoch), 0.05f, step);
      if (ddp.rank() == 0 && (step % 50 == 0 || step + 1 == flags.steps))
        std::printf("step %lld loss %.4f\n", static_cast<long long>(step), loss);
    }
    const double accuracy = example::test_accuracy(ddp, test);
    if (ddp.rank() == 0)
      std::printf("custom_layer: %d rank(s), %lld steps, test accuracy %.4f\n", ddp.world_size(),
                  static_cast<long long>(flags.steps), accuracy);
    ddp.finish();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_layer: %s\n", e.what());
    return 1;
  }
}
