// The kernel cache (train/kernel_cache.h) and a job's start (train/job_kernels.h): timed
// choices saved are read back (the file opens with its magic and version); a save adds to
// what another process saved and never repeats itself; a corrupt cache is ignored and
// rewritten, a newer one left alone; a job's start takes the cache on a process alone and
// on a job's ranks, but not in deterministic mode, and sets how new shapes are decided.
#include "train/kernel_cache.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "comm/inproc_ranks.h"
#include "core/checksum.h"
#include "core/gemm.h"
#include "temp_dir.h"
#include "train/job_kernels.h"

namespace braid::train {
namespace {

using braid::testing::TempDir;
using nlohmann::json;

const GemmShape kA{false, true, 24, 40, 56}, kB{true, false, 32, 16, 48};

// Multiplies one product of `s` (which measures it under OnMiss::measure).
void multiply(const GemmShape& s) {
  const std::vector<float> A(static_cast<size_t>(s.M * s.K), 0.5f),
      B(static_cast<size_t>(s.K * s.N), 0.25f);
  std::vector<float> C(static_cast<size_t>(s.M * s.N));
  sgemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, A.data(), B.data(), 0.0f, C.data());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A cache in a fresh directory, empty tables and timing on a miss; no cache afterwards.
class KernelCache : public ::testing::Test {
 protected:
  void SetUp() override {
    reset();
    set_kernel_cache_dir(tmp_.path());
  }
  void TearDown() override {
    reset();
    set_kernel_cache_dir("");
  }
  static void reset() {
    set_gemm_policy(GemmPolicy::automatic);
    nn::set_conv_policy(nn::ConvPolicy::automatic);
    set_on_miss(OnMiss::measure);
    clear_gemm_choices();
    nn::clear_conv_choices();
  }
  // A cache holding kA as `method`, as another process would have saved it.
  void cache_a_as(GemmMethod method) {
    const GemmChoice c{kA, method, {1e-6, 2e-6, 3e-6, 4e-6}, ChoiceOrigin::timed};
    const std::string text = kernel_choices_json({{c}, {}}).dump();
    std::ofstream(kernel_cache_path()) << json{
        {"magic", kKernelCacheMagic},
        {"version", kKernelCacheVersion},
        {"machine", kernel_cache_machine()},
        {"xxh64", hex64(xxh64(text.data(), text.size()))},
        {"choices", json::parse(text)}}.dump();
  }
  TempDir tmp_;
};

TEST_F(KernelCache, SavedMeasurementsAreReadBack) {
  EXPECT_TRUE(read_kernel_cache().gemm.empty());  // none yet
  multiply(kA);
  multiply(kB);
  EXPECT_EQ(save_kernel_measurements(), 2);
  EXPECT_EQ(save_kernel_measurements(), 0) << "nothing new, nothing written";
  const std::string text = read_text(kernel_cache_path());
  EXPECT_TRUE(text.starts_with("{\n \"magic\": \"braid-kernel-cache\",\n \"version\": 1,")) << text;
  const KernelChoices back = read_kernel_cache();
  ASSERT_EQ(back.gemm.size(), 2u);
  for (const GemmChoice& c : back.gemm) {
    EXPECT_EQ(c.origin, ChoiceOrigin::given);
    EXPECT_EQ(c.method, chosen_gemm_method(c.shape)) << c.shape.str();
  }
}

TEST_F(KernelCache, ASaveAddsToAnotherProcesssAndKeepsItsChoices) {
  const GemmMethod theirs{GemmLibrary::openblas, true};
  cache_a_as(theirs);
  set_on_miss(OnMiss::rule_and_measure);  // as a job's rank: the rule computes, the timing is kept
  multiply(kA);
  multiply(kB);
  EXPECT_EQ(save_kernel_measurements(), 1);  // kB only: kA was cached already
  const KernelChoices back = read_kernel_cache();
  ASSERT_EQ(back.gemm.size(), 2u);
  for (const GemmChoice& c : back.gemm)
    if (c.shape == kA) {
      EXPECT_EQ(c.method, theirs);
    }
}

TEST_F(KernelCache, ACorruptCacheIsIgnoredAndRewritten) {
  const GemmMethod cached{GemmLibrary::openblas, true};
  cache_a_as(cached);
  ASSERT_EQ(read_kernel_cache().gemm.size(), 1u);
  // One flipped choice: the checksum no longer matches.
  std::string text = read_text(kernel_cache_path());
  const size_t at = text.find("\"openblas\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 10, "\"onednn\"");
  std::ofstream(kernel_cache_path()) << text;
  EXPECT_TRUE(read_kernel_cache().gemm.empty());
  for (const std::string garbage : {"", "{\"magic\": \"braid-kernel-cache\", \"vers", "[1, 2]",
                                    "{\"magic\": \"something else\", \"version\": 1}"}) {
    std::ofstream(kernel_cache_path()) << garbage;
    EXPECT_TRUE(read_kernel_cache().gemm.empty()) << garbage;
  }
  multiply(kB);
  EXPECT_EQ(save_kernel_measurements(), 1);
  const KernelChoices back = read_kernel_cache();
  ASSERT_EQ(back.gemm.size(), 1u);
  EXPECT_EQ(back.gemm[0].shape, kB);
}

TEST_F(KernelCache, ANewerVersionIsLeftAlone) {
  const std::string newer = R"({"magic": "braid-kernel-cache", "version": 2, "whatever": []})";
  std::ofstream(kernel_cache_path()) << newer;
  EXPECT_TRUE(read_kernel_cache().gemm.empty());
  multiply(kA);
  EXPECT_EQ(save_kernel_measurements(), 0);
  EXPECT_EQ(read_text(kernel_cache_path()), newer);
}

TEST_F(KernelCache, AJobStartsFromTheCacheUnlessDeterministic) {
  const GemmMethod cached{GemmLibrary::openblas, true};
  cache_a_as(cached);
  TrainConfig config;
  config.deterministic = true;
  start_job_kernels(config, nullptr);
  EXPECT_EQ(on_miss(), OnMiss::rule);
  EXPECT_FALSE(chosen_gemm_method(kA).has_value()) << "deterministic mode read the cache";

  config.deterministic = false;
  start_job_kernels(config, nullptr);
  EXPECT_EQ(on_miss(), OnMiss::measure);
  EXPECT_EQ(chosen_gemm_method(kA), cached);

  reset();
  comm::testing::rethrow_first(comm::testing::run_group(2, [&](comm::Group& world) {
    start_job_kernels(config, &world);
    EXPECT_EQ(on_miss(), OnMiss::rule_and_measure);
    EXPECT_EQ(chosen_gemm_method(kA), cached);
  }));
  set_kernel_cache_dir("");  // several ranks without a cache: nobody keeps a timing
  comm::testing::rethrow_first(comm::testing::run_group(2, [&](comm::Group& world) {
    start_job_kernels(config, &world);
    EXPECT_EQ(on_miss(), OnMiss::rule);
  }));
}

}  // namespace
}  // namespace braid::train
