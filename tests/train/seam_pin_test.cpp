// Pins the one-process training step bit for bit: the parameters after a few steps of
// each path through the step (update fused into backward, update after clipping, a
// non-Sequential model, batch norm and dropout) hash to recorded values, so a change that
// moves a bit says so. Kernels differ by CPU (OpenBLAS picks one per core, braid's own by
// ISA), so the hashes are keyed by both. A CPU family with no pins FAILS, printing the
// hashes to add and how to record them: a pin that passes where it has nothing to compare
// hid a LayerNorm backward error on Zen 3 (gpt-tiny's hash moved; no pin held it). The
// run-time kernel choice is forced (OpenBLAS, im2col convolutions) so the pins do not
// depend on timing.
//
// History: first recorded at 722a788, before the strategy seam replaced Trainer's own
// step. Re-recorded when kernels became chosen at run time, after checking that the old
// fixed rule, fed through the new choice tables, still gave the old hashes; and again when
// test processes moved to one BLAS thread (tests/kernel_env.cpp: OpenBLAS splits a product
// differently on two threads; gpt-tiny's hash, whose GEMMs are small, did not move).
#include <cblas.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/checksum.h"
#include "core/cpu.h"
#include "core/gemm_choice.h"
#include "data/loader.h"
#include "nn/conv_choice.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using nlohmann::json;

struct Scenario {
  const char* name;
  TrainConfig config;
};

std::vector<Scenario> scenarios() {
  std::vector<Scenario> out;
  {
    TrainConfig c = config_from_json(json::object({{"model", "mlp"}}));
    c.batch = 16;
    c.optimizer.momentum = 0.9;
    out.push_back({"mlp-sgd-fused", c});
  }
  {
    TrainConfig c = config_from_json(json::object({{"model", "cnn"}}));
    c.batch = 8;
    c.clip_grad_norm = 0.5;
    // The cnn recipe when the pins were recorded (it is Adam since).
    c.optimizer.name = "sgd";
    c.optimizer.lr = 0.05;
    c.optimizer.momentum = 0.9;
    c.optimizer.weight_decay = 5e-4;
    c.schedule.warmup_steps = 200;
    out.push_back({"cnn-sgd-clip", c});
  }
  {
    TrainConfig c = config_from_json(json::object({{"model", "cnn-bn"}}));
    c.batch = 8;
    c.optimizer.name = "adamw";
    c.optimizer.lr = 1e-3;
    out.push_back({"cnn-bn-adamw", c});
  }
  {
    TrainConfig c = config_from_json(json::object({{"model", "gpt-tiny"}}));
    c.batch = 2;
    out.push_back({"gpt-tiny", c});
  }
  for (auto& s : out) {
    s.config.max_steps = 4;
    s.config.seed = 7;
  }
  return out;
}

std::string params_hash(const TrainConfig& config) {
  Trainer t(config, /*load_data=*/false);
  data::Batch batch;
  for (uint64_t step = 0; step < 4; ++step) {
    t.fill_random_batch(batch, 100 + step);
    t.train_step(batch);
  }
  const nn::ParamSet& p = t.params();
  Xxh64Stream h;
  h.update(p.params(), static_cast<size_t>(p.size()) * sizeof(float));
  for (const auto& b : p.buffers()) h.update(b.value.raw(), b.value.nbytes());
  return hex64(h.digest());
}

// key: "<openblas core>/<braid isa>" -> scenario -> hash.
const std::map<std::string, std::map<std::string, std::string>>& pins() {
  static const std::map<std::string, std::map<std::string, std::string>> p = {
      // AMD EPYC Zen 4 (AVX-512, AVX512_BF16), OpenBLAS on one thread and im2col forced.
      {"Cooperlake/avx512_bf16",
       {{"mlp-sgd-fused", "e7e4d1503cb8064d"},
        {"cnn-sgd-clip", "ec84acc6f2b474a8"},
        {"cnn-bn-adamw", "8ce48c1383c8dbd4"},
        {"gpt-tiny", "27b2c13e826340ac"}}},
      // AMD EPYC Zen 3 (AVX2), likewise. Recorded on Zen 4 from d52464c's sources, two
      // ways that agree: under QEMU 7.2's user-mode emulation of an EPYC-Milan
      // (qemu-x86_64 -cpu EPYC-Milan: OpenBLAS picks its Zen kernels, braid its AVX2 ones
      // and GCC's x86-64-v3 clones), and natively with OPENBLAS_CORETYPE=Zen and
      // nn::fast_math::isa_limit = avx2. Not yet confirmed on a real Zen 3.
      {"Zen/avx2",
       {{"mlp-sgd-fused", "719b756bcdd4baa1"},
        {"cnn-sgd-clip", "eab055e1a767080d"},
        {"cnn-bn-adamw", "909390112575a4c2"},
        {"gpt-tiny", "3832d214812261d0"}}},
  };
  return p;
}

// Forces the kernels for the test's duration.
struct ForcedKernels {
  ForcedKernels() {
    set_gemm_policy(GemmPolicy::openblas);
    nn::set_conv_policy(nn::ConvPolicy::gemm);
  }
  ~ForcedKernels() {
    set_gemm_policy(GemmPolicy::automatic);
    nn::set_conv_policy(nn::ConvPolicy::automatic);
  }
};

TEST(SeamPin, OneProcessTrainingIsBitwiseAsBeforeTheSeam) {
  const ForcedKernels forced;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The pins are the Release build's bits; a sanitizer build compiles the non-BLAS kernels
  // at another optimisation level (gpt-tiny's differ there), so it has nothing to compare.
  GTEST_SKIP() << "skipped: the pins are of the Release build, this is a sanitizer build";
#endif
  const std::string key =
      std::string(openblas_get_corename()) + "/" + std::string(isa_name(best_isa()));
  const auto found = pins().find(key);
  std::string hashes;
  for (const Scenario& s : scenarios()) {
    const std::string h = params_hash(s.config);
    EXPECT_EQ(h, params_hash(s.config)) << s.name << ": not reproducible";
    hashes += "{\"" + std::string(s.name) + "\", \"" + h + "\"}, ";
    if (found != pins().end()) {
      EXPECT_EQ(h, found->second.at(s.name)) << s.name << " on " << key;
    }
  }
  // Recording on the commit under test would pin whatever it computes, bugs included: the
  // hashes must come from the commit whose bits the other families' pins vouch for.
  if (found == pins().end()) {
    const std::string pinned = pins().begin()->second.begin()->second;
    ADD_FAILURE() << "no pinned hashes for this CPU family (" << key
                  << "), so nothing would notice a change of bits here. To pin it: check out "
                     "the commit that recorded the other families' (git log -1 --format=%h -S"
                  << pinned
                  << " -- tests/train/seam_pin_test.cpp), build it (scripts/build.sh release "
                     "test_train), run build/release/test_train --gtest_filter='SeamPin.*' on "
                     "this CPU, and add the line it prints to pins() here:\n      {\""
                  << key << "\", {" << hashes << "}},";
  }
}

}  // namespace
}  // namespace braid::train
