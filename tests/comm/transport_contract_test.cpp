// The Transport contract (comm/transport.h), one set of tests run against every transport:
// in-process (when built), shared memory (default rings, and 64 KiB rings so messages
// wrap and outgrow the ring), and TCP. Ranks are threads; the per-transport test files
// add real processes and real faults.
#include "transport_contract.h"

#include "comm/collectives.h"
#include "comm/group.h"

namespace braid::comm {
namespace {

using namespace contract_testing;  // NOLINT: the contract fixture

TEST_P(TransportContract, ReportsRankSizeAndName) {
  World w = make_world(GetParam(), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(w[r]->rank(), r);
    EXPECT_EQ(w[r]->size(), 3);
  }
  const std::string name(w[0]->name());
  EXPECT_TRUE(GetParam().rfind(name, 0) == 0) << name;
}

TEST_P(TransportContract, EveryPairExchangesEverySizeIntactIncludingItself) {
  const int n = 3;
  World w = make_world(GetParam(), n);
  const std::vector<size_t> sizes = {0, 1, 7, 4096, 100'000, 300'013};
  run_threads(n, [&](int me) {
    Transport& t = *w[me];
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<RequestId> ids;
    for (int peer = 0; peer < n; ++peer)
      for (size_t k = 0; k < sizes.size(); ++k) {
        in.emplace_back(sizes[k], 0);
        ids.push_back(t.irecv(peer, tag(static_cast<uint32_t>(k)), p2p_sig(sizes[k]),
                              in.back().data(), sizes[k]));
      }
    for (int peer = 0; peer < n; ++peer)
      for (size_t k = 0; k < sizes.size(); ++k) {
        out.push_back(pattern(me * 100 + peer * 10 + k, sizes[k]));
        ids.push_back(t.isend(peer, tag(static_cast<uint32_t>(k)), p2p_sig(sizes[k]),
                              out.back().data(), sizes[k]));
      }
    t.wait(ids, soon());
    size_t i = 0;
    for (int peer = 0; peer < n; ++peer)
      for (size_t k = 0; k < sizes.size(); ++k, ++i)
        require(in[i] == pattern(peer * 100 + me * 10 + k, sizes[k]),
                "bytes from rank " + std::to_string(peer) + " size " + std::to_string(sizes[k]));
  });
}

TEST_P(TransportContract, EarlyMessagesAreBufferedAndMatchedByTagInAnyOrder) {
  // Each message outgrows a small ring, so the receiver must buffer the ones it does not
  // want yet for the sender to finish.
  World w = make_world(GetParam(), 2);
  const size_t bytes = 200'000;
  const int count = 5;
  run_threads(2, [&](int me) {
    Transport& t = *w[me];
    if (me == 0) {
      std::vector<std::vector<uint8_t>> out;
      std::vector<RequestId> ids;
      for (int k = 0; k < count; ++k) {
        out.push_back(pattern(k, bytes));
        ids.push_back(t.isend(1, tag(k), p2p_sig(bytes), out.back().data(), bytes));
      }
      t.wait(ids, soon());
    } else {
      for (int k = count - 1; k >= 0; --k) {
        std::vector<uint8_t> in(bytes);
        t.recv(0, tag(k), p2p_sig(bytes), in.data(), bytes, soon());
        require(in == pattern(k, bytes), "message " + std::to_string(k));
      }
    }
  });
}

TEST_P(TransportContract, EqualTagsMatchInSendOrder) {
  World w = make_world(GetParam(), 2);
  run_threads(2, [&](int me) {
    Transport& t = *w[me];
    for (int k = 0; k < 4; ++k) {
      uint32_t value = 1000 + k;
      if (me == 0) {
        t.send(1, tag(9), p2p_sig(4), &value, 4, soon());
      } else {
        uint32_t got = 0;
        t.recv(0, tag(9), p2p_sig(4), &got, 4, soon());
        require(got == value, "order of equal tags");
      }
    }
  });
  // And with all posted before anything is sent.
  run_threads(2, [&](int me) {
    Transport& t = *w[me];
    uint32_t values[3] = {7, 8, 9};
    uint32_t got[3] = {};
    std::vector<RequestId> ids;
    for (int k = 0; k < 3; ++k)
      ids.push_back(me == 0 ? t.isend(1, tag(3), p2p_sig(4), &values[k], 4)
                            : t.irecv(0, tag(3), p2p_sig(4), &got[k], 4));
    t.wait(ids, soon());
    if (me == 1) require(got[0] == 7 && got[1] == 8 && got[2] == 9, "posted order");
  });
}

TEST_P(TransportContract, SelfSendsAreCopiesInEitherOrderAndCanReduce) {
  World w = make_world(GetParam(), 2);
  Transport& t = *w[1];
  const auto a = pattern(1, 5000);
  std::vector<uint8_t> b(5000);
  t.send(1, tag(1), p2p_sig(5000), a.data(), a.size(), soon());  // send first
  t.recv(1, tag(1), p2p_sig(5000), b.data(), b.size(), soon());
  EXPECT_EQ(a, b);
  std::fill(b.begin(), b.end(), 0);
  const RequestId r = t.irecv(1, tag(2), p2p_sig(5000), b.data(), b.size());  // receive first
  t.send(1, tag(2), p2p_sig(5000), a.data(), a.size(), soon());
  t.wait(r, soon());
  EXPECT_EQ(a, b);
  std::vector<float> x = {1, 2, 3}, y = {10, 20, 30};
  t.send(1, tag(3), allreduce_sig(3), x.data(), 12, soon());
  t.recv(1, tag(3), allreduce_sig(3), y.data(), 12, soon(), Reduction{DType::f32, ReduceOp::sum});
  EXPECT_EQ(y, (std::vector<float>{11, 22, 33}));
}

TEST_P(TransportContract, ZeroByteMessagesMatchAndComplete) {
  World w = make_world(GetParam(), 2);
  run_threads(2, [&](int me) {
    Transport& t = *w[me];
    const int peer = 1 - me;
    uint8_t scratch = 0;
    std::vector<RequestId> ids = {
        t.isend(peer, tag(1), p2p_sig(0), nullptr, 0),
        t.irecv(peer, tag(1), p2p_sig(0), nullptr, 0),
        t.isend(me, tag(2), p2p_sig(0), &scratch, 0),
        t.irecv(me, tag(2), p2p_sig(0), &scratch, 0),
    };
    t.wait(ids, soon());
    // A zero-byte message does not swallow the next one with the same tag.
    uint32_t v = 77 + me, got = 0;
    t.send(peer, tag(1), p2p_sig(0), nullptr, 0, soon());
    const RequestId a = t.irecv(peer, tag(1), p2p_sig(0), nullptr, 0);
    const RequestId b = t.irecv(peer, tag(1), p2p_sig(4), &got, 4);
    t.send(peer, tag(1), p2p_sig(4), &v, 4, soon());
    const RequestId both[] = {a, b};
    t.wait(both, soon());
    require(got == 77u + static_cast<uint32_t>(peer), "the message after a zero-byte one");
  });
}

// dst = op(dst, src) for a few dtypes, checked against a scalar reference.
template <typename T>
void check_reduction(Transport& a, Transport& b, DType dtype, ReduceOp op, size_t count,
                     uint32_t step) {
  std::vector<T> src(count), dst(count), expect(count);
  for (size_t i = 0; i < count; ++i) {
    src[i] = static_cast<T>((i * 7) % 13) - static_cast<T>(4);
    dst[i] = static_cast<T>((i * 3) % 11) + static_cast<T>(1);
    switch (op) {
      case ReduceOp::sum:
        expect[i] = dst[i] + src[i];
        break;
      case ReduceOp::max:
        expect[i] = std::max(dst[i], src[i]);
        break;
      case ReduceOp::min:
        expect[i] = std::min(dst[i], src[i]);
        break;
      case ReduceOp::prod:
        expect[i] = dst[i] * src[i];
        break;
      default:
        break;
    }
  }
  const size_t bytes = count * sizeof(T);
  run_threads(2, [&](int me) {
    if (me == 0)
      a.send(1, tag(step), allreduce_sig(count, dtype, op), src.data(), bytes, soon());
    else
      b.recv(0, tag(step), allreduce_sig(count, dtype, op), dst.data(), bytes, soon(),
             Reduction{dtype, op});
  });
  EXPECT_TRUE(dst == expect) << dtype_name(dtype) << " " << reduce_op_name(op) << " " << count;
}

TEST_P(TransportContract, ReducingReceivesCombineIntoTheDestination) {
  World w = make_world(GetParam(), 2);
  uint32_t step = 0;
  for (const size_t count : {size_t{1}, size_t{1000}, size_t{100'001}}) {
    check_reduction<float>(*w[0], *w[1], DType::f32, ReduceOp::sum, count, step++);
    check_reduction<double>(*w[0], *w[1], DType::f64, ReduceOp::max, count, step++);
    check_reduction<int32_t>(*w[0], *w[1], DType::i32, ReduceOp::min, count, step++);
    check_reduction<int64_t>(*w[0], *w[1], DType::i64, ReduceOp::prod, count, step++);
  }
  // bf16 against the library kernel on a copy.
  const size_t count = 70'001;
  std::vector<uint16_t> src(count), dst(count), expect;
  for (size_t i = 0; i < count; ++i) {
    src[i] = static_cast<uint16_t>(0x3f80 + (i % 64));
    dst[i] = static_cast<uint16_t>(0x4000 + (i % 32));
  }
  expect = dst;
  reduce_into(DType::bf16, ReduceOp::sum, expect.data(), src.data(), count);
  run_threads(2, [&](int me) {
    if (me == 0)
      w[0]->send(1, tag(99), allreduce_sig(count, DType::bf16), src.data(), count * 2, soon());
    else
      w[1]->recv(0, tag(99), allreduce_sig(count, DType::bf16), dst.data(), count * 2, soon(),
                 Reduction{DType::bf16, ReduceOp::sum});
  });
  EXPECT_TRUE(dst == expect);
}

TEST_P(TransportContract, EarlyReducingMessagesAreReducedWhenTheirReceiveIsPosted) {
  // Rank 1 first takes a small message sent after the big one, so the big one is surely
  // early (buffered, or parked in the ring) when its reducing receive is posted.
  World w = make_world(GetParam(), 2);
  const size_t count = 100'001;
  std::vector<float> src(count, 1.5f), dst(count, 2.0f);
  uint32_t marker = 5, got = 0;
  run_threads(2, [&](int me) {
    if (me == 0) {
      const RequestId ids[] = {
          w[0]->isend(1, tag(5, 3), allreduce_sig(count), src.data(), count * 4),
          w[0]->isend(1, tag(6), p2p_sig(4), &marker, 4)};
      w[0]->wait(ids, soon());
      return;
    }
    w[1]->recv(0, tag(6), p2p_sig(4), &got, 4, soon());
    w[1]->recv(0, tag(5, 3), allreduce_sig(count), dst.data(), count * 4, soon(),
               Reduction{DType::f32, ReduceOp::sum});
  });
  EXPECT_EQ(got, 5u);
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](float v) { return v == 3.5f; }));
}

TEST_P(TransportContract, RingStepsSendAndReduceAtOnce) {
  // The collectives' inner loop: isend to the right and a reducing irecv from the left,
  // waited together, on segments larger than the small ring.
  for (const int n : {2, 3, 4}) {
    World w = make_world(GetParam(), n);
    const size_t count = 96 * 1024;  // 384 KiB of f32: several small rings' worth
    const int steps = 3;
    run_threads(n, [&](int me) {
      Transport& t = *w[me];
      const int right = (me + 1) % n, left = (me + n - 1) % n;
      std::vector<float> out(count), acc(count);
      for (int s = 0; s < steps; ++s) {
        for (size_t i = 0; i < count; ++i) {
          out[i] = static_cast<float>((me + 1) * (s + 1)) + static_cast<float>(i % 5);
          acc[i] = static_cast<float>(i % 3);
        }
        const RequestId ids[] = {
            t.isend(right, tag(s, 1), allreduce_sig(count * n), out.data(), count * 4),
            t.irecv(left, tag(s, 1), allreduce_sig(count * n), acc.data(), count * 4,
                    Reduction{DType::f32, ReduceOp::sum})};
        t.wait(ids, soon());
        for (size_t i = 0; i < count; i += 997)
          require(acc[i] == static_cast<float>(i % 3) + static_cast<float>((left + 1) * (s + 1)) +
                                static_cast<float>(i % 5),
                  "ring step value");
      }
    });
  }
}

TEST_P(TransportContract, AllToAllWithManyMessagesInFlight) {
  const int n = 4;
  World w = make_world(GetParam(), n);
  const int per_pair = 8;
  run_threads(n, [&](int me) {
    Transport& t = *w[me];
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<RequestId> ids;
    out.reserve(n * per_pair);
    in.reserve(n * per_pair);
    for (int peer = 0; peer < n; ++peer)
      for (int k = 0; k < per_pair; ++k) {
        const size_t bytes = 1000 * (k + 1) * (peer + 1);
        out.push_back(pattern(me * 1000 + peer * 10 + k, bytes));
        ids.push_back(t.isend(peer, tag(k), p2p_sig(bytes), out.back().data(), bytes));
      }
    for (int k = per_pair - 1; k >= 0; --k)
      for (int peer = n - 1; peer >= 0; --peer) {
        const size_t bytes = 1000 * (k + 1) * (me + 1);
        in.emplace_back(bytes);
        const RequestId id = t.irecv(peer, tag(k), p2p_sig(bytes), in.back().data(), bytes);
        t.wait(id, soon());
        require(in.back() == pattern(peer * 1000 + me * 10 + k, bytes), "all-to-all bytes");
      }
    t.wait(ids, soon());
  });
}

TEST_P(TransportContract, TestReportsCompletionWithoutBlocking) {
  World w = make_world(GetParam(), 2);
  uint64_t got = 0, value = 0xfeedfacecafebeefull;
  const RequestId r = w[1]->irecv(0, tag(4), p2p_sig(8), &got, 8);
  EXPECT_FALSE(w[1]->test(r));
  w[0]->send(1, tag(4), p2p_sig(8), &value, 8, soon());
  const Deadline d = soon();
  while (!w[1]->test(r)) {
    ASSERT_FALSE(d.expired());
    std::this_thread::yield();
  }
  EXPECT_EQ(got, value);
}

TEST_P(TransportContract, SizeMismatchNamesBothCalls) {
  World w = make_world(GetParam(), 2);
  std::vector<float> buf(200);
  std::string error;
  run_threads(2, [&](int me) {
    Tag tg = tag(0, 7);
    if (me == 0) {
      try {  // the send may complete or fail along with the receive
        w[0]->send(1, tg, allreduce_sig(100), buf.data(), 400, Deadline::after(2s));
      } catch (const Error&) {
      }
      return;
    }
    try {
      w[1]->recv(0, tg, allreduce_sig(100), buf.data(), 800, soon(),
                 Reduction{DType::f32, ReduceOp::sum});
    } catch (const CollectiveMismatch& e) {
      error = e.what();
    }
  });
  EXPECT_TRUE(contains(error, "allreduce #7")) << error;
  EXPECT_TRUE(contains(error, "400")) << error;
  EXPECT_TRUE(contains(error, "800")) << error;
}

TEST_P(TransportContract, SignatureMismatchNamesBothCalls) {
  for (const uint32_t sender_step : {0u, 3u}) {  // same tag, or same (channel, seq) only
    World w = make_world(GetParam(), 2);
    std::vector<float> buf(100);
    std::string error;
    CallSignature bcast = allreduce_sig(100);
    bcast.call = CallKind::broadcast;
    bcast.root = 0;
    run_threads(2, [&](int me) {
      if (me == 0) {
        try {
          w[0]->send(1, tag(sender_step, 7), bcast, buf.data(), 400, Deadline::after(2s));
        } catch (const Error&) {
        }
        return;
      }
      try {
        w[1]->recv(0, tag(0, 7), allreduce_sig(100), buf.data(), 400, Deadline::after(20s));
      } catch (const CollectiveMismatch& e) {
        error = e.what();
      }
    });
    EXPECT_TRUE(contains(error, describe_call(allreduce_sig(100), 7))) << error;
    EXPECT_TRUE(contains(error, describe_call(bcast, 7))) << error;
  }
}

// Ranks in different collectives (an alltoall meeting an allreduce, as ranks that disagree
// on `deterministic` once did) fail at once naming both calls, not at the deadline.
TEST_P(TransportContract, AnAlltoallMeetingAnAllreduceFailsAtOnceNamingBoth) {
  World w = make_world(GetParam(), 2);
  GroupOptions options;
  options.timeout = 60s;
  std::vector<std::string> errors(2);
  const auto started = std::chrono::steady_clock::now();
  run_threads(2, [&](int me) {
    auto g = Group::world(w[static_cast<size_t>(me)], options);
    std::vector<float> in(64, 1.0f), out(64);
    try {
      if (me == 0)
        allreduce(*g, in.data(), in.size(), DType::f32, ReduceOp::sum);
      else
        alltoall(*g, in.data(), out.data(), 32, DType::f32);
    } catch (const Error& e) {
      errors[static_cast<size_t>(me)] = e.what();
    }
    if (errors[static_cast<size_t>(me)].empty()) errors[static_cast<size_t>(me)] = "(no error)";
  });
  EXPECT_LT(std::chrono::steady_clock::now() - started, 20s);
  const bool named = (contains(errors[0], "allreduce #") && contains(errors[0], "alltoall #")) ||
                     (contains(errors[1], "allreduce #") && contains(errors[1], "alltoall #"));
  EXPECT_TRUE(named) << "rank 0: " << errors[0] << "\nrank 1: " << errors[1];
}

TEST_P(TransportContract, AMissingMessageTimesOutNamingPeerCallAndTime) {
  World w = make_world(GetParam(), 2);
  float x = 0;
  try {
    w[1]->recv(0, tag(2, 12), allreduce_sig(1), &x, 4, Deadline::after(200ms));
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "rank 0")) << what;
    EXPECT_TRUE(contains(what, "allreduce #12")) << what;
    EXPECT_TRUE(contains(what, " s")) << what;
  }
  if (!streams()) return;  // inproc closes a rank whose wait threw
  // The transport stays usable after a timeout.
  float v = 5;
  run_threads(2, [&](int me) {
    if (me == 0)
      w[0]->send(1, tag(2, 13), allreduce_sig(1), &v, 4, soon());
    else
      w[1]->recv(0, tag(2, 13), allreduce_sig(1), &x, 4, soon());
  });
  EXPECT_EQ(x, 5);
}

// A send/recv message is placed by its caller's tag, not by an algorithm's step: a named
// tag reads as its name (a parameter server's 'pver' was reported as "step 1347616772").
TEST_P(TransportContract, AMissingSendRecvMessageIsNamedByItsTag) {
  for (const auto& [tg, name] : {std::pair{named_tag("pver"), std::string("tag 'pver'")},
                                 std::pair{42u, std::string("tag 42")}}) {
    World w = make_world(GetParam(), 2);
    float x = 0;
    try {
      w[1]->recv(0, tag(tg, 0), p2p_sig(4), &x, 4, Deadline::after(200ms));
      ADD_FAILURE() << "no timeout";
    } catch (const TimeoutError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(contains(what, name)) << what;
      EXPECT_FALSE(contains(what, "step ")) << what;
    }
  }
  EXPECT_EQ(named_tag("pver"), 0x70766572u);
  EXPECT_EQ(describe_step(p2p_sig(4), tag(named_tag("push"))), "tag 'push'");
  EXPECT_EQ(describe_step(p2p_sig(4), tag(0x5053'0004)), "tag 1347616772");
  EXPECT_EQ(describe_step(allreduce_sig(4), tag(3)), "step 3");
}

TEST_P(TransportContract, TooMuchSentAheadFailsNamingThePeer) {
  if (!streams()) GTEST_SKIP() << "the bound is a stream transport option";
  TransportOptions options;
  options.max_buffered_bytes = 1 << 20;
  World w = make_world(GetParam(), 2, options);
  const size_t bytes = 300'000;
  std::vector<uint8_t> buf(bytes);
  std::string error;
  run_threads(2, [&](int me) {
    if (me == 0) {
      std::vector<RequestId> ids;
      for (int k = 0; k < 6; ++k)
        ids.push_back(w[0]->isend(1, tag(k), p2p_sig(bytes), buf.data(), bytes));
      try {
        w[0]->wait(ids, Deadline::after(1s));
      } catch (const Error&) {  // stuck once the receiver gives up, or done
      }
      return;
    }
    try {  // wants a message that comes after the six
      w[1]->recv(0, tag(50), p2p_sig(4), buf.data(), 4, Deadline::after(20s));
    } catch (const PeerError& e) {
      error = e.what();
    }
  });
  EXPECT_TRUE(contains(error, "rank 0")) << error;
  EXPECT_TRUE(contains(error, "max_buffered_bytes")) << error;
}

TEST_P(TransportContract, APeerThatClosesFailsLaterWaitsButItsMessagesArrive) {
  if (!streams()) GTEST_SKIP() << "in-process ranks do not close";
  World w = make_world(GetParam(), 2);
  uint32_t value = 42, got = 0;
  w[0]->send(1, tag(1), p2p_sig(4), &value, 4, soon());
  w[0].reset();  // rank 0 shuts down with its message still unread
  w[1]->recv(0, tag(1), p2p_sig(4), &got, 4, soon());
  EXPECT_EQ(got, 42u);
  try {
    w[1]->recv(0, tag(2), p2p_sig(4), &got, 4, soon());
    FAIL() << "no PeerError";
  } catch (const PeerError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 0")) << e.what();
    EXPECT_TRUE(contains(e.what(), "closed")) << e.what();
  }
}

// --- Receives from any rank (kAnyRank).

INSTANTIATE_TEST_SUITE_P(All, TransportContract, ::testing::ValuesIn(kinds()), kind_test_name);

}  // namespace
}  // namespace braid::comm
