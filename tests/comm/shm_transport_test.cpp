// The shm transport with real processes and real faults: forked ranks exchanging and
// reducing, a peer killed with SIGKILL, segments that never outlive the connection, and a
// peer on another host. The shared contract is in transport_contract_test.cpp.
#include "comm/shm_transport.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "comm/shm_ring.h"
#include "transport_test_util.h"

namespace braid::comm {
namespace {

using namespace testing;

CallSignature sig_of(CallKind call, uint64_t count) {
  CallSignature s;
  s.call = call;
  s.count = count;
  return s;
}

// Whether a published segment still has a name in /dev/shm (an anonymous segment's
// locator, /proc/<pid>/fd/..., never has one).
bool segment_exists(const std::string& name) {
  struct stat st {};
  return name.rfind("/proc/", 0) != 0 && ::stat(("/dev/shm" + name).c_str(), &st) == 0;
}

// What a rank publishes before it makes its segment: pid, pid namespace, boot id.
std::string host_record(int pid, const std::string& boot) {
  std::ostringstream s;
  s << pid << ' ' << shm::pid_namespace() << ' ' << boot;
  return s.str();
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string segment_name(Store& store, int rank) {
  std::istringstream in(store.get_string("shm/seg/" + std::to_string(rank), soon()));
  std::string name;
  in >> name;
  return name;
}

// Every rank: a ring of reducing steps, then a message to every rank of its own size.
void exchange(Transport& t) {
  const int n = t.size(), me = t.rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const size_t count = 300'000;  // larger than the 64 KiB test rings
  std::vector<float> out(count, static_cast<float>(me + 1)), acc(count, 0.5f);
  for (uint32_t step = 0; step < 3; ++step) {
    const RequestId ids[] = {
        t.isend(right, {1, 1, step}, sig_of(CallKind::allreduce, count), out.data(), count * 4),
        t.irecv(left, {1, 1, step}, sig_of(CallKind::allreduce, count), acc.data(), count * 4,
                Reduction{DType::f32, ReduceOp::sum})};
    t.wait(ids, soon());
  }
  for (size_t i = 0; i < count; i += 4099)
    require(acc[i] == 0.5f + 3.0f * static_cast<float>(left + 1), "reduced value");
  std::vector<std::vector<uint8_t>> in(static_cast<size_t>(n));
  std::vector<std::vector<uint8_t>> outs(static_cast<size_t>(n));
  std::vector<RequestId> ids;
  for (int p = 0; p < n; ++p) {
    const size_t bytes = 70'000 * static_cast<size_t>(p + 1) + 3;
    in[p].resize(70'000 * static_cast<size_t>(me + 1) + 3);
    outs[p] = pattern(me * 10 + p, bytes);
    ids.push_back(
        t.irecv(p, {1, 0, 2}, sig_of(CallKind::p2p, in[p].size()), in[p].data(), in[p].size()));
    ids.push_back(t.isend(p, {1, 0, 2}, sig_of(CallKind::p2p, bytes), outs[p].data(), bytes));
  }
  t.wait(ids, soon());
  for (int p = 0; p < n; ++p)
    require(in[p] == pattern(p * 10 + me, in[p].size()), "bytes from rank " + std::to_string(p));
}

TransportOptions small_rings() {
  TransportOptions o;
  o.shm_ring_bytes = 64 << 10;
  return o;
}

// One ring in ordinary memory, producer and consumer on this thread.
class ShmRing : public ::testing::Test {
 protected:
  static constexpr size_t kCapacity = 4096;
  void write(size_t bytes) {
    size_t done = 0;
    while (done < bytes) {
      const auto span = producer.reserve(bytes - done);
      ASSERT_FALSE(span.empty());
      for (auto& b : span) b = next_write++;
      producer.advance(span.size());
      done += span.size();
    }
    producer.publish();
  }
  void read(size_t bytes) {
    size_t done = 0;
    while (done < bytes) {
      const auto span = consumer.peek(bytes - done);
      ASSERT_FALSE(span.empty());
      for (const uint8_t b : span) ASSERT_EQ(b, next_read++);
      consumer.advance(span.size());
      done += span.size();
    }
    consumer.publish();
  }
  shm::RingHeader header;
  std::vector<uint8_t> data = std::vector<uint8_t>(kCapacity);
  shm::Producer producer{&header, data.data(), kCapacity};
  shm::Consumer consumer{&header, data.data(), kCapacity};
  uint8_t next_write = 0, next_read = 0;
};

TEST_F(ShmRing, BytesArriveInOrderAcrossTheWrap) {
  for (int round = 0; round < 40; ++round) {
    const size_t bytes = shm::kRingAlign * static_cast<size_t>(1 + round % 16);
    write(bytes);
    read(bytes);
    EXPECT_TRUE(consumer.peek(shm::kRingAlign).empty());
  }
}

TEST_F(ShmRing, AFullRingTakesNoMoreUntilTheConsumerPublishes) {
  write(kCapacity);
  EXPECT_TRUE(consumer.full());
  EXPECT_TRUE(producer.reserve(shm::kRingAlign).empty());
  consumer.advance(shm::kRingAlign);  // taken but not yet published
  EXPECT_TRUE(producer.reserve(shm::kRingAlign).empty());
  consumer.publish();
  EXPECT_FALSE(consumer.full());
  EXPECT_EQ(producer.reserve(kCapacity).size(), shm::kRingAlign);
}

TEST_F(ShmRing, AnEmptyRingRewindsToItsStartBehindASkipMarker) {
  write(128);
  read(128);
  producer.rewind_if_empty();
  producer.publish();
  const auto marker = consumer.peek(shm::kRingAlign);
  ASSERT_EQ(marker.data(), data.data() + 128);
  EXPECT_TRUE(consumer.skip(marker));
  EXPECT_EQ(producer.reserve(shm::kRingAlign).data(), data.data());
  write(64);
  EXPECT_EQ(consumer.peek(shm::kRingAlign).data(), data.data());
  EXPECT_FALSE(consumer.skip(consumer.peek(shm::kRingAlign)));  // a record, not a marker
  // Not empty: no rewind.
  producer.rewind_if_empty();
  EXPECT_EQ(producer.reserve(shm::kRingAlign).data(), data.data() + 64);
  read(64);
}

TEST(ShmTransport, ForkedProcessesExchangeAndReduce) {
  const int n = 3;
  ForkedRanks ranks(n, [](int rank, Store& store) {
    auto t = connect_shm_transport(store, rank, n, soon(), small_rings());
    exchange(*t);
  });
  auto t = connect_shm_transport(ranks.store(), 0, n, soon(), small_rings());
  EXPECT_EQ(t->name(), "shm");
  exchange(*t);
  EXPECT_TRUE(ranks.join());
}

TEST(ShmTransport, AKilledPeerFailsEveryWaitOnItWithPeerError) {
  ForkedRanks ranks(2, [](int rank, Store& store) {
    auto t = connect_shm_transport(store, rank, 2, soon(), small_rings());
    uint32_t hello = 7, never = 0;
    t->send(0, {1, 0, 1}, sig_of(CallKind::p2p, 4), &hello, 4, soon());
    t->recv(0, {1, 0, 2}, sig_of(CallKind::p2p, 4), &never, 4, soon());  // killed in here
  });
  auto t = connect_shm_transport(ranks.store(), 0, 2, soon(), small_rings());
  uint32_t got = 0;
  t->recv(1, {1, 0, 1}, sig_of(CallKind::p2p, 4), &got, 4, soon());
  EXPECT_EQ(got, 7u);
  ranks.kill(1);  // left a zombie: detection must not depend on the parent reaping it
  try {
    t->recv(1, {1, 5, 3}, sig_of(CallKind::allreduce, 1), &got, 4, soon());
    FAIL() << "no PeerError";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "rank 1")) << what;
    EXPECT_TRUE(contains(what, "died")) << what;
    EXPECT_TRUE(contains(what, "allreduce #5")) << what;
  }
  // A send that cannot fit in the ring fails too, rather than waiting for the deadline.
  std::vector<uint8_t> big(1 << 20);
  EXPECT_THROW(
      t->send(1, {1, 0, 4}, sig_of(CallKind::p2p, big.size()), big.data(), big.size(), soon()),
      PeerError);
}

TEST(ShmTransport, SegmentsNeverHaveANameAndCloseTheirWayInOnceEveryRankHasMappedThem) {
  MemoryStore store;
  World w(2);
  run_threads(2, [&](int r) { w[r] = connect_shm_transport(store, r, 2, soon(), small_rings()); });
  for (int r = 0; r < 2; ++r) {
    // Anonymous (one pid namespace): a memfd that peers opened through /proc/<pid>/fd.
    const std::string locator = segment_name(store, r);
    EXPECT_EQ(locator.rfind("/proc/", 0), 0u) << locator;
    EXPECT_FALSE(segment_exists(locator)) << locator;
    // Its fd is closed once everyone mapped it: nobody can open it any more.
    EXPECT_THROW(close(shm::open_segment(locator, 1, "a connected rank's segment")), IoError);
  }
  uint32_t v = 3, got = 0;  // and the rings still work
  w[0]->send(1, {1, 0, 0}, sig_of(CallKind::p2p, 4), &v, 4, soon());
  w[1]->recv(0, {1, 0, 0}, sig_of(CallKind::p2p, 4), &got, 4, soon());
  EXPECT_EQ(got, 3u);
}

TEST(ShmTransport, AFailedConnectLeavesNoSegmentBehind) {
  MemoryStore store;  // rank 1 says where it runs, then never comes
  store.set("shm/host/1", host_record(::getpid(), boot_id()));
  EXPECT_THROW(connect_shm_transport(store, 0, 2, Deadline::after(100ms), small_rings()),
               TimeoutError);
  const std::string name = segment_name(store, 0);
  EXPECT_FALSE(segment_exists(name)) << name;
}

TEST(ShmTransport, WithAPeerInAnotherPidNamespaceSegmentsAreNamedAndStillUnlinkedOnFailure) {
  MemoryStore store;  // rank 1 runs in another pid namespace, then never comes
  std::ostringstream other;
  other << 1 << ' ' << shm::pid_namespace() + 1 << ' ' << boot_id();
  store.set("shm/host/1", other.str());
  EXPECT_THROW(connect_shm_transport(store, 0, 2, Deadline::after(100ms), small_rings()),
               TimeoutError);
  const std::string name = segment_name(store, 0);
  EXPECT_EQ(name.rfind("/braid-ring-" + std::to_string(::getpid()) + "-", 0), 0u) << name;
  EXPECT_FALSE(segment_exists(name)) << name;
}

TEST(ShmTransport, APeerOnAnotherHostIsAnIoErrorSayingSo) {
  MemoryStore store;
  store.set("shm/host/1", host_record(1, "another-boot-id"));
  try {
    connect_shm_transport(store, 0, 2, Deadline::after(5s), small_rings());
    FAIL() << "connected";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "another host")) << e.what();
    EXPECT_TRUE(contains(e.what(), "tcp")) << e.what();
  }
  // Refused before this rank made a segment.
  EXPECT_THROW(store.get("shm/seg/0", Deadline::after(0ms)), TimeoutError);
}

TEST(ShmTransport, OneRankNeedsNoSegment) {
  MemoryStore store;
  auto t = connect_shm_transport(store, 0, 1, soon());
  std::vector<float> a = {1, 2}, b = {3, 4};
  t->send(0, {0, 1, 0}, sig_of(CallKind::allreduce, 2), a.data(), 8, soon());
  t->recv(0, {0, 1, 0}, sig_of(CallKind::allreduce, 2), b.data(), 8, soon(),
          Reduction{DType::f32, ReduceOp::max});
  EXPECT_EQ(b, (std::vector<float>{3, 4}));
}

}  // namespace
}  // namespace braid::comm
