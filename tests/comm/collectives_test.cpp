// Every collective but allreduce (collectives_allreduce_test.cpp), swept over group sizes,
// counts, algorithms, dtypes, ops and roots against the dense reference, with results
// bitwise identical across ranks where all ranks get one; then the failure modes: ranks
// that disagree about the call, a dead peer, a stuck peer, bad options, and the hand-off
// to a CollectiveBackend.
#include "comm/collectives.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <mutex>
#include <vector>

#include "comm/collective_reference.h"
#include "comm/inproc_ranks.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;
using testing::check_copied;
using testing::check_reduced;
using testing::digest;
using testing::fill_input;
using testing::kSanitized;
using testing::message;
using testing::rethrow_first;
using testing::run_group;

constexpr size_t kAllCounts[] = {0, 1, 2, 7, 13, 100, 1000, 4099};
// The counts a sweep runs: all of them, or up to 100 in sanitizer builds.
std::vector<size_t> counts() {
  std::vector<size_t> c;
  for (size_t n : kAllCounts)
    if (!kSanitized || n <= 100) c.push_back(n);
  return c;
}
constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::bf16,
                                DType::f16, DType::i32, DType::i64};
constexpr DType kSizes[] = {DType::bf16, DType::f32, DType::i64};  // element sizes 2, 4, 8
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max,
                             ReduceOp::prod};

CollectiveOptions with(Algorithm a) {
  CollectiveOptions o;
  o.algorithm = a;
  return o;
}

// Collects failures from rank threads (at most a few per test) and the digests of
// results that every rank must share.
class Checker {
 public:
  explicit Checker(int n) : n_(n) {}
  void expect_ok(const std::string& bad, const std::string& what, int rank) {
    if (bad.empty()) return;
    std::lock_guard lock(mutex_);
    if (failures_++ < 8) ADD_FAILURE() << what << " on rank " << rank << ": " << bad;
  }
  // Every rank calls this for the same k in the same order.
  void record(size_t k, int rank, uint64_t d, const std::string& what) {
    std::lock_guard lock(mutex_);
    if (digests_.size() <= k) digests_.resize(k + 1), names_.resize(k + 1);
    digests_[k].resize(static_cast<size_t>(n_));
    digests_[k][static_cast<size_t>(rank)] = d;
    names_[k] = what;
  }
  void expect_identical() {
    for (size_t k = 0; k < digests_.size(); ++k)
      for (int r = 1; r < n_ && !digests_[k].empty(); ++r)
        if (digests_[k][static_cast<size_t>(r)] != digests_[k][0] && failures_++ < 8)
          ADD_FAILURE() << names_[k] << ": rank " << r << "'s result differs from rank 0's";
  }

 private:
  int n_;
  std::mutex mutex_;
  int failures_ = 0;
  std::vector<std::vector<uint64_t>> digests_;
  std::vector<std::string> names_;
};

std::string name(const char* call, Algorithm a, int n, size_t count, DType t, ReduceOp op,
                 int root = -1) {
  std::string s = std::string(call) + " (" + std::string(algorithm_name(a)) + ", " +
                  std::to_string(n) + " ranks, " + std::to_string(count) + " x " +
                  std::string(dtype_name(t)) + " " + std::string(reduce_op_name(op));
  if (root >= 0) s += ", root " + std::to_string(root);
  return s + ")";
}

class Sweep : public ::testing::TestWithParam<int> {};

TEST_P(Sweep, ReduceScatter) {
  const int n = GetParam();
  Checker check(n);
  auto errors = run_group(n, [&](Group& g) {
    uint32_t seed = 0;
    for (size_t count : counts())
      for (Algorithm a : {Algorithm::ring, Algorithm::direct, Algorithm::automatic})
        for (DType t : kAllDTypes)
          for (ReduceOp op : kOps) {
            const size_t es = dtype_size(t), total = count * static_cast<size_t>(n);
            std::vector<uint8_t> send(total * es + 1), recv(count * es + 1);
            fill_input(t, op, ++seed, g.rank(), 0, send.data(), total);
            reduce_scatter(g, send.data(), recv.data(), count, t, op, with(a));
            check.expect_ok(check_reduced(t, op, seed, n, static_cast<size_t>(g.rank()) * count,
                                          recv.data(), count),
                            name("reduce_scatter", a, n, count, t, op), g.rank());
          }
  });
  rethrow_first(errors);
}

TEST_P(Sweep, Allgather) {
  const int n = GetParam();
  Checker check(n);
  auto errors = run_group(n, [&](Group& g) {
    uint32_t seed = 0;
    size_t k = 0;
    for (size_t count : counts())
      for (Algorithm a : {Algorithm::ring, Algorithm::direct, Algorithm::automatic})
        for (DType t : kSizes)
          for (bool in_place : {false, true}) {
            const size_t es = dtype_size(t), total = count * static_cast<size_t>(n);
            std::vector<uint8_t> send(count * es + 1), recv(total * es + 1, 0xAB);
            ++seed;
            const size_t mine = static_cast<size_t>(g.rank()) * count;
            void* from = in_place ? recv.data() + mine * es : send.data();
            fill_input(t, ReduceOp::sum, seed, g.rank(), mine, from, count);
            allgather(g, from, recv.data(), count, t, with(a));
            const std::string what =
                name("allgather", a, n, count, t, ReduceOp::sum) + (in_place ? " in place" : "");
            for (int p = 0; p < n; ++p) {
              const size_t first = static_cast<size_t>(p) * count;
              check.expect_ok(
                  check_copied(t, ReduceOp::sum, seed, p, first, recv.data() + first * es, count),
                  what, g.rank());
            }
            check.record(k++, g.rank(), digest(recv.data(), total * es), what);
          }
  });
  rethrow_first(errors);
  check.expect_identical();
}

TEST_P(Sweep, Broadcast) {
  const int n = GetParam();
  Checker check(n);
  auto errors = run_group(n, [&](Group& g) {
    uint32_t seed = 0;
    size_t k = 0;
    for (size_t count : counts())
      for (Algorithm a : {Algorithm::tree, Algorithm::ring, Algorithm::automatic})
        for (int root : {0, n / 2, n - 1})
          for (DType t : kSizes) {
            std::vector<uint8_t> buf(count * dtype_size(t) + 1);
            fill_input(t, ReduceOp::sum, ++seed, g.rank(), 0, buf.data(),
                       count);  // non-roots: overwritten
            broadcast(g, buf.data(), count, t, root, with(a));
            const std::string what = name("broadcast", a, n, count, t, ReduceOp::sum, root);
            check.expect_ok(check_copied(t, ReduceOp::sum, seed, root, 0, buf.data(), count), what,
                            g.rank());
            check.record(k++, g.rank(), digest(buf.data(), count * dtype_size(t)), what);
          }
  });
  rethrow_first(errors);
  check.expect_identical();
}

TEST_P(Sweep, Reduce) {
  const int n = GetParam();
  Checker check(n);
  auto errors = run_group(n, [&](Group& g) {
    uint32_t seed = 0;
    for (size_t count : counts())
      for (Algorithm a : {Algorithm::tree, Algorithm::ring, Algorithm::automatic})
        for (int root : {0, n - 1})
          for (DType t : kAllDTypes)
            for (ReduceOp op : kOps) {
              std::vector<uint8_t> buf(count * dtype_size(t) + 1);
              fill_input(t, op, ++seed, g.rank(), 0, buf.data(), count);
              reduce(g, buf.data(), count, t, op, root, with(a));
              if (g.rank() == root)
                check.expect_ok(check_reduced(t, op, seed, n, 0, buf.data(), count),
                                name("reduce", a, n, count, t, op, root), g.rank());
            }
  });
  rethrow_first(errors);
}

TEST_P(Sweep, GatherScatterAlltoallBarrier) {
  const int n = GetParam();
  Checker check(n);
  auto errors = run_group(n, [&](Group& g) {
    const int me = g.rank();
    uint32_t seed = 0;
    for (size_t count : counts())
      for (DType t : kSizes) {
        const size_t es = dtype_size(t), total = count * static_cast<size_t>(n);
        for (int root : {0, n - 1}) {
          // gather: the root gets every rank's block in rank order.
          std::vector<uint8_t> send(count * es + 1), all(total * es + 1);
          fill_input(t, ReduceOp::sum, ++seed, me, static_cast<size_t>(me) * count, send.data(),
                     count);
          gather(g, send.data(), me == root ? all.data() : nullptr, count, t, root);
          if (me == root)
            for (int p = 0; p < n; ++p) {
              const size_t first = static_cast<size_t>(p) * count;
              check.expect_ok(
                  check_copied(t, ReduceOp::sum, seed, p, first, all.data() + first * es, count),
                  name("gather", Algorithm::direct, n, count, t, ReduceOp::sum, root), me);
            }
          // scatter: rank r gets block r of the root's buffer.
          fill_input(t, ReduceOp::sum, ++seed, me, 0, all.data(), total);
          scatter(g, me == root ? all.data() : nullptr, send.data(), count, t, root);
          check.expect_ok(check_copied(t, ReduceOp::sum, seed, root,
                                       static_cast<size_t>(me) * count, send.data(), count),
                          name("scatter", Algorithm::direct, n, count, t, ReduceOp::sum, root), me);
        }
        // alltoall: block p of rank r's output is block r of rank p's input.
        std::vector<uint8_t> in(total * es + 1), out(total * es + 1);
        fill_input(t, ReduceOp::sum, ++seed, me, 0, in.data(), total);
        alltoall(g, in.data(), out.data(), count, t);
        for (int p = 0; p < n; ++p)
          check.expect_ok(check_copied(t, ReduceOp::sum, seed, p, static_cast<size_t>(me) * count,
                                       out.data() + static_cast<size_t>(p) * count * es, count),
                          name("alltoall", Algorithm::direct, n, count, t, ReduceOp::sum), me);
        barrier(g);
      }
  });
  rethrow_first(errors);
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, Sweep, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "ranks" + std::to_string(info.param); });

// Broadcast, reduce, reduce_scatter and allgather with several ring segments per chunk.
TEST(Collectives, LargeBuffersPipelineSegments) {
  const int n = 3;
  const size_t count = 5 * (size_t{256} << 10) / 4 * n + 7;
  std::vector<uint64_t> digests(n);
  auto errors = run_group(n, [&](Group& g) {
    const int me = g.rank();
    std::vector<float> buf(count);
    fill_input(DType::f32, ReduceOp::sum, 1, me, 0, buf.data(), count);
    broadcast(g, buf.data(), count, DType::f32, 1, with(Algorithm::ring));
    EXPECT_EQ(check_copied(DType::f32, ReduceOp::sum, 1, 1, 0, buf.data(), count), "");

    fill_input(DType::f32, ReduceOp::sum, 2, me, 0, buf.data(), count);
    reduce(g, buf.data(), count, DType::f32, ReduceOp::sum, 2, with(Algorithm::ring));
    if (me == 2) {
      EXPECT_EQ(check_reduced(DType::f32, ReduceOp::sum, 2, n, 0, buf.data(), count), "");
    }

    const size_t block = count / n;
    std::vector<float> all(block * n), mine(block);
    fill_input(DType::f32, ReduceOp::max, 3, me, 0, all.data(), all.size());
    reduce_scatter(g, all.data(), mine.data(), block, DType::f32, ReduceOp::max,
                   with(Algorithm::ring));
    EXPECT_EQ(check_reduced(DType::f32, ReduceOp::max, 3, n, static_cast<size_t>(me) * block,
                            mine.data(), block),
              "");

    allgather(g, mine.data(), all.data(), block, DType::f32, with(Algorithm::ring));
    if (me == 0) {
      EXPECT_EQ(check_reduced(DType::f32, ReduceOp::max, 3, n, 0, all.data(), all.size()), "");
    }
    digests[static_cast<size_t>(me)] = digest(all.data(), all.size() * 4);
  });
  rethrow_first(errors);
  EXPECT_EQ(digests[1], digests[0]);
  EXPECT_EQ(digests[2], digests[0]);
}

// Rank 1 makes another call than the others: it and the rank that noticed fail with
// CollectiveMismatch naming both calls; the rest learn it from their failing peers, and
// nobody waits for the deadline.
void expect_mismatch(int n, Algorithm a,
                     const std::function<void(Group&, std::vector<float>&)>& odd,
                     const std::string& want_a, const std::string& want_b) {
  auto errors = run_group(
      n,
      [&](Group& g) {
        std::vector<float> buf(128, 1.0f);
        if (g.rank() == 1)
          odd(g, buf);
        else
          allreduce(g, buf.data(), 100, DType::f32, ReduceOp::sum, with(a));
      },
      30s);
  int mismatches = 0;
  for (int r = 0; r < n; ++r) {
    const auto& e = errors[static_cast<size_t>(r)];
    const std::string m = message(e);
    ASSERT_TRUE(e) << "rank " << r << " did not fail";
    try {
      std::rethrow_exception(e);
    } catch (const CollectiveMismatch&) {
      ++mismatches;
      EXPECT_NE(m.find(want_a), std::string::npos) << m;
      EXPECT_NE(m.find(want_b), std::string::npos) << m;
    } catch (const PeerError&) {
      EXPECT_NE(r, 1) << m;
      EXPECT_NE(m.find("disagree about the call"), std::string::npos) << m;
    } catch (const std::exception&) {
      ADD_FAILURE() << "rank " << r << ": " << m;
    }
  }
  EXPECT_GE(mismatches, 2);
}

TEST(Collectives, MismatchedCallsNameBothCalls) {
  const std::string ours = "allreduce #1 (f32 sum, 100 elements)";
  for (int n : {2, 3}) {
    for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::automatic}) {
      SCOPED_TRACE(std::string(algorithm_name(a)) + " on " + std::to_string(n) + " ranks");
      expect_mismatch(
          n, a,
          [&](Group& g, std::vector<float>& b) {
            allreduce(g, b.data(), 101, DType::f32, ReduceOp::sum, with(a));
          },
          ours, "allreduce #1 (f32 sum, 101 elements)");
      expect_mismatch(
          n, a,
          [&](Group& g, std::vector<float>& b) {
            allreduce(g, b.data(), 50, DType::f64, ReduceOp::sum, with(a));
          },
          ours, "allreduce #1 (f64 sum, 50 elements)");
      expect_mismatch(
          n, a,
          [&](Group& g, std::vector<float>& b) {
            allreduce(g, b.data(), 100, DType::f32, ReduceOp::max, with(a));
          },
          ours, "allreduce #1 (f32 max, 100 elements)");
      expect_mismatch(
          n, a,
          [&](Group& g, std::vector<float>& b) { broadcast(g, b.data(), 100, DType::f32, 0); },
          ours, "broadcast #1 (f32, 100 elements, root 0)");
    }
  }
}

TEST(Collectives, DeadPeerFailsEveryoneNamingIt) {
  for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::binary_blocks}) {
    std::latch closed(1);
    auto errors = run_group(
        5,
        [&](Group& g) {
          if (g.rank() == 2) {
            static_cast<InprocTransport&>(g.transport()).close("simulated crash");
            closed.count_down();
            return;
          }
          closed.wait();
          std::vector<float> buf(1000, 1.0f);
          allreduce(g, buf.data(), buf.size(), DType::f32, ReduceOp::sum, with(a));
        },
        30s);
    EXPECT_FALSE(errors[2]);
    for (int r : {0, 1, 3, 4}) {
      const std::string m = message(errors[static_cast<size_t>(r)]);
      ASSERT_TRUE(errors[static_cast<size_t>(r)]) << algorithm_name(a) << ": rank " << r;
      EXPECT_THROW(std::rethrow_exception(errors[static_cast<size_t>(r)]), PeerError) << m;
      EXPECT_NE(m.find("rank 2 is gone (simulated crash)"), std::string::npos) << m;
    }
  }
}

TEST(Collectives, StuckPeerTimesOutNamingIt) {
  std::latch done(1);
  auto errors = run_group(2, [&](Group& g) {
    if (g.rank() == 1) return done.wait();  // alive but never calls
    std::vector<float> buf(10, 1.0f);
    CollectiveOptions o;
    o.timeout = 100ms;
    try {
      allreduce(g, buf.data(), buf.size(), DType::f32, ReduceOp::sum, o);
    } catch (...) {
      done.count_down();
      throw;
    }
  });
  ASSERT_TRUE(errors[0]);
  EXPECT_THROW(std::rethrow_exception(errors[0]), TimeoutError);
  const std::string m = message(errors[0]);
  EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("allreduce #1 (f32 sum, 10 elements)"), std::string::npos) << m;
  EXPECT_NE(m.find("timed out after"), std::string::npos) << m;
}

TEST(Collectives, BadArgumentsAreErrors) {
  auto errors = run_group(1, [&](Group& g) {
    float x = 0;
    EXPECT_THROW(broadcast(g, &x, 1, DType::f32, 0, with(Algorithm::halving_doubling)), Error);
    try {
      broadcast(g, &x, 1, DType::f32, 0, with(Algorithm::direct));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ring, tree"), std::string::npos) << e.what();
    }
    EXPECT_THROW(broadcast(g, &x, 1, DType::f32, 1), Error);
    EXPECT_THROW(reduce(g, &x, 1, DType::f32, ReduceOp::sum, -1), Error);
    EXPECT_THROW(allreduce(g, nullptr, 3, DType::f32, ReduceOp::sum), Error);
    EXPECT_THROW(barrier(g, with(Algorithm::ring)), Error);
    EXPECT_THROW(gather(g, &x, &x, 1, DType::f32, 0, with(Algorithm::tree)), Error);
  });
  rethrow_first(errors);
}

// Calls on a group with a backend go to the backend, not to braid's algorithms.
class RecordingBackend : public CollectiveBackend {
 public:
  std::vector<std::string> calls;
  void allreduce(void*, size_t count, DType, ReduceOp op) override {
    calls.push_back("allreduce " + std::to_string(count) + " " + std::string(reduce_op_name(op)));
  }
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override {
    calls.push_back("reduce_scatter");
  }
  void allgather(const void*, void*, size_t, DType) override { calls.push_back("allgather"); }
  void broadcast(void*, size_t, DType, int root) override {
    calls.push_back("broadcast " + std::to_string(root));
  }
  void reduce(void*, size_t, DType, ReduceOp, int) override { calls.push_back("reduce"); }
  void gather(const void*, void*, size_t, DType, int) override { calls.push_back("gather"); }
  void scatter(const void*, void*, size_t, DType, int) override { calls.push_back("scatter"); }
  void alltoall(const void*, void*, size_t, DType) override { calls.push_back("alltoall"); }
  void barrier() override { calls.push_back("barrier"); }
};

TEST(Collectives, BackendTakesTheCalls) {
  auto errors = run_group(2, [&](Group& g) {
    auto backend = std::make_shared<RecordingBackend>();
    g.set_backend(backend);
    float x[4] = {};
    allreduce(g, x, 4, DType::f32, ReduceOp::avg);
    reduce_scatter(g, x, x + 2, 1, DType::f32, ReduceOp::sum);
    allgather(g, x, x, 1, DType::f32);
    broadcast(g, x, 4, DType::f32, 1);
    reduce(g, x, 4, DType::f32, ReduceOp::sum, 0);
    gather(g, x, x, 1, DType::f32, 0);
    scatter(g, x, x, 1, DType::f32, 0);
    alltoall(g, x, x + 2, 1, DType::f32);
    barrier(g);
    EXPECT_EQ(backend->calls, (std::vector<std::string>{
                                  "allreduce 4 avg", "reduce_scatter", "allgather", "broadcast 1",
                                  "reduce", "gather", "scatter", "alltoall", "barrier"}));
  });
  rethrow_first(errors);
}

// Sequence numbers: every collective takes one, including the fast paths, so ranks that
// skip nothing stay aligned after empty calls.
TEST(Collectives, EmptyCallsKeepSequenceNumbersAligned) {
  auto errors = run_group(3, [&](Group& g) {
    float x = 1.0f;
    allreduce(g, &x, 0, DType::f32, ReduceOp::sum);
    broadcast(g, &x, 0, DType::f32, 0);
    EXPECT_EQ(g.next_seq(), 3u);
    allreduce(g, &x, 1, DType::f32, ReduceOp::sum);
    EXPECT_EQ(x, 3.0f);
  });
  rethrow_first(errors);
}

}  // namespace
}  // namespace braid::comm
