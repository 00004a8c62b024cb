// What the three examples share, written against braid's public headers only: their flags,
// Fashion-MNIST as a rank's loader, and the evaluation a hand-written program does itself
// (every rank scores its shard of the test split, the tallies summed over ranks).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "data/sources.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "parallel/strategy.h"

namespace example {

// --steps N (the step cap), --data DIR (Fashion-MNIST's IDX files), --checkpoint DIR.
struct Flags {
  int64_t steps = 300;
  std::string data = braid::data::kFashionMnistDir;
  std::string checkpoint = "custom_loop_checkpoint";
};

inline Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--steps" && has_value) {
      f.steps = std::atoll(argv[++i]);
    } else if (a == "--data" && has_value) {
      f.data = argv[++i];
    } else if (a == "--checkpoint" && has_value) {
      f.checkpoint = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--data DIR] [--checkpoint DIR]\n", argv[0]);
      std::exit(2);
    }
  }
  return f;
}

// Fashion-MNIST's `split` as normalised f32 images [B, 28, 28, 1] and i32 labels [B].
inline std::shared_ptr<const braid::data::Source> fashion_mnist(const std::string& dir,
                                                                braid::data::Split split) {
  auto images = std::make_shared<const braid::data::ImageDataset>(
      braid::data::load_fashion_mnist(dir, split));
  return std::make_shared<braid::data::ImageSource>(images);
}

// This rank's share of every training step: `batch` images a rank, shuffled by epoch, the
// ranks' shares disjoint (the distributed sampler of data/sampler.h).
inline braid::data::LoaderOptions train_options(int64_t batch, const braid::parallel::Strategy& s) {
  braid::data::LoaderOptions o;
  o.batch = batch;
  o.drop_last = true;
  o.seed = 1;
  o.rank = s.rank();
  o.world = s.world_size();
  return o;
}

// The next batch of `loader`, starting the next epoch when one ends.
inline const braid::data::Batch& next_batch(braid::data::Loader& loader, int64_t& epoch) {
  const braid::data::Batch* b = loader.next();
  if (b == nullptr) {
    loader.start_epoch(++epoch);
    b = loader.next();
  }
  BRAID_CHECK(b != nullptr, "the training split holds no whole batch");
  return *b;
}

// Accuracy of the strategy's model on the test split: each rank forwards its shard in
// evaluation mode (no dropout, BatchNorm's running statistics) and counts its hits; the
// counts are summed over ranks, so every rank returns the same figure. Collective: every
// rank calls it at the same point, between steps.
inline double test_accuracy(braid::parallel::Strategy& s,
                            const std::shared_ptr<const braid::data::Source>& test) {
  s.synchronize();  // every rank holds the same, whole parameters
  braid::data::Loader loader(test,
                             braid::data::sharded_eval_options(256, s.rank(), s.world_size()));
  loader.start_epoch(0);
  braid::nn::Module& model = s.module();
  const std::unique_ptr<braid::nn::Cache> cache = model.make_cache();
  braid::nn::ForwardContext ctx;
  ctx.mode = braid::nn::Mode::eval;
  double tally[2] = {0, 0};  // correct, counted
  while (const braid::data::Batch* b = loader.next()) {
    const braid::Tensor& logits = model.forward(b->inputs, *cache, ctx);  // [B, 10]
    const braid::nn::LossResult r = braid::nn::softmax_cross_entropy(logits, b->targets, nullptr);
    tally[0] += static_cast<double>(r.correct);
    tally[1] += static_cast<double>(r.count);
  }
  s.sum_over_ranks(tally, 2, "test accuracy");
  return tally[1] > 0 ? tally[0] / tally[1] : 0.0;
}

}  // namespace example
