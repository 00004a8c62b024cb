// Shared buffers (comm/shared_buffer.h) and the in-place allreduce on them: every dtype,
// op and group size against the dense reference with bitwise-equal ranks, counts that
// span several blocks, ranges inside a buffer; the fallback when ranks do not all name the
// same range; disagreement, a dead peer and a silent peer as errors; and forked processes
// over the shm transport leaving nothing in /dev/shm.
#include "comm/shared_buffer.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/collective_reference.h"
#include "comm/collectives.h"
#include "comm/inproc_ranks.h"
#include "comm/shared_window.h"
#include "comm/shm_transport.h"
#include "transport_test_util.h"

namespace braid::comm {
namespace {

using testing::check_reduced;
using testing::digest;
using testing::fill_input;
using testing::kSanitized;
using testing::message;
using testing::rethrow_first;
using testing::run_group;

uint64_t in_place_calls(const Group& g) {
  return g.shared_window() ? g.shared_window()->in_place_calls() : 0;
}

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::bf16,
                             DType::f16, DType::i32, DType::i64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max,
                             ReduceOp::prod};

TEST(SharedBuffer, EveryDtypeOpAndCountMatchesTheReferenceInPlace) {
  // 40'000 f64 is 5 blocks of 64 KiB: shares of several blocks, the last one partial.
  const size_t counts[] = {1, 2, 7, 13, 1000, 4099, 40'000};
  for (int n : {2, 3, 5}) {
    if (kSanitized && n == 5) continue;
    const size_t max_bytes = 40'000 * 8 + 64;
    std::vector<std::string> failures;
    std::mutex report;
    auto errors = run_group(n, [&](Group& g) {
      SharedBuffer buf = allocate_shared(g, max_bytes);
      EXPECT_TRUE(buf.shared());
      uint64_t calls = 0;
      uint32_t seed = 0;
      for (size_t count : counts)
        for (DType t : kDTypes)
          for (ReduceOp op : kOps) {
            ++seed;
            // A range that starts inside the buffer, as a gradient bucket would.
            uint8_t* data = buf.as<uint8_t>() + 8 * (seed % 3);
            fill_input(t, op, seed, g.rank(), 0, data, count);
            allreduce(g, data, count, t, op);
            ++calls;
            const std::string bad = check_reduced(t, op, seed, n, 0, data, count);
            const uint64_t mine = digest(data, count * dtype_size(t));
            uint64_t first = mine;
            broadcast(g, &first, 1, DType::i64, 0);
            if (!bad.empty() || first != mine) {
              std::lock_guard lock(report);
              failures.push_back(detail::concat(n, " ranks, ", count, " x ", dtype_name(t), " ",
                                                reduce_op_name(op), " on rank ", g.rank(), ": ",
                                                bad.empty() ? "differs from rank 0" : bad));
            }
          }
      EXPECT_EQ(in_place_calls(g), calls);
    });
    rethrow_first(errors);
    EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures[0];
  }
}

TEST(SharedBuffer, IsZeroedAndSizedAndUsableOnOneRank) {
  auto errors = run_group(1, [&](Group& g) {
    SharedBuffer buf = allocate_shared(g, 1000);
    EXPECT_FALSE(buf.shared());  // nobody to share with
    ASSERT_EQ(buf.bytes(), 1000u);
    for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(buf.as<uint8_t>()[i], 0);
    buf.as<float>()[3] = 2.5f;
    allreduce(g, buf.data(), 250, DType::f32, ReduceOp::sum);
    EXPECT_EQ(buf.as<float>()[3], 2.5f);
  });
  rethrow_first(errors);
  auto shared = run_group(2, [&](Group& g) {
    SharedBuffer buf = allocate_shared(g, 5000);
    EXPECT_TRUE(buf.shared());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
    for (size_t i = 0; i < 5000; ++i) ASSERT_EQ(buf.as<uint8_t>()[i], 0);
  });
  rethrow_first(shared);
}

// Whenever the ranks do not all name the same range of the same shared buffer, the call
// runs the transport algorithms, with the same result.
TEST(SharedBuffer, RanksThatDoNotShareARangeFallBackTogether) {
  const size_t count = 20'000;
  auto errors = run_group(3, [&](Group& g) {
    SharedBuffer a = allocate_shared(g, count * 4 + 64);
    SharedBuffer b = allocate_shared(g, count * 4 + 64);
    std::vector<float> private_memory(count);
    auto run = [&](float* data, const CollectiveOptions& o, uint32_t seed) {
      fill_input(DType::f32, ReduceOp::sum, seed, g.rank(), 0, data, count);
      allreduce(g, data, count, DType::f32, ReduceOp::sum, o);
      EXPECT_EQ(check_reduced(DType::f32, ReduceOp::sum, seed, 3, 0, data, count), "") << seed;
    };
    const uint64_t before = in_place_calls(g);
    // Rank 1 passes private memory.
    run(g.rank() == 1 ? private_memory.data() : a.as<float>(), {}, 1);
    // Rank 2 passes the other buffer.
    run(g.rank() == 2 ? b.as<float>() : a.as<float>(), {}, 2);
    // Rank 0 starts one element further in.
    run(a.as<float>() + (g.rank() == 0 ? 1 : 0), {}, 3);
    // Everyone names an algorithm.
    CollectiveOptions ring;
    ring.algorithm = Algorithm::ring;
    run(a.as<float>(), ring, 4);
    EXPECT_EQ(in_place_calls(g), before);
    run(b.as<float>(), {}, 5);  // and the same range again takes the shared path
    EXPECT_EQ(in_place_calls(g), before + 1);
  });
  rethrow_first(errors);
}

TEST(SharedBuffer, AFreedBufferIsNoLongerShared) {
  auto errors = run_group(2, [&](Group& g) {
    auto buf = std::make_unique<SharedBuffer>(allocate_shared(g, 4096));
    std::vector<float> copy(1024, 1.0f);
    allreduce(g, buf->data(), 1024, DType::f32, ReduceOp::sum);
    EXPECT_EQ(in_place_calls(g), 1u);
    buf.reset();
    allreduce(g, copy.data(), 1024, DType::f32, ReduceOp::sum);
    EXPECT_EQ(copy[5], 2.0f);
    EXPECT_EQ(in_place_calls(g), 1u);
  });
  rethrow_first(errors);
}

TEST(SharedBuffer, RanksThatDisagreeAboutTheCallGetAMismatchNamingBoth) {
  auto errors = run_group(2, [&](Group& g) {
    SharedBuffer buf = allocate_shared(g, 4096);
    allreduce(g, buf.data(), g.rank() == 0 ? 100 : 101, DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string what = message(errors[static_cast<size_t>(r)]);
    EXPECT_TRUE(what.find("100 x f32 sum") != std::string::npos) << what;
    EXPECT_TRUE(what.find("101 x f32 sum") != std::string::npos) << what;
  }
  auto sizes = run_group(2, [&](Group& g) { allocate_shared(g, g.rank() == 0 ? 64 : 128); });
  for (const auto& e : sizes) EXPECT_TRUE(message(e).find("asked for") != std::string::npos);
}

// Every collective on a group with shared buffers says which call it is in, so a rank
// waiting in the shared-memory handshake sees at once that its peer is in another call (an
// alltoall meeting an allreduce) rather than waiting out the deadline.
TEST(SharedBuffer, AnotherCallMeetingAnAllreduceFailsAtOnce) {
  using namespace std::chrono_literals;
  const auto started = std::chrono::steady_clock::now();
  auto errors = run_group(
      2,
      [&](Group& g) {
        SharedBuffer buf = allocate_shared(g, 4096);
        std::vector<float> out(2);
        if (g.rank() == 0)
          allreduce(g, buf.data(), 2, DType::f32, ReduceOp::sum);
        else
          alltoall(g, buf.data(), out.data(), 1, DType::f32);
      },
      60s);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 20s);
  const std::string what = message(errors[0]);
  EXPECT_TRUE(what.find("disagree about the call") != std::string::npos) << what;
  EXPECT_TRUE(what.find("allreduce #") != std::string::npos) << what;
  EXPECT_TRUE(what.find("alltoall #") != std::string::npos) << what;
  EXPECT_TRUE(errors[1]) << "rank 1 went on as if its alltoall had completed";
}

TEST(SharedBuffer, APeerThatFailsIsAPeerErrorNotAHang) {
  auto errors = run_group(3, [&](Group& g) {
    SharedBuffer buf = allocate_shared(g, 1 << 20);
    allreduce(g, buf.data(), 1 << 18, DType::f32, ReduceOp::sum);
    if (g.rank() == 2) throw std::runtime_error("rank 2 crashes");
    allreduce(g, buf.data(), 1 << 18, DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string what = message(errors[static_cast<size_t>(r)]);
    EXPECT_TRUE(what.find("rank 2") != std::string::npos) << what;
    EXPECT_TRUE(what.find("allreduce") != std::string::npos) << what;
  }
}

TEST(SharedBuffer, ASilentPeerTimesOutNamingItAndTheCall) {
  using namespace std::chrono_literals;
  auto errors = run_group(
      2,
      [&](Group& g) {
        SharedBuffer buf = allocate_shared(g, 4096);
        if (g.rank() == 1) {
          std::this_thread::sleep_for(1500ms);  // never enters the allreduce
          return;
        }
        allreduce(g, buf.data(), 1024, DType::f32, ReduceOp::sum);
      },
      300ms);
  const std::string what = message(errors[0]);
  EXPECT_TRUE(what.find("timed out") != std::string::npos) << what;
  EXPECT_TRUE(what.find("rank 1 to enter allreduce") != std::string::npos) << what;
}

// Real processes over the shm transport; the segments are gone once allocation returns.
TEST(SharedBuffer, ForkedProcessesReduceInPlaceAndLeaveNothingInDevShm) {
  const int n = 3;
  const size_t count = 300'001;  // several blocks per share, not divisible by 3
  auto work = [&](int rank, Store& store) {
    auto t = connect_shm_transport(store, rank, n, testing::soon());
    auto g = Group::world(t);
    SharedBuffer buf = allocate_shared(*g, count * 4);
    testing::require(buf.shared(), "the buffer is shared");
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      fill_input(DType::f32, ReduceOp::sum, seed, rank, 0, buf.data(), count);
      allreduce(*g, buf.data(), count, DType::f32, ReduceOp::sum);
      const std::string bad =
          check_reduced(DType::f32, ReduceOp::sum, seed, n, 0, buf.data(), count);
      testing::require(bad.empty(), bad);
    }
    testing::require(g->shared_window()->in_place_calls() == 3, "three calls in place");
  };
  testing::ForkedRanks ranks(n, work);
  auto before = [] {
    std::vector<std::string> names;
    if (auto* d = ::opendir("/dev/shm")) {
      while (auto* e = ::readdir(d))
        if (std::strncmp(e->d_name, "braid-buf-", 10) == 0 ||
            std::strncmp(e->d_name, "braid-ctl-", 10) == 0)
          names.emplace_back(e->d_name);
      ::closedir(d);
    }
    return names;
  };
  const auto leftovers_before = before();
  work(0, ranks.store());
  EXPECT_TRUE(ranks.join());
  const auto leftovers_after = before();
  EXPECT_EQ(leftovers_after.size(), leftovers_before.size());
}

}  // namespace
}  // namespace braid::comm
