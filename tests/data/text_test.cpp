#include "data/text.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "data/test_files.h"

namespace braid::data {
namespace {

using testing_util::TempDir;
using testing_util::write_file;

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + i / 251) % 256);
  return s;
}

TEST(TextCorpus, SplitIsFloorNinetyPercent) {
  for (const auto& [n, train] : {std::pair{1000, 900}, std::pair{999, 899}, std::pair{10, 9},
                                 std::pair{1, 0}, std::pair{0, 0}}) {
    const TextCorpus c = TextCorpus::from_bytes(pattern(static_cast<size_t>(n)));
    EXPECT_EQ(c.size(), n);
    EXPECT_EQ(c.train_size(), train) << n;
    EXPECT_EQ(c.validation_size(), n - train) << n;
    if (n > 0) {
      EXPECT_EQ(c.validation()[0], c.bytes()[train]);
    }
  }
}

TEST(TextCorpus, TrainWindowsShiftTargetsByOne) {
  const std::string text = pattern(5000);
  const TextCorpus c = TextCorpus::from_bytes(text);
  const int64_t B = 6, T = 16;
  Tensor in = Tensor::empty({B, T}, DType::i32), tg = Tensor::empty({B, T}, DType::i32);
  Rng rng(42);
  c.sample_train_batch(rng, in, tg);
  Rng replay(42);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = c.draw_train_start(replay, T);
    ASSERT_LE(s + T + 1, c.train_size());
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(in.data<int32_t>()[b * T + t],
                static_cast<uint8_t>(text[static_cast<size_t>(s + t)]));
      EXPECT_EQ(tg.data<int32_t>()[b * T + t],
                static_cast<uint8_t>(text[static_cast<size_t>(s + t + 1)]));
    }
  }
}

TEST(TextCorpus, TrainStartsCoverTheWholeRange) {
  const TextCorpus c = TextCorpus::from_bytes(pattern(14));  // train 12 bytes
  const int64_t T = 4;
  std::set<int64_t> seen;
  Rng rng(1);
  for (int i = 0; i < 2000; ++i) {
    const int64_t s = c.draw_train_start(rng, T);
    ASSERT_GE(s, 0);
    ASSERT_LE(s + T + 1, c.train_size());
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 8u);  // starts 0..7 all reachable
  EXPECT_THROW(c.draw_train_start(rng, 12), Error);
}

TEST(TextCorpus, DeterministicGivenSeed) {
  const TextCorpus c = TextCorpus::from_bytes(pattern(5000));
  Tensor a = Tensor::empty({4, 8}, DType::i32), at = Tensor::empty({4, 8}, DType::i32);
  Tensor b = Tensor::empty({4, 8}, DType::i32), bt = Tensor::empty({4, 8}, DType::i32);
  Rng r1(7), r2(7), r3(8);
  c.sample_train_batch(r1, a, at);
  c.sample_train_batch(r2, b, bt);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  c.sample_train_batch(r3, b, bt);
  EXPECT_NE(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

TEST(TextCorpus, ValidationWindowsAreConsecutive) {
  const std::string text = pattern(1000);  // validation = bytes [900, 1000)
  const TextCorpus c = TextCorpus::from_bytes(text);
  const int64_t T = 9, B = 4;
  EXPECT_EQ(c.num_validation_windows(T), 11);  // floor(99 / 9): starts 0..90, 90+10 <= 100
  EXPECT_EQ(c.num_validation_windows(10), 9);  // floor(99 / 10): start 90 would need 101 bytes
  EXPECT_EQ(c.num_validation_batches(B, T), 3);
  Tensor in = Tensor::empty({B, T}, DType::i32), tg = Tensor::empty({B, T}, DType::i32);
  int64_t window = 0;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t rows = c.fill_validation_batch(i, in, tg);
    EXPECT_EQ(rows, i < 2 ? 4 : 3);
    for (int64_t r = 0; r < rows; ++r, ++window)
      for (int64_t t = 0; t < T; ++t) {
        const auto at = static_cast<size_t>(900 + window * T + t);
        ASSERT_EQ(in.data<int32_t>()[r * T + t], static_cast<uint8_t>(text[at]));
        ASSERT_EQ(tg.data<int32_t>()[r * T + t], static_cast<uint8_t>(text[at + 1]));
      }
  }
  EXPECT_EQ(window, 11);
  EXPECT_THROW(c.fill_validation_batch(3, in, tg), Error);
}

TEST(TextCorpus, FortuneFilesSkipsDotsSymlinksAndDirectories) {
  TempDir dir;
  write_file(dir.file("b"), "bravo\n");
  write_file(dir.file("a"), "alpha\n");
  write_file(dir.file("a.dat"), "index");
  std::filesystem::create_symlink(dir.file("a"), dir.file("a.u8"));
  std::filesystem::create_symlink(dir.file("b"), dir.file("link"));
  std::filesystem::create_directory(dir.file("sub"));
  EXPECT_EQ(TextCorpus::fortune_files(dir.path()),
            (std::vector<std::string>{dir.file("a"), dir.file("b")}));
  const TextCorpus c = TextCorpus::fortunes(dir.path());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(c.bytes()), static_cast<size_t>(c.size())),
            "alpha\nbravo\n");
}

TEST(TextCorpus, MissingFilesSayWhatToDo) {
  try {
    TextCorpus::fortunes("/nonexistent/fortunes");
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("fortunes package"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TextCorpus::from_files({"/nonexistent/file.txt"}), IoError);
}

TEST(TextCorpus, RealFortunes) {
  if (!std::filesystem::is_directory(kFortunesDir))
    GTEST_SKIP() << "no fortunes at " << kFortunesDir << " (apt-get install fortunes)";
  const auto files = TextCorpus::fortune_files();
  int64_t total = 0;
  for (const auto& f : files) {
    EXPECT_EQ(std::filesystem::path(f).filename().string().find('.'), std::string::npos) << f;
    total += static_cast<int64_t>(std::filesystem::file_size(f));
  }
  const TextCorpus c = TextCorpus::fortunes();
  EXPECT_EQ(c.size(), total);
  EXPECT_GT(c.size(), 100000);
  EXPECT_EQ(c.train_size(), c.size() * 9 / 10);
}

TEST(TextSources, LoaderTrainBatchesAreDeterministicWindows) {
  const std::string text = pattern(3000);
  auto corpus = std::make_shared<const TextCorpus>(TextCorpus::from_bytes(text));
  const int64_t T = 12;
  auto source = std::make_shared<TextTrainSource>(corpus, T);
  EXPECT_EQ(source->size(), (2700 - 1) / T);
  LoaderOptions o{.batch = 8, .seed = 5};
  Loader a(source, o), b(source, o);
  a.start_epoch(2);
  b.start_epoch(2);
  int64_t batches = 0;
  while (const Batch* x = a.next()) {
    const Batch* y = b.next();
    ASSERT_NE(y, nullptr);
    ASSERT_EQ(x->inputs.shape(), Shape({x->size, T}));
    EXPECT_EQ(std::memcmp(x->inputs.raw(), y->inputs.raw(), x->inputs.nbytes()), 0);
    const int32_t* in = x->inputs.data<int32_t>();
    const int32_t* tg = x->targets.data<int32_t>();
    for (int64_t r = 0; r < x->size; ++r)
      for (int64_t t = 0; t + 1 < T; ++t) ASSERT_EQ(tg[r * T + t], in[r * T + t + 1]);
    ++batches;
  }
  EXPECT_EQ(batches, a.batches_per_epoch());
}

TEST(TextSources, LoaderValidationMatchesFillValidationBatch) {
  auto corpus = std::make_shared<const TextCorpus>(TextCorpus::from_bytes(pattern(5000)));
  const int64_t T = 7, B = 5;
  Loader loader(std::make_shared<TextValidationSource>(corpus, T),
                LoaderOptions{.batch = B, .shuffle = false, .drop_last = false});
  loader.start_epoch(0);
  Tensor in = Tensor::empty({B, T}, DType::i32), tg = Tensor::empty({B, T}, DType::i32);
  int64_t i = 0;
  while (const Batch* batch = loader.next()) {
    const int64_t rows = corpus->fill_validation_batch(i++, in, tg);
    ASSERT_EQ(batch->size, rows);
    EXPECT_EQ(std::memcmp(batch->inputs.raw(), in.raw(), batch->inputs.nbytes()), 0);
    EXPECT_EQ(std::memcmp(batch->targets.raw(), tg.raw(), batch->targets.nbytes()), 0);
  }
  EXPECT_EQ(i, corpus->num_validation_batches(B, T));
}

}  // namespace
}  // namespace braid::data
