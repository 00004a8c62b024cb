// The progress engine with real ranks: threads over the in-process transport and forked
// processes over shared memory. Results bitwise equal to the blocking collectives; many
// operations outstanding, run in submission order; the compute thread going on while an
// allreduce waits for a peer; a peer killed with SIGKILL, a stuck peer and ranks that
// disagree, each reaching every handle with its type and the operation's label; queued
// work at destruction; and no heap allocation per operation (operator new is counted).
#include "comm/progress_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <new>
#include <thread>
#include <vector>

#include "comm/collective_reference.h"
#include "comm/inproc_ranks.h"
#include "comm/shared_buffer.h"
#include "comm/shm_transport.h"
#include "transport_test_util.h"

// Every heap allocation in this binary is counted, per process and per thread, so a test
// can show that an engine's steady state allocates nothing.
namespace {
std::atomic<int64_t> g_allocations{0};
thread_local int64_t t_allocations = 0;

void* counted_alloc(std::size_t n, std::size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  ++t_allocations;
  n = n ? n : 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace braid::comm {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::fill_input;
using testing::ForkedRanks;
using testing::kTestTimeout;
using testing::message;
using testing::require;
using testing::rethrow_first;
using testing::run_transports;

std::shared_ptr<Group> world_of(const std::shared_ptr<Transport>& t,
                                std::chrono::milliseconds timeout = kTestTimeout) {
  GroupOptions options;
  options.timeout = timeout;
  return Group::world(t, options);
}

// Polls `cond` until it holds; false (instead of hanging) if it never does.
template <typename Cond>
bool eventually(Cond cond) {
  const Deadline d = Deadline::after(60s);
  while (!cond()) {
    if (d.expired()) return false;
    std::this_thread::yield();
  }
  return true;
}

// Counts a latch down when it leaves scope, so a rank that throws still releases its peer.
struct CountDownOnExit {
  std::latch& latch;
  ~CountDownOnExit() { latch.count_down(); }
};

// One collective of a test plan, with its own buffers (never resized once planned, so
// they stay put while the operation is outstanding).
struct PlannedOp {
  enum Kind { allreduce, reduce_scatter, allgather, broadcast, reduce, barrier } kind;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  Algorithm algorithm = Algorithm::automatic;
  size_t count = 0;
  std::vector<uint8_t> send, data;
};

// The same collectives on every rank, over counts that take every path (empty, tiny,
// pipelined) and several algorithms.
std::vector<PlannedOp> plan(int rank, int size) {
  std::vector<PlannedOp> ops;
  uint32_t seed = 1;
  auto add = [&](PlannedOp::Kind kind, DType t, ReduceOp op, size_t count, Algorithm a,
                 int root = 0) {
    PlannedOp p{kind, t, op, root, a, count, {}, {}};
    const size_t e = dtype_size(t);
    const size_t n = static_cast<size_t>(size);
    switch (kind) {
      case PlannedOp::reduce_scatter:
        p.send.resize(n * count * e);
        fill_input(t, op, seed, rank, 0, p.send.data(), n * count);
        p.data.resize(count * e);
        break;
      case PlannedOp::allgather:
        p.send.resize(count * e);
        fill_input(t, op, seed, rank, 0, p.send.data(), count);
        p.data.resize(n * count * e);
        break;
      default:
        p.data.resize(count * e);
        fill_input(t, op, seed, rank, 0, p.data.data(), count);
    }
    ++seed;
    ops.push_back(std::move(p));
  };
  // The largest count pipelines every algorithm; sanitizer builds skip it.
  std::vector<size_t> counts = {0, 1, 7, 1000};
  if (!testing::kSanitized) counts.push_back(70001);
  for (size_t count : counts) {
    for (Algorithm a : {Algorithm::automatic, Algorithm::ring, Algorithm::tree})
      add(PlannedOp::allreduce, DType::f32, ReduceOp::sum, count, a);
    add(PlannedOp::allreduce, DType::f64, ReduceOp::avg, count, Algorithm::halving_doubling);
    add(PlannedOp::allreduce, DType::i64, ReduceOp::max, count, Algorithm::automatic);
    add(PlannedOp::reduce_scatter, DType::f32, ReduceOp::sum, count, Algorithm::automatic);
    add(PlannedOp::allgather, DType::f32, ReduceOp::sum, count, Algorithm::automatic);
    add(PlannedOp::broadcast, DType::f32, ReduceOp::sum, count, Algorithm::automatic, size - 1);
    add(PlannedOp::reduce, DType::f32, ReduceOp::sum, count, Algorithm::automatic, 0);
    add(PlannedOp::barrier, DType::f32, ReduceOp::sum, 0, Algorithm::automatic);
  }
  return ops;
}

CollectiveOptions with(Algorithm a) {
  CollectiveOptions o;
  o.algorithm = a;
  return o;
}

void run_blocking(Group& g, std::vector<PlannedOp>& ops) {
  for (auto& p : ops) {
    const auto o = with(p.algorithm);
    switch (p.kind) {
      case PlannedOp::allreduce:
        allreduce(g, p.data.data(), p.count, p.dtype, p.op, o);
        break;
      case PlannedOp::reduce_scatter:
        reduce_scatter(g, p.send.data(), p.data.data(), p.count, p.dtype, p.op, o);
        break;
      case PlannedOp::allgather:
        allgather(g, p.send.data(), p.data.data(), p.count, p.dtype, o);
        break;
      case PlannedOp::broadcast:
        broadcast(g, p.data.data(), p.count, p.dtype, p.root, o);
        break;
      case PlannedOp::reduce:
        reduce(g, p.data.data(), p.count, p.dtype, p.op, p.root, o);
        break;
      case PlannedOp::barrier:
        barrier(g, o);
        break;
    }
  }
}

// Every operation submitted before any is waited for.
void run_async(ProgressEngine& e, std::vector<PlannedOp>& ops) {
  std::vector<Handle> handles;
  for (size_t i = 0; i < ops.size(); ++i) {
    auto& p = ops[i];
    const auto o = with(p.algorithm);
    const OpLabel label("planned op", static_cast<int64_t>(i));
    switch (p.kind) {
      case PlannedOp::allreduce:
        handles.push_back(e.iallreduce(p.data.data(), p.count, p.dtype, p.op, label, o));
        break;
      case PlannedOp::reduce_scatter:
        handles.push_back(
            e.ireduce_scatter(p.send.data(), p.data.data(), p.count, p.dtype, p.op, label, o));
        break;
      case PlannedOp::allgather:
        handles.push_back(e.iallgather(p.send.data(), p.data.data(), p.count, p.dtype, label, o));
        break;
      case PlannedOp::broadcast:
        handles.push_back(e.ibroadcast(p.data.data(), p.count, p.dtype, p.root, label, o));
        break;
      case PlannedOp::reduce:
        handles.push_back(e.ireduce(p.data.data(), p.count, p.dtype, p.op, p.root, label, o));
        break;
      case PlannedOp::barrier:
        handles.push_back(e.ibarrier(label, o));
        break;
    }
  }
  for (auto& h : handles) h.wait();
}

// "" when the engine's results equal the blocking calls' bit for bit (reduce: on its root,
// the only rank whose result is specified).
std::string compare_with_blocking(const std::shared_ptr<Group>& g) {
  auto blocking = plan(g->rank(), g->size());
  auto async = plan(g->rank(), g->size());
  run_blocking(*g, blocking);
  {
    ProgressEngine engine(g);
    run_async(engine, async);
  }
  for (size_t i = 0; i < blocking.size(); ++i) {
    if (blocking[i].kind == PlannedOp::reduce && g->rank() != blocking[i].root) continue;
    if (blocking[i].data != async[i].data)
      return "rank " + std::to_string(g->rank()) + ": planned op " + std::to_string(i) +
             " differs from the blocking call";
  }
  return "";
}

TEST(ProgressEngine, ResultsEqualTheBlockingCollectivesBitwiseOnThreads) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    auto errors = run_transports(n, [&](int, const std::shared_ptr<Transport>& t) {
      const std::string bad = compare_with_blocking(world_of(t));
      require(bad.empty(), bad);
    });
    EXPECT_NO_THROW(rethrow_first(errors));
  }
}

// Forked processes over shm, including the in-place path on buffers from allocate_shared,
// which a task submitted to the engine allocates.
TEST(ProgressEngine, ResultsEqualTheBlockingCollectivesBitwiseInForkedProcesses) {
  const int n = 3;
  auto body = [](int rank, Store& store) {
    auto g = world_of(connect_shm_transport(store, rank, n, testing::soon()));
    std::string bad = compare_with_blocking(g);
    require(bad.empty(), bad);

    const size_t count = 50'000;
    std::vector<float> input(count), blocking(count);
    fill_input(DType::f32, ReduceOp::sum, 99, rank, 0, input.data(), count);
    SharedBuffer first = allocate_shared(*g, count * sizeof(float));
    std::memcpy(first.data(), input.data(), count * sizeof(float));
    allreduce(*g, first.data(), count, DType::f32, ReduceOp::sum);
    std::memcpy(blocking.data(), first.data(), count * sizeof(float));

    ProgressEngine engine(g);
    SharedBuffer second;
    engine
        .submit("allocate_shared",
                [&second](Group& gr) { second = allocate_shared(gr, count * sizeof(float)); })
        .wait();
    require(second.shared(), "the engine's buffer is shared");
    std::memcpy(second.data(), input.data(), count * sizeof(float));
    engine
        .iallreduce(second.data(), count, DType::f32, ReduceOp::sum,
                    {"allreduce of the shared bucket", 0})
        .wait();
    require(std::memcmp(second.data(), blocking.data(), count * sizeof(float)) == 0,
            "the in-place allreduce through the engine equals the blocking one");
  };
  ForkedRanks ranks(n, body);
  EXPECT_NO_THROW(body(0, ranks.store()));
  EXPECT_TRUE(ranks.join());
}

TEST(ProgressEngine, ManyOutstandingOperationsRunInSubmissionOrder) {
  constexpr int kOps = 64;
  auto errors = run_transports(3, [&](int rank, const std::shared_ptr<Transport>& t) {
    ProgressEngine engine(world_of(t), ProgressEngineOptions{kOps * 2});
    std::vector<std::vector<int32_t>> bufs(kOps);
    std::vector<int> order;  // appended to by tasks, on the progress thread only
    order.reserve(kOps);
    std::vector<Handle> handles;
    for (int i = 0; i < kOps; ++i) {
      bufs[static_cast<size_t>(i)].assign(static_cast<size_t>(1 + i * 37), rank * 1000 + i);
      auto& b = bufs[static_cast<size_t>(i)];
      handles.push_back(engine.iallreduce(b.data(), b.size(), DType::i32, ReduceOp::sum,
                                          {"allreduce of bucket", i}));
      handles.push_back(engine.submit("record", [&order, i](Group&) { order.push_back(i); }));
    }
    for (auto it = handles.rbegin(); it != handles.rend(); ++it) it->wait();  // any order
    for (int i = 0; i < kOps; ++i) {
      const int32_t want = (0 + 1000 + 2000) + 3 * i;
      for (int32_t x : bufs[static_cast<size_t>(i)])
        require(x == want, "bucket " + std::to_string(i) + " holds the sum over ranks");
      require(order[static_cast<size_t>(i)] == i, "tasks ran in submission order");
    }
    for (size_t i = 0; i + 1 < handles.size(); ++i) {
      const OpTimes a = handles[i].times(), b = handles[i + 1].times();
      require(a.submitted <= a.started && a.started <= a.finished, "times in order");
      require(a.finished <= b.started, "each operation starts after the one before ends");
    }
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

// Rank 1 joins the allreduce only after rank 0's compute thread has worked while it was
// in flight; rank 0 never calls wait(), only test(), so the progress thread alone finishes it.
TEST(ProgressEngine, TheComputeThreadGoesOnWhileAnAllreduceWaitsForAPeer) {
  std::atomic<bool> rank0_computed{false};
  auto errors = run_transports(2, [&](int rank, const std::shared_ptr<Transport>& t) {
    ProgressEngine engine(world_of(t));
    std::vector<float> grads(4096, static_cast<float>(rank + 1));
    if (rank == 1) {
      require(eventually([&] { return rank0_computed.load(); }), "rank 0 computed");
      engine.iallreduce(grads.data(), grads.size(), DType::f32, ReduceOp::sum).wait();
      return;
    }
    Handle h = engine.iallreduce(grads.data(), grads.size(), DType::f32, ReduceOp::sum,
                                 {"allreduce of bucket", 0});
    require(!h.done() && !h.test(), "submitting returned before the allreduce could finish");
    std::vector<double> activations(1 << 16, 1.0);
    for (int step = 0; step < 4; ++step)
      for (double& a : activations) a = a * 0.5 + 1.0;
    require(!h.done(), "the allreduce still waits for rank 1 after the compute");
    require(activations[7] > 1.0, "compute ran");
    rank0_computed = true;
    require(eventually([&] { return h.test(); }), "the allreduce finished without wait()");
    for (float x : grads) require(x == 3.0f, "the allreduce's sum");
    const OpTimes times = h.times();
    require(times.submitted <= times.started && times.started <= times.finished, "times");
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

// A real process killed during the operation: the wait fails with PeerError naming the
// rank and the bucket, long before the (short) timeout, and the engine is then finished.
TEST(ProgressEngine, APeerKilledMidAllreduceFailsTheWaitWithPeerErrorNamingIt) {
  const std::chrono::milliseconds timeout = 20s;  // a regression shows as TimeoutError
  ForkedRanks ranks(2, [&](int rank, Store& store) {
    ProgressEngine engine(
        world_of(connect_shm_transport(store, rank, 2, testing::soon()), timeout));
    std::vector<float> b(1000, 1.0f);
    engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum, {"allreduce of bucket", 0})
        .wait();
    ::pause();  // killed here, never joining bucket 1
  });
  ProgressEngine engine(
      world_of(connect_shm_transport(ranks.store(), 0, 2, testing::soon()), timeout));
  std::vector<float> b(1000, 1.0f);
  engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum, {"allreduce of bucket", 0})
      .wait();
  Handle h =
      engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum, {"allreduce of bucket", 1});
  ASSERT_TRUE(eventually([&] { return h.times().started != Clock::time_point{}; }));
  ranks.kill(1);
  try {
    h.wait();
    FAIL() << "no error";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "allreduce of bucket 1 failed: ")) << what;
    EXPECT_TRUE(contains(what, "rank 1")) << what;
  }
  EXPECT_TRUE(engine.failed());
  EXPECT_TRUE(contains(message(engine.first_error()), "allreduce of bucket 1 failed: "));
  EXPECT_TRUE(engine.stopped());
  // The group is unusable: a later operation fails at once, of the same type.
  Handle later =
      engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum, {"allreduce of bucket", 2});
  EXPECT_TRUE(later.done());
  try {
    later.wait();
    FAIL() << "no error";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what,
                         "allreduce of bucket 2 was not run: allreduce of bucket 1 failed "
                         "before it: "))
        << what;
    EXPECT_TRUE(contains(what, "rank 1")) << what;
  }
}

TEST(ProgressEngine, RanksThatDisagreeGetACollectiveMismatchWithTheLabel) {
  auto errors = run_transports(2, [&](int rank, const std::shared_ptr<Transport>& t) {
    ProgressEngine engine(world_of(t));
    std::vector<float> b(101, 1.0f);
    const size_t count = rank == 0 ? 100 : 101;
    Handle h =
        engine.iallreduce(b.data(), count, DType::f32, ReduceOp::sum, {"allreduce of bucket", 3});
    try {
      h.wait();
    } catch (const CollectiveMismatch& e) {
      const std::string what = e.what();
      require(contains(what, "allreduce of bucket 3 failed: "), what);
      require(contains(what, "allreduce #1 (f32 sum, 100 elements)"), what);
      require(contains(what, "allreduce #1 (f32 sum, 101 elements)"), what);
      Handle later = engine.ibarrier({"barrier of bucket", 4});
      require(later.done(), "a submission after the failure is done at once");
      try {
        later.wait();
      } catch (const CollectiveMismatch& e2) {
        require(contains(e2.what(), "barrier of bucket 4 was not run: allreduce of bucket 3"),
                e2.what());
        return;
      }
      require(false, "the later operation failed too");
    }
    require(false, "a CollectiveMismatch");
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

// A peer that stays alive but never joins: the running operation times out, the queued
// ones behind it fail with it, and every thread waiting on any of them gets its error.
TEST(ProgressEngine, AStuckPeerFailsEveryWaitingHandleWithTheDeadline) {
  std::latch rank0_done(1);
  auto errors = run_transports(2, [&](int rank, const std::shared_ptr<Transport>& t) {
    if (rank == 1) return rank0_done.wait();  // alive but silent
    CountDownOnExit release{rank0_done};
    ProgressEngine engine(world_of(t, 200ms));
    std::vector<float> b(100, 1.0f);
    Handle first = engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum,
                                     {"allreduce of bucket", 0});
    Handle second = engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum,
                                      {"allreduce of bucket", 1});
    Handle unlabelled = engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum);
    std::exception_ptr other_thread;
    std::thread waiter([&] {
      try {
        first.wait();
      } catch (...) {
        other_thread = std::current_exception();
      }
    });
    std::exception_ptr here;
    try {
      second.wait();
    } catch (...) {
      here = std::current_exception();
    }
    waiter.join();
    require(other_thread && here, "both waits failed");
    try {
      std::rethrow_exception(other_thread);
    } catch (const TimeoutError& e) {
      require(contains(e.what(), "allreduce of bucket 0 failed: "), e.what());
      require(contains(e.what(), "rank 1"), e.what());
    }
    try {
      std::rethrow_exception(here);
    } catch (const TimeoutError& e) {
      require(contains(e.what(), "allreduce of bucket 1 was not run: allreduce of bucket 0 failed"),
              e.what());
    }
    require(second.times().started == second.times().finished, "never ran");
    const std::string third = message(unlabelled.error());
    require(contains(third, "allreduce #3 was not run: allreduce of bucket 0 failed"), third);
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

TEST(ProgressEngine, DestroyingAnEngineRunsWhatIsQueued) {
  auto errors = run_transports(2, [&](int rank, const std::shared_ptr<Transport>& t) {
    std::vector<std::vector<float>> bufs(8, std::vector<float>(1000, static_cast<float>(rank)));
    std::vector<Handle> handles;  // outlive the engine
    {
      ProgressEngine engine(world_of(t));
      for (auto& b : bufs)
        handles.push_back(engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum));
    }
    for (auto& h : handles) require(h.test(), "done when the engine is gone");
    for (auto& b : bufs) require(b[999] == 1.0f, "and its result is there");
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

// The peer leaves after one of three operations: the destructor returns once the next one
// times out, failing the last without running it.
TEST(ProgressEngine, DestroyingAnEngineWhoseQueueCannotFinishReturnsWithinTheDeadline) {
  std::latch rank0_done(1);
  auto errors = run_transports(2, [&](int rank, const std::shared_ptr<Transport>& t) {
    std::vector<float> b(100, 1.0f);
    if (rank == 1) {
      {
        ProgressEngine engine(world_of(t, 200ms));
        engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum).wait();
      }
      return rank0_done.wait();  // alive but silent
    }
    CountDownOnExit release{rank0_done};
    std::vector<Handle> handles;
    {
      ProgressEngine engine(world_of(t, 200ms));
      for (int i = 0; i < 3; ++i)
        handles.push_back(engine.iallreduce(b.data(), b.size(), DType::f32, ReduceOp::sum,
                                            {"allreduce of bucket", i}));
    }
    require(handles[0].test(), "the first operation ran");
    require(handles[1].done() && handles[2].done(), "the others are done too");
    try {
      handles[2].wait();
    } catch (const TimeoutError& e) {
      require(contains(e.what(), "bucket 2 was not run: allreduce of bucket 1 failed"), e.what());
      return;
    }
    require(false, "TimeoutError");
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

TEST(ProgressEngine, HandlesAreValuesAndSlotsAreReused) {
  auto errors = run_transports(1, [&](int, const std::shared_ptr<Transport>& t) {
    ProgressEngine engine(world_of(t), ProgressEngineOptions{2});
    Handle none;
    require(none.done() && none.test() && !none.error(), "an empty handle is done");
    none.wait();
    float x = 1.0f;
    for (int i = 0; i < 20; ++i) {  // two slots serve any number of operations in turn
      Handle h = engine.iallreduce(&x, 1, DType::f32, ReduceOp::sum, {"allreduce of bucket", i});
      Handle copy = h;
      h = Handle();
      copy.wait();
    }
    Handle a = engine.ibarrier(), b = engine.ibarrier();
    a.wait();
    b.wait();
    try {
      Handle c = engine.ibarrier();  // both slots held by live handles of finished barriers
      require(false, "an error when every slot is held");
    } catch (const Error& e) {
      require(contains(e.what(), "max_operations"), e.what());
    }
    a = Handle();
    engine.ibarrier().wait();  // a slot came free
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

// A task that waits on an operation queued behind it would wait for itself: an Error.
TEST(ProgressEngine, WaitingOnTheProgressThreadIsAnErrorNotAHang) {
  auto errors = run_transports(1, [&](int, const std::shared_ptr<Transport>& t) {
    ProgressEngine engine(world_of(t));
    std::latch submitted(1);
    Handle later;
    Handle task = engine.submit({"wait inside a task"}, [&](Group&) {
      submitted.wait();
      later.wait();
    });
    later = engine.ibarrier({"barrier of bucket", 1});
    submitted.count_down();
    try {
      task.wait();
    } catch (const Error& e) {
      require(contains(e.what(), "wait inside a task failed: "), e.what());
      require(contains(e.what(), "own thread"), e.what());
      require(later.done() && later.error(), "the barrier behind it failed too");
      return;
    }
    require(false, "an Error");
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

// With one rank the collectives move nothing, so every allocation would be the engine's:
// after a warm-up, submitting and waiting allocates nothing on any thread. With two
// ranks (the transport allocates on the progress thread), the compute thread allocates
// nothing either.
TEST(ProgressEngine, TheSteadyStateAllocatesNothingPerOperation) {
  auto ops = [](ProgressEngine& engine, float* data, int rounds) {
    int calls = 0;
    for (int i = 0; i < rounds; ++i) {
      Handle a = engine.iallreduce(data, 64, DType::f32, ReduceOp::sum, {"allreduce of bucket", i});
      Handle b = engine.ibroadcast(data, 64, DType::f32, 0, {"broadcast", i});
      Handle c = engine.submit({"task", i}, [&calls, i](Group&) { calls += i; });
      Handle d = engine.ibarrier();
      Handle copy = a;
      d.wait();
      c.wait();
      if (!copy.test() || !b.test()) throw std::runtime_error("not done in order");
    }
  };
  auto errors = run_transports(1, [&](int, const std::shared_ptr<Transport>& t) {
    ProgressEngine engine(world_of(t));
    std::vector<float> data(64, 1.0f);
    ops(engine, data.data(), 4);
    const int64_t before = g_allocations.load();
    ops(engine, data.data(), 200);
    const int64_t made = g_allocations.load() - before;
    require(made == 0, std::to_string(made) + " allocations in 200 rounds");
  });
  EXPECT_NO_THROW(rethrow_first(errors));

  errors = run_transports(2, [&](int, const std::shared_ptr<Transport>& t) {
    ProgressEngine engine(world_of(t));
    std::vector<float> data(64, 1.0f);
    ops(engine, data.data(), 4);
    const int64_t before = t_allocations;
    ops(engine, data.data(), 200);
    const int64_t made = t_allocations - before;
    require(made == 0, std::to_string(made) + " allocations on the compute thread in 200 rounds");
  });
  EXPECT_NO_THROW(rethrow_first(errors));
}

}  // namespace
}  // namespace braid::comm
