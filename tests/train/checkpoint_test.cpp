#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/rng.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "test_files.h"

namespace braid::train {
namespace {

using nlohmann::json;
using testing::contains;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// Two Linear layers in a Sequential plus BatchNorm-like buffers declared by hand, so the
// file carries parameters (with padding in the flat buffer) and an I64 rank-0 buffer.
struct Model {
  nn::Sequential net;
  nn::ParamSet params;

  Model(int64_t in, int64_t hidden, int64_t out, uint64_t seed, bool buffers = true,
        DType count_dtype = DType::i64) {
    net.add(std::make_unique<nn::Linear>(in, hidden));
    net.add(std::make_unique<nn::Linear>(hidden, out));
    net.declare(params, "");
    if (buffers) {
      Tensor mean = Tensor::empty({out});
      for (int64_t i = 0; i < out; ++i) mean.f32()[i] = static_cast<float>(seed) + 0.5f * i;
      params.declare_buffer("2.running_mean", mean);
      Tensor count = Tensor::empty({}, count_dtype);
      if (count_dtype == DType::i64) count.data<int64_t>()[0] = static_cast<int64_t>(seed) * 100;
      params.declare_buffer("2.num_batches_tracked", count);
    }
    params.allocate();
    Rng rng(seed);
    net.init(rng);
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

::testing::AssertionResult same_state(const nn::ParamSet& a, const nn::ParamSet& b) {
  const auto sa = state_dict(a), sb = state_dict(b);
  if (sa.size() != sb.size()) return ::testing::AssertionFailure() << "different tensor counts";
  for (size_t i = 0; i < sa.size(); ++i)
    if (sa[i].name != sb[i].name || !same_bytes(sa[i].tensor, sb[i].tensor))
      return ::testing::AssertionFailure() << "tensor '" << sa[i].name << "' differs";
  return ::testing::AssertionSuccess();
}

std::vector<NamedTensor> optimizer_state(const nn::ParamSet& params) {
  Tensor moment = Tensor::empty({3, 4});
  for (int i = 0; i < 12; ++i) moment.f32()[i] = 0.125f * i - params.params()[i];
  Tensor step = Tensor::empty({}, DType::i64);
  step.data<int64_t>()[0] = 42;
  return {{"0.weight.exp_avg", moment}, {"step", step}};
}

const json kTrainState = {{"step", 42},
                          {"epoch", 3},
                          {"rng", {{"seed", 7}, {"offset", 1234}}},
                          {"sampler", {{"position", 96}}},
                          {"config", {{"lr", 0.01}, {"model", "mlp"}}}};

TEST(Checkpoint, RoundTripRestoresWeightsBuffersOptimizerAndTrainState) {
  TempDir dir;
  const Model saved(4, 3, 2, /*seed=*/1);
  const auto opt = optimizer_state(saved.params);
  save_checkpoint(dir.path(), saved.params, opt, kTrainState);

  Model fresh(4, 3, 2, /*seed=*/2);
  ASSERT_FALSE(same_state(saved.params, fresh.params));
  const LoadedCheckpoint loaded = load_checkpoint(dir.path(), fresh.params);
  EXPECT_TRUE(same_state(saved.params, fresh.params));
  EXPECT_EQ(loaded.train_state, kTrainState);
  ASSERT_EQ(loaded.optimizer_state.size(), opt.size());
  for (size_t i = 0; i < opt.size(); ++i) {
    EXPECT_EQ(loaded.optimizer_state[i].name, opt[i].name);
    EXPECT_TRUE(same_bytes(loaded.optimizer_state[i].tensor, opt[i].tensor)) << opt[i].name;
  }
  // Nothing but the three files: no temporaries left behind.
  EXPECT_EQ(dir.list(),
            (std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"}));
}

TEST(Checkpoint, ModelFileHoldsPyTorchStateDictNamesShapesAndDtypes) {
  TempDir dir;
  const Model model(4, 3, 2, 1);
  save_checkpoint(dir.path(), model.params, {}, json::object());
  const SafetensorsFile file = read_safetensors(dir.file("model.safetensors"));
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"0.weight", {3, 4}}, {"0.bias", {3}},         {"1.weight", {2, 3}},
      {"1.bias", {2}},      {"2.running_mean", {2}}, {"2.num_batches_tracked", {}}};
  ASSERT_EQ(file.tensors.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(file.tensors[i].name, expected[i].first);
    EXPECT_EQ(file.tensors[i].tensor.shape(), expected[i].second) << expected[i].first;
  }
  EXPECT_EQ(file.find("0.weight")->dtype(), DType::f32);
  EXPECT_EQ(file.find("2.num_batches_tracked")->dtype(), DType::i64);
  EXPECT_EQ(file.find("2.num_batches_tracked")->data<int64_t>()[0], 100);
  // Copied out of the padded flat buffer: exactly the parameter's values.
  EXPECT_EQ(
      std::memcmp(file.find("1.weight")->raw(), model.params.param(2).raw(), 6 * sizeof(float)), 0);
  EXPECT_EQ(file.metadata.at("format"), "pt");

  const json state = json::parse(read_bytes(dir.file("state.json")));
  EXPECT_EQ(state["format"], "braid-checkpoint");
  EXPECT_EQ(state["version"], 1);
  const std::string model_bytes = read_bytes(dir.file("model.safetensors"));
  EXPECT_EQ(state["files"]["model.safetensors"]["bytes"], model_bytes.size());
  EXPECT_EQ(state["files"]["model.safetensors"]["xxh64"],
            hex64(xxh64(model_bytes.data(), model_bytes.size())));
}

TEST(Checkpoint, WrongShapeNamesTheTensorAndBothShapesAndLeavesTheModelAlone) {
  TempDir dir;
  save_checkpoint(dir.path(), Model(4, 3, 2, 1).params, {}, json::object());
  Model other(4, 5, 2, 2);
  const Model untouched(4, 5, 2, 2);
  const std::string message = error_of([&] { load_checkpoint(dir.path(), other.params); });
  EXPECT_TRUE(contains(message, "checkpoint '" + dir.file("model.safetensors") + "': "));
  EXPECT_TRUE(contains(message, "tensor '0.weight' has shape [3, 4] but the model expects [5, 4]"));
  EXPECT_TRUE(contains(message, "tensor '0.bias' has shape [3] but the model expects [5]"));
  EXPECT_TRUE(contains(message, "tensor '1.weight' has shape [2, 3] but the model expects [2, 5]"));
  EXPECT_TRUE(same_state(other.params, untouched.params));
}

TEST(Checkpoint, MissingUnexpectedAndWrongDtypeTensorsAreNamed) {
  TempDir dir;
  save_checkpoint(dir.path(), Model(4, 3, 2, 1).params, {}, json::object());

  Model no_buffers(4, 3, 2, 2, /*buffers=*/false);
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), no_buffers.params); }),
                       "unexpected tensors (the file has them, the model does not): "
                       "'2.running_mean', '2.num_batches_tracked'"));

  save_checkpoint(dir.path(), Model(4, 3, 2, 1, /*buffers=*/false).params, {}, json::object());
  Model with_buffers(4, 3, 2, 2);
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), with_buffers.params); }),
                       "missing tensors (the model has them, the file does not): "
                       "'2.running_mean', '2.num_batches_tracked'"));

  save_checkpoint(dir.path(), Model(4, 3, 2, 1).params, {}, json::object());
  Model float_count(4, 3, 2, 2, true, DType::f32);
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), float_count.params); }),
                       "tensor '2.num_batches_tracked' is I64 but the model expects F32"));
}

TEST(Checkpoint, CorruptOrMixedFilesAreCaughtThroughStateJson) {
  TempDir dir, other;
  const Model a(4, 3, 2, 1), b(4, 3, 2, 2);
  save_checkpoint(dir.path(), a.params, optimizer_state(a.params), kTrainState);
  save_checkpoint(other.path(), b.params, optimizer_state(b.params), kTrainState);
  Model target(4, 3, 2, 3);
  const Model untouched(4, 3, 2, 3);
  const std::string model_path = dir.file("model.safetensors");
  const std::string good = read_bytes(model_path);

  // A flipped bit anywhere, header included.
  std::string bad = good;
  bad[20] ^= 1;
  write_bytes(model_path, bad);
  std::string message = error_of([&] { load_checkpoint(dir.path(), target.params); });
  EXPECT_TRUE(
      contains(message, "checkpoint '" + model_path + "' does not match its record in state.json"));

  // A crash between files: a valid model.safetensors from another save.
  write_bytes(model_path, read_bytes(other.file("model.safetensors")));
  message = error_of([&] { load_checkpoint(dir.path(), target.params); });
  EXPECT_TRUE(contains(message, "does not match its record in state.json"));
  EXPECT_TRUE(same_state(target.params, untouched.params));

  write_bytes(model_path, good);
  write_bytes(dir.file("optimizer.safetensors"), read_bytes(other.file("optimizer.safetensors")));
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), target.params); }),
                       "optimizer.safetensors' does not match its record"));
  EXPECT_TRUE(same_state(target.params, untouched.params));
}

TEST(Checkpoint, StateJsonProblemsAreClearErrors) {
  TempDir dir;
  const Model model(4, 3, 2, 1);
  Model target(4, 3, 2, 2);
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), target.params); }),
                       "has no state.json: it is not a checkpoint, or its save did not finish"));
  save_checkpoint(dir.path(), model.params, {}, kTrainState);
  const std::string state_path = dir.file("state.json");
  json state = json::parse(read_bytes(state_path));

  state["version"] = 2;
  write_bytes(state_path, state.dump());
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), target.params); }),
                       "format version 2, written by a newer braid"));
  state["version"] = 1;
  state["files"].erase("optimizer.safetensors");
  write_bytes(state_path, state.dump());
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), target.params); }),
                       "lacks a valid record of optimizer.safetensors"));
  write_bytes(state_path, "{\"format\": ");
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), target.params); }),
                       state_path + "' is not valid JSON"));
  write_bytes(state_path, "{}");
  EXPECT_TRUE(contains(error_of([&] { load_checkpoint(dir.path(), target.params); }),
                       "is not a braid checkpoint state file"));
}

TEST(Checkpoint, SavingAgainReplacesTheCheckpointAndLeavesNoTemporaries) {
  TempDir dir;
  const Model first(4, 3, 2, 1), second(4, 3, 2, 2);
  save_checkpoint(dir.file("ckpt"), first.params, optimizer_state(first.params), {{"step", 1}});
  save_checkpoint(dir.file("ckpt"), second.params, optimizer_state(second.params), {{"step", 2}});
  EXPECT_EQ(dir.list("ckpt"),
            (std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"}));
  Model target(4, 3, 2, 3);
  EXPECT_EQ(load_checkpoint(dir.file("ckpt"), target.params).train_state["step"], 2);
  EXPECT_TRUE(same_state(target.params, second.params));
}

// A file as torch's safetensors.save_file(model.state_dict()) writes it: no braid
// metadata, tensors packed in its own order.
TEST(Checkpoint, LoadsModelWeightsFromAPlainSafetensorsFile) {
  TempDir dir;
  const Model source(4, 3, 2, 1);
  json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  auto tensors = state_dict(source.params);
  std::reverse(tensors.begin(), tensors.end());  // I64 first, as torch orders by alignment
  for (const NamedTensor& t : tensors) {
    header[t.name] = {{"dtype", std::string(safetensors_dtype(t.tensor.dtype()))},
                      {"shape", t.tensor.shape().to_vector()},
                      {"data_offsets", {data.size(), data.size() + t.tensor.nbytes()}}};
    data.append(static_cast<const char*>(t.tensor.raw()), t.tensor.nbytes());
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  const std::string path = dir.file("from_torch.safetensors");
  write_bytes(path, std::string(reinterpret_cast<const char*>(&n), 8) + text + data);

  Model target(4, 3, 2, 2);
  load_model_weights(path, target.params);
  EXPECT_TRUE(same_state(target.params, source.params));
  Model wrong(4, 3, 3, 2);
  EXPECT_TRUE(contains(error_of([&] { load_model_weights(path, wrong.params); }),
                       "safetensors file '" + path +
                           "': tensor '1.weight' has shape [2, 3] but "
                           "the model expects [3, 3]"));
}

// What a user passes: a checkpoint directory, or the run directory holding checkpoint/.
// When only a save's siblings survive (a crash between the renames of a save), the error
// names them with their step and says to pass one instead.
TEST(Checkpoint, FindsTheRunsCheckpointAndNamesSurvivingSiblings) {
  TempDir dir;
  const Model model(4, 3, 2, 1);
  save_checkpoint(dir.file("run/checkpoint"), model.params, {}, kTrainState);
  EXPECT_EQ(find_checkpoint_dir(dir.file("run")), dir.file("run/checkpoint"));
  EXPECT_EQ(find_checkpoint_dir(dir.file("run/checkpoint")), dir.file("run/checkpoint"));
  EXPECT_EQ(read_train_state(dir.file("run/checkpoint")), kTrainState);

  std::filesystem::rename(dir.file("run/checkpoint"), dir.file("run/checkpoint.previous"));
  for (const std::string& passed : {dir.file("run"), dir.file("run/checkpoint")}) {
    const std::string e = error_of([&] { find_checkpoint_dir(passed); });
    EXPECT_TRUE(contains(e, "'" + dir.file("run/checkpoint.previous") + "' (step 42) survives"));
    EXPECT_TRUE(contains(e, "checkpoint '" + dir.file("run/checkpoint") + "' is missing"));
    EXPECT_TRUE(contains(e, "pass that directory instead"));
  }
  EXPECT_EQ(find_checkpoint_dir(dir.file("run/checkpoint.previous")),
            dir.file("run/checkpoint.previous"));
  // Nothing at all: an IoError that says what to pass.
  EXPECT_THROW(find_checkpoint_dir(dir.file("none")), IoError);
  EXPECT_TRUE(contains(error_of([&] { find_checkpoint_dir(dir.file("none")); }), "no state.json"));
}

}  // namespace
}  // namespace braid::train
