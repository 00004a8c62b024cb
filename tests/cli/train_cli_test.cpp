// `braid train` and `braid eval` as a user (or a scheduler) runs them: real processes, real
// signals, real files. Exit codes, error lines and what lands in --out.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "same_checkpoint.h"
#include "temp_dir.h"
#include "train/safetensors.h"

namespace {

namespace fs = std::filesystem;
using braid::testing::TempDir;
using nlohmann::json;

using Result = braid::testing::BraidResult;
using braid::testing::read_bytes;
using braid::testing::run_braid;
using braid::testing::same_checkpoint;

int count_lines(const std::string& path) {
  const std::string text = read_bytes(path);
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  output: " << text << "\n  lacks:  " << part;
}

// `braid train ARGS` as a child process whose output the test reads line by line, as a
// scheduler's or a person's terminal would.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv{const_cast<char*>(BRAID_BINARY)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(BRAID_BINARY, argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_) std::fclose(out_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Reads output until a line containing `part`; false at end of output.
  bool wait_for(const std::string& part) {
    char line[4096];
    while (std::fgets(line, sizeof line, out_)) {
      output_ += line;
      if (std::strstr(line, part.c_str())) return true;
    }
    return false;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  // The wait status, after reading the rest of the output.
  int wait() {
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, out_)) output_.append(buf, n);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  FILE* out_ = nullptr;
  std::string output_;
};

// The flags of every run below: a small MLP (28x28 -> 32 -> 10, about 25,000 parameters:
// a step takes well under a millisecond) on Fashion-MNIST, Adam, a constant schedule. Its
// spec is written into `tmp`.
std::vector<std::string> tiny_mlp_args(const TempDir& tmp) {
  std::ofstream(tmp.file("tiny_mlp.json")) << R"({"input": [28, 28, 1], "layers": [
      {"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"},
      {"type": "linear", "out_features": 10}]})";
  return {"--model",     tmp.file("tiny_mlp.json"),
          "--batch",     "16",
          "--optimizer", "adam",
          "--lr",        "0.003",
          "--schedule",  "constant",
          "--threads",   "1"};
}

std::string tiny_mlp(const TempDir& tmp) {
  std::string flags;
  for (const std::string& a : tiny_mlp_args(tmp)) flags += a + " ";
  return flags;
}

// Under a launcher braid train runs data-parallel (strategy auto = ddp): both ranks train,
// rank 0 alone prints the progress and writes the run; every rank gets the same
// evaluation. The one-process strategy asked for in a job of 2 is refused, naming it.
TEST(TrainCli, UnderLaunchWithTwoRanksRunsDdpAndOnlyRankZeroWrites) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string train = "launch -n 2 -- " + std::string(BRAID_BINARY) + " train " +
                            tiny_mlp(tmp) + "--steps 4 --log-every 2 --out " + tmp.file("out");
  Result r = run_braid(train);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strategy ddp")) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0] done: 4 steps")) << r.output;
  EXPECT_FALSE(contains(r.output, "[rank 1] done:")) << r.output;
  EXPECT_EQ(count_lines(tmp.file("out") + "/metrics.jsonl"), 3);
  EXPECT_TRUE(fs::exists(tmp.file("out") + "/checkpoint/model.safetensors"));

  r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train " + tiny_mlp(tmp) +
                "--steps 4 --strategy single --out " + tmp.file("single"));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strategy 'single' runs one process, but this job has 2 ranks"))
      << r.output;
  EXPECT_FALSE(fs::exists(tmp.file("single")));
}

// Local SGD as a user runs it: two real ranks, two synchronous warm-up steps, then local
// steps averaged every 3. The checkpoint holds the model every rank agreed on (the trainer
// synchronizes before saving), so a run stopped at step 5 and resumed to 10 ends with the
// bits of a run that went to 10 at once, checkpointing at 5 too.
TEST(TrainCli, LocalSgdUnderLaunchResumesToTheUninterruptedRunsBits) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string train = "launch -n 2 -- " + std::string(BRAID_BINARY) + " train " +
                            tiny_mlp(tmp) +
                            "--strategy local_sgd --local-sgd.period 3 "
                            "--local-sgd.start-step 2 --checkpoint-every 5 ";
  Result r = run_braid(train + "--steps 10 --out " + tmp.file("straight"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strategy local_sgd")) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0] done: 10 steps")) << r.output;
  r = run_braid(train + "--steps 5 --out " + tmp.file("stopped"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train --resume " +
                tmp.file("stopped") + " --steps 10");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "at step 5")) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("stopped/checkpoint"), tmp.file("straight/checkpoint")));
}

// Point 4: an --out that holds a run is refused unless --resume or --overwrite; with
// --overwrite the metrics start afresh instead of appending.
TEST(TrainCli, ExistingOutIsRefusedUnlessResumeOrOverwrite) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.file("out");
  const std::string train = "train " + tiny_mlp(tmp) + "--steps 2 --log-every 1 --out " + out;
  Result r = run_braid(train);
  ASSERT_EQ(r.code, 0) << r.output;
  const int lines = count_lines(out + "/metrics.jsonl");
  const std::string weights = read_bytes(out + "/checkpoint/model.safetensors");
  ASSERT_EQ(lines, 3);  // two train records and the evaluation

  r = run_braid(train);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "--out '" + out +
                                     "' already holds a run (checkpoint, "
                                     "metrics.jsonl); pass --resume"));
  EXPECT_TRUE(contains(r.output, "--overwrite to replace it"));
  EXPECT_EQ(count_lines(out + "/metrics.jsonl"), lines);
  EXPECT_EQ(read_bytes(out + "/checkpoint/model.safetensors"), weights);

  r = run_braid(train + " --seed 5 --overwrite");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_lines(out + "/metrics.jsonl"), lines);
  EXPECT_NE(read_bytes(out + "/checkpoint/model.safetensors"), weights);
}

// Point 8: --resume alone continues under the config saved with the checkpoint (here the
// mlp, not the default cnn); a flag (--steps) overrides it. The result is bitwise the
// uninterrupted run's.
TEST(TrainCli, ResumeAloneUsesTheSavedConfig) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  Result r = run_braid("train " + tiny_mlp(tmp) + "--steps 6 --out " + tmp.file("a"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_braid("train --resume " + tmp.file("a") + " --steps 12");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "at step 6"));
  r = run_braid("train " + tiny_mlp(tmp) + "--steps 12 --out " + tmp.file("b"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("a/checkpoint"), tmp.file("b/checkpoint")));
}

// Point 9: SIGTERM (a scheduler's preemption) finishes the step, saves a checkpoint at
// that boundary, says where and how to continue, and exits 128 + SIGTERM. Resumed, the
// run reaches the uninterrupted run's bits.
TEST(TrainCli, SigtermCheckpointsAtTheStepBoundaryAndResumes) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.file("stopped");
  // The child prints a line a step into a pipe this test stops reading after the first:
  // once the pipe fills (64 KiB, about a thousand lines) the child blocks, so the signal
  // always lands long before step 3000, however slow this test is scheduled.
  const std::string total = "3000";
  int status = 0;
  std::string output;
  {
    std::vector<std::string> args{"train"};
    for (const std::string& a : tiny_mlp_args(tmp)) args.push_back(a);
    for (const char* a : {"--log-every", "1", "--out"}) args.push_back(a);
    args.push_back(out);
    args.push_back("--steps");
    args.push_back(total);
    Child child(args);
    ASSERT_TRUE(child.wait_for("step 1/" + total)) << child.output();
    child.signal(SIGTERM);
    status = child.wait();
    output = child.output();
  }
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << output;
  EXPECT_TRUE(contains(output, "SIGTERM: stopping after this step with a checkpoint"));
  EXPECT_TRUE(contains(output, "stopped by SIGTERM at step "));
  EXPECT_TRUE(contains(output, "continue with: braid train --resume " + out + "/checkpoint"));
  EXPECT_FALSE(contains(output, "error:")) << "a stop asked for is no error";
  json state;
  std::ifstream(out + "/checkpoint/state.json") >> state;
  const int64_t step = state["train_state"]["step"].get<int64_t>();
  EXPECT_GT(step, 0);
  ASSERT_LT(step, 3000) << "the run finished before the signal: the test proves nothing";

  // The saved config carries everything but the flags given here.
  Result r = run_braid("train --resume " + out + "/checkpoint --log-every 1000");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "at step " + std::to_string(step)));
  r = run_braid("train " + tiny_mlp(tmp) + "--steps " + total + " --log-every 1000 --out " +
                tmp.file("straight"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(same_checkpoint(out + "/checkpoint", tmp.file("straight/checkpoint")));
}

// `timeout` (and Slurm) deliver one stop request twice, back to back: it is one request, so
// the run still ends at the step boundary with a checkpoint.
TEST(TrainCli, TheSameSignalTwiceAtOnceIsOneRequest) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.file("out");
  std::vector<std::string> args{"train"};
  for (const std::string& a : tiny_mlp_args(tmp)) args.push_back(a);
  for (const char* a : {"--steps", "3000", "--log-every", "1", "--out"}) args.push_back(a);
  args.push_back(out);
  Child child(args);
  ASSERT_TRUE(child.wait_for("step 1/")) << child.output();
  child.signal(SIGTERM);
  child.signal(SIGTERM);
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status)) << "killed by the echo: " << child.output();
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << child.output();
  EXPECT_TRUE(fs::exists(out + "/checkpoint/state.json")) << child.output();
}

// A second signal does not wait for the step: the process ends at once, by that signal.
TEST(TrainCli, SecondSignalStopsAtOnce) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  std::vector<std::string> args{"train"};
  for (const std::string& a : tiny_mlp_args(tmp)) args.push_back(a);
  for (const char* a : {"--epochs", "100", "--log-every", "1", "--out"}) args.push_back(a);
  args.push_back(tmp.file("out"));
  Child child(args);
  ASSERT_TRUE(child.wait_for("step 1/")) << child.output();
  // Back to back, before the step that the first one waits for can end and checkpoint.
  child.signal(SIGINT);
  child.signal(SIGTERM);
  const int status = child.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << child.output();
  EXPECT_TRUE(WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT) << child.output();
}

// Point 5: a batch larger than the training split fails at once, naming 'batch', before
// the loaders allocate slots for it (1000000 x 784 floats would be gigabytes).
TEST(TrainCli, BatchLargerThanTheDataFailsFast) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  // 1 GiB of address space: enough for the datasets, far from enough for the slots. (Not
  // under AddressSanitizer, which reserves terabytes of address space for its shadow.)
#if defined(__SANITIZE_ADDRESS__)
  const std::string limit = "";
#else
  const std::string limit = "ulimit -v 1048576 &&";
#endif
  const Result r = run_braid("train --model mlp --batch 1000000 --out " + tmp.file("out"), limit);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "60000 samples, fewer than one batch of 1000000; lower 'batch'"));
  EXPECT_FALSE(fs::exists(tmp.file("out")));
}

// A .npy file as numpy.save writes it (format 1.0).
std::string npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

// Point 11: a config's npy paths are relative to the config file, not to where braid runs.
TEST(TrainCli, ConfigDataPathsResolveAgainstTheConfigFolder) {
  const TempDir tmp;
  fs::create_directories(tmp.file("project/data"));
  std::vector<float> x(64 * 4);
  std::vector<int32_t> y(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 3);
  for (const char* split : {"train", "test"}) {
    std::ofstream(tmp.file("project/data/") + split + "_x.npy") << npy("<f4", "(64, 4)", raw(x));
    std::ofstream(tmp.file("project/data/") + split + "_y.npy") << npy("<i4", "(64,)", raw(y));
  }
  std::ofstream(tmp.file("project/config.json")) << json{
      {"model", {{"input", {4}}, {"layers", {{{"type", "linear"}, {"out_features", 3}}}}}},
      {"dataset", "npy"},
      {"npy", {"data/train_x.npy", "data/train_y.npy", "data/test_x.npy", "data/test_y.npy"}},
      {"batch", 16},
      {"max_steps", 3},
      {"out", tmp.file("out")}};
  const Result r = run_braid("train --config " + tmp.file("project/config.json"), "cd / &&");
  ASSERT_EQ(r.code, 0) << r.output;
  json saved;
  std::ifstream(tmp.file("out/config.json")) >> saved;
  EXPECT_EQ(saved["npy"][0], tmp.file("project/data/train_x.npy"));
}

// Point 15: braid eval takes a run directory, its checkpoint directory, or a bare
// safetensors file with --model; braid train --init-from starts from such weights, checked
// by name and shape like any checkpoint.
TEST(TrainCli, EvalAndInitFromTakeRunDirsAndBareSafetensors) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string run_dir = tmp.file("a");
  Result r = run_braid("train " + tiny_mlp(tmp) + "--steps 300 --out " + run_dir);
  ASSERT_EQ(r.code, 0) << r.output;
  const Result by_checkpoint = run_braid("eval --checkpoint " + run_dir + "/checkpoint");
  ASSERT_EQ(by_checkpoint.code, 0) << by_checkpoint.output;
  EXPECT_TRUE(contains(by_checkpoint.output, "over 10000 samples"));
  r = run_braid("eval --checkpoint " + run_dir);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, by_checkpoint.output);
  const std::string weights = run_dir + "/checkpoint/model.safetensors";
  r = run_braid("eval --checkpoint " + weights + " --model " + tmp.file("tiny_mlp.json"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, by_checkpoint.output);
  r = run_braid("eval --checkpoint " + weights);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "bare safetensors file"));
  EXPECT_TRUE(contains(r.output, "pass --model"));
  r = run_braid("eval --checkpoint " + weights + " --model cnn");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "missing tensors"));

  // Fine-tuning from the trained weights (eval loss about 0.57): the first step's loss is
  // the trained model's, far below a fresh model's ln(10) = 2.3.
  r = run_braid("train " + tiny_mlp(tmp) + "--steps 1 --log-every 1 --init-from " + weights +
                " --out " + tmp.file("tuned"));
  ASSERT_EQ(r.code, 0) << r.output;
  json first;
  std::ifstream(tmp.file("tuned/metrics.jsonl")) >> first;
  EXPECT_LT(first["loss"].get<double>(), 1.5) << first.dump();
  r = run_braid("train --model cnn --steps 1 --init-from " + weights + " --out " +
                tmp.file("wrong"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "safetensors file '" + weights + "'"));
  EXPECT_TRUE(contains(r.output, "unexpected tensors"));
}

// --init-from with --rename: the same weights under a PyTorch module's names ("fc1.weight"
// for braid's "1.weight") load once renamed, and the run starts where the trained one ended.
TEST(TrainCli, InitFromRenamesAStateDictsTensors) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  Result r = run_braid("train " + tiny_mlp(tmp) + "--steps 300 --out " + tmp.file("a"));
  ASSERT_EQ(r.code, 0) << r.output;
  braid::train::SafetensorsFile file =
      braid::train::read_safetensors(tmp.file("a/checkpoint/model.safetensors"));
  std::vector<std::string> names;
  for (braid::train::NamedTensor& t : file.tensors) {
    names.push_back(t.name);
    t.name = (t.name[0] == '1' ? "fc1" : "fc2") + t.name.substr(1);
  }
  ASSERT_EQ(names, (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias"}));
  const std::string torch_names = tmp.file("torch.safetensors");
  braid::train::write_safetensors(torch_names, file.tensors);

  r = run_braid("train " + tiny_mlp(tmp) + "--steps 1 --init-from " + torch_names + " --out " +
                tmp.file("plain"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "missing tensors")) << r.output;
  r = run_braid("train " + tiny_mlp(tmp) + "--steps 1 --log-every 1 --init-from " + torch_names +
                " --rename fc1.=1. --rename fc2.=3. --out " + tmp.file("renamed"));
  ASSERT_EQ(r.code, 0) << r.output;
  json first;
  std::ifstream(tmp.file("renamed/metrics.jsonl")) >> first;
  EXPECT_LT(first["loss"].get<double>(), 1.5) << first.dump();  // trained: a fresh model's is 2.3
  r = run_braid("train " + tiny_mlp(tmp) + "--steps 1 --init-from " + torch_names +
                " --rename fc1.=1. --rename fc3.=3. --out " + tmp.file("typo"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "no tensor's name starts with 'fc3.'")) << r.output;
  r = run_braid("train " + tiny_mlp(tmp) + "--steps 1 --rename fc1.=1. --out " + tmp.file("x"));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "--init-from")) << r.output;
}

}  // namespace
