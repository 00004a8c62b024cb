// One two-rank data-parallel `braid train` run, the same binary and flags whichever launcher
// starts it (braid launch, torchrun, mpirun, srun, ranks started by hand in network
// namespaces), and what every such run must show: exit 0, DDP over 2 ranks, rank 0 alone
// printing the progress, evaluation and "done" lines, one writer of metrics and checkpoint,
// and the same weights as the same run under `braid launch -n 2`.
//
// Why bitwise equal weights are the right reference: with 2 ranks every reduced element is
// a + b (or b + a, the same float), halved exactly, so transport, algorithm and launcher
// cannot change a bit; a launcher whose ranks trained apart or twice would.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid_process.h"
#include "fashion_mnist_data.h"
#include "temp_dir.h"

namespace braid::testing {

// A small MLP (28x28 -> 32 -> 10, about 25,000 parameters), written into `dir`: a step
// takes well under a millisecond, so a run of 30 steps is quick even under TSan.
inline std::string write_tiny_mlp(const TempDir& dir) {
  const std::string path = dir.file("tiny_mlp.json");
  std::ofstream(path) << R"({"input": [28, 28, 1], "layers": [
      {"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"},
      {"type": "linear", "out_features": 10}]})";
  return path;
}

// `braid train ...`: binary and flags of every run here, 30 steps of batch 32 per rank.
inline std::vector<std::string> ddp_train_command(const std::string& model,
                                                  const std::string& out) {
  return {BRAID_BINARY, "train",       "--model", model,       "--batch", "32",    "--max-steps",
          "30",         "--log-every", "10",      "--threads", "1",       "--out", out};
}

// What a rank started by another launcher than `braid launch` needs from the user: the
// job's secret, and here a deadline so that a broken run fails instead of hanging.
inline std::map<std::string, std::string> job_vars() {
  return {{"BRAID_SECRET", "00112233445566778899aabbccddeeff"}, {"BRAID_TIMEOUT_S", "60"}};
}

// A port nobody listens on now (the kernel's next ephemeral one), for a store whose
// address must be known before the ranks start.
inline int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// `name`'s path on PATH, or empty.
inline std::string find_on_path(const std::string& name) {
  const char* path = ::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline int count_lines(const std::string& path) {
  const std::string text = read_bytes(path);
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// How a launcher marks each rank's output: the text it puts before rank 0's and rank 1's
// lines (srun --label "0: ", mpirun --tag-output "[1,0]<stdout>:", torchrun --tee
// "[default0]:", braid launch "[rank 0] ").
struct RankTags {
  std::string rank0, rank1;
};

// `line` occurs once in `output`, and the nearest rank tag before it is rank 0's.
inline ::testing::AssertionResult printed_once_by_rank_zero(const std::string& output,
                                                            const std::string& line,
                                                            const RankTags& tags) {
  const int n = Process::occurrences(output, line);
  if (n != 1)
    return ::testing::AssertionFailure()
           << "'" << line << "' printed " << n << " times, not once, in:\n"
           << output;
  const size_t at = output.find(line);
  const size_t by0 = output.rfind(tags.rank0, at), by1 = output.rfind(tags.rank1, at);
  if (by0 == std::string::npos || (by1 != std::string::npos && by1 > by0))
    return ::testing::AssertionFailure()
           << "'" << line << "' was not printed by rank 0 ('" << tags.rank0 << "') in:\n"
           << output;
  return ::testing::AssertionSuccess();
}

// The run's progress, evaluation and end lines, each once and from rank 0 (with
// --log-every 10 rank 0 prints steps 10, 20, 30; a rank 1 that printed would double them).
inline void expect_rank_zero_alone_printed(const std::string& output, const RankTags& tags) {
  EXPECT_TRUE(contains(output, "30 steps of batch 32 x 2 ranks")) << output;
  EXPECT_TRUE(contains(output, "strategy ddp")) << output;
  for (const char* line : {"step 10/30", "step 30/30", "accuracy ", "done: 30 steps"})
    EXPECT_TRUE(printed_once_by_rank_zero(output, line, tags));
}

// The same run under `braid launch -n 2`, made once per test program when first asked for.
struct ReferenceRun {
  TempDir dir;
  std::string out, output;
  int code = -1;
};

inline const ReferenceRun& reference_run() {
  static const std::unique_ptr<ReferenceRun> ref = [] {
    auto r = std::make_unique<ReferenceRun>();
    r->out = r->dir.file("out");
    std::vector<std::string> args = {BRAID_BINARY, "launch", "-n", "2", "--"};
    for (const std::string& a : ddp_train_command(write_tiny_mlp(r->dir), r->out))
      args.push_back(a);
    Process p(args, {{"BRAID_TIMEOUT_S", "60"}});
    r->code = p.finish();
    r->output = p.output();
    return r;
  }();
  return *ref;
}

// One writer: the metrics hold rank 0's records alone (the reference's count; a second
// writer would append its own), one checkpoint with no leftovers of a second save over
// it, and the reference's weights.
inline void expect_one_writer_and_reference_weights(const std::string& out) {
  const ReferenceRun& ref = reference_run();
  ASSERT_EQ(ref.code, 0) << "the reference run under braid launch failed:\n" << ref.output;
  const int lines = count_lines(ref.out + "/metrics.jsonl");
  EXPECT_EQ(lines, 4);  // three progress records and the evaluation
  EXPECT_EQ(count_lines(out + "/metrics.jsonl"), lines) << read_bytes(out + "/metrics.jsonl");
  EXPECT_TRUE(std::filesystem::exists(out + "/config.json"));
  EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.previous"));
  EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.partial"));
  const std::string weights = read_bytes(out + "/checkpoint/model.safetensors");
  EXPECT_FALSE(weights.empty()) << "no checkpoint in " << out;
  EXPECT_TRUE(weights == read_bytes(ref.out + "/checkpoint/model.safetensors"))
      << "the weights differ from the same run under braid launch -n 2";
}

}  // namespace braid::testing
