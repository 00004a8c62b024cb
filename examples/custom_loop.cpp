// A training loop of your own over DDP: its own learning-rate schedule (linear warm-up,
// then cosine decay), its own logging (the loss averaged over ranks, steps a second), an
// evaluation, and a checkpoint saved by rank 0 with train::save_checkpoint and read back
// by every rank with train::load_checkpoint.
//
// The strategy seam keeps the loop free of communication: Ddp::step does the forward,
// backward, the gradients' allreduce and the update; everything around it is yours. The
// checkpoint holds the full logical layout (PyTorch's state_dict names), so it loads into
// any world size or strategy.
//
//   ./custom_loop [--steps N] [--checkpoint DIR]
//   braid launch -n 2 -- ./custom_loop [--steps N] [--checkpoint DIR]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <vector>

#include "data/loader.h"
#include "example_common.h"
#include "launch/job.h"
#include "nn/activations.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "parallel/ddp.h"
#include "train/checkpoint.h"

namespace {

namespace nn = braid::nn;
namespace train = braid::train;

std::unique_ptr<nn::Module> make_model() {
  auto model = std::make_unique<nn::Sequential>();
  model->add(std::make_unique<nn::Flatten>());
  model->add(std::make_unique<nn::Linear>(28 * 28, 256));
  model->add(std::make_unique<nn::ReLU>());
  model->add(std::make_unique<nn::Linear>(256, 10));
  return model;
}

// The schedule: `warmup` steps from 0 up to `peak`, then a half cosine down to 0 at `total`.
float learning_rate(int64_t step, int64_t total, float peak) {
  const int64_t warmup = std::max<int64_t>(1, total / 10);
  if (step < warmup) return peak * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const double progress = static_cast<double>(step - warmup) / std::max<int64_t>(1, total - warmup);
  return static_cast<float>(0.5 * peak * (1.0 + std::cos(std::numbers::pi * progress)));
}

}  // namespace

int main(int argc, char** argv) {
  const example::Flags flags = example::parse_flags(argc, argv);
  try {
    braid::launch::Job job = braid::launch::join_job();  // alone: a world of 1
    braid::parallel::StepOptions options;
    options.optimizer.name = "sgd";
    options.optimizer.nesterov = true;
    options.clip_grad_norm = 5.0f;  // DDP clips by the norm of the reduced gradient
    options.seed = 11;
    braid::parallel::Ddp ddp(make_model(), options, job.world);
    const bool chief = ddp.rank() == 0;

    auto train_split = example::fashion_mnist(flags.data, braid::data::Split::train);
    auto test_split = example::fashion_mnist(flags.data, braid::data::Split::test);
    braid::data::Loader loader(train_split, example::train_options(64, ddp));
    loader.start_epoch(0);
    int64_t epoch = 0;

    // Logging: every `every` steps, the mean loss of those steps over every rank. The sum
    // over ranks is collective, so every rank calls it at the same steps.
    const int64_t every = 50;
    double window[2] = {0, 0};  // loss sum, steps
    auto started = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < flags.steps; ++step) {
      const float lr = learning_rate(step, flags.steps, 0.1f);
      window[0] += ddp.step(example::next_batch(loader, epoch), lr, step);
      window[1] += 1;
      if ((step + 1) % every == 0 || step + 1 == flags.steps) {
        ddp.sum_over_ranks(window, 2, "loss log");
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        if (chief)
          std::printf("step %4lld  lr %.4f  loss %.4f  %.0f steps/s\n",
                      static_cast<long long>(step + 1), lr, window[0] / window[1],
                      window[1] / ddp.world_size() / seconds);
        window[0] = window[1] = 0;
        started = std::chrono::steady_clock::now();
      }
    }
    const double accuracy = example::test_accuracy(ddp, test_split);
    if (chief)
      std::printf("after %lld steps: test accuracy %.4f\n", static_cast<long long>(flags.steps),
                  accuracy);

    // The checkpoint: every rank makes the state whole (DDP: updates a step left pending),
    // rank 0 writes it, and a sum over ranks (a barrier) makes the others wait for the
    // directory before they read it.
    ddp.gather_for_checkpoint();
    if (chief) {
      std::vector<braid::train::NamedTensor> optimizer_state;
      for (const auto& [name, tensor] : ddp.optimizer_state())
        optimizer_state.push_back({name, tensor});
      train::save_checkpoint(flags.checkpoint, ddp.params(), optimizer_state,
                             {{"step", flags.steps}, {"epoch", epoch}, {"accuracy", accuracy}});
      std::printf("checkpoint saved to %s\n", flags.checkpoint.c_str());
    }
    double barrier = 0;
    ddp.sum_over_ranks(&barrier, 1, "checkpoint saved");

    // Reading it back: wipe the live weights, then load the checkpoint on every rank as a
    // resumed run would (the weights, the optimizer's state, then one rank's copy to all).
    std::fill_n(ddp.params().params(), ddp.params().size(), 0.0f);
    ddp.prepare_to_load();
    const train::LoadedCheckpoint loaded = train::load_checkpoint(flags.checkpoint, ddp.params());
    braid::optim::NamedTensors state;
    for (const auto& t : loaded.optimizer_state) state.emplace_back(t.name, t.tensor);
    ddp.load_optimizer_state(state);
    ddp.sync_parameters();
    const double reloaded = example::test_accuracy(ddp, test_split);
    if (chief)
      std::printf(
          "custom_loop: %d rank(s), checkpoint of step %lld read back, test accuracy %.4f\n",
          ddp.world_size(), static_cast<long long>(loaded.train_state["step"].get<int64_t>()),
          reloaded);
    BRAID_CHECK(reloaded == accuracy, "the checkpoint read back scores ", reloaded, ", not ",
                accuracy);
    ddp.finish();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_loop: %s\n", e.what());
    return 1;
  }
}
