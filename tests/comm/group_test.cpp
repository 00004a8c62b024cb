// Groups over the in-process transport: world, point-to-point with tags, split (colours,
// ordering by key, opting out, nesting) and the data x tensor x pipeline mesh with a
// collective on each axis.
#include "comm/group.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/inproc_ranks.h"

namespace braid::comm {
namespace {

using testing::rethrow_first;
using testing::run_group;

TEST(Group, WorldAndConstructorChecks) {
  auto ts = make_inproc_transports(3);
  auto g = Group::world(ts[1]);
  EXPECT_EQ(g->rank(), 1);
  EXPECT_EQ(g->size(), 3);
  EXPECT_EQ(g->global_rank(2), 2);
  EXPECT_EQ(g->members(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(g->timeout(), kDefaultTimeout);
  EXPECT_THROW(Group(ts[0], {1, 2}, 5, {}), Error);  // rank 0 is not a member
  EXPECT_THROW(Group(ts[0], {0, 0}, 5, {}), Error);  // duplicate
  EXPECT_THROW(Group(ts[0], {0, 3}, 5, {}), Error);  // not a transport rank
  Group sub(ts[2], {2, 0}, 5, {});
  EXPECT_EQ(sub.rank(), 0);
  EXPECT_EQ(sub.global_rank(1), 0);
}

TEST(Group, PointToPointWithTags) {
  auto errors = run_group(3, [](Group& g) {
    const int right = (g.rank() + 1) % 3, left = (g.rank() + 2) % 3;
    int a = g.rank() * 10, b = g.rank() * 10 + 1, x = -1, y = -1;
    // Tags match out of posting order.
    const RequestId ids[] = {g.isend(right, 2, &b, 4), g.isend(right, 1, &a, 4),
                             g.irecv(left, 1, &x, 4), g.irecv(left, 2, &y, 4)};
    g.wait(ids);
    EXPECT_EQ(x, left * 10);
    EXPECT_EQ(y, left * 10 + 1);
    // p2p does not take a sequence number: a collective afterwards still lines up even
    // though only some ranks made p2p calls.
    if (g.rank() == 0) g.send(1, 9, &a, 4);
    if (g.rank() == 1) g.recv(0, 9, &x, 4);
    float s = 1.0f;
    allreduce(g, &s, 1, DType::f32, ReduceOp::sum);
    EXPECT_EQ(s, 3.0f);
    EXPECT_THROW(g.isend(3, 0, &a, 4), Error);
  });
  rethrow_first(errors);
}

// irecv_any reports its sender as a group rank: in the world group (group ranks are
// transport ranks) and in sub-groups ordered so that they are not.
TEST(Group, IrecvAnyReportsTheSenderAsAGroupRank) {
  auto errors = run_group(5, [](Group& g) {
    auto sub = g.split(g.rank() % 2, -g.rank());  // descending parent rank
    ASSERT_TRUE(sub);
    for (Group* group : {&g, sub.get()}) {
      const int n = group->size();
      if (group->rank() != 0) {
        const int32_t value = group->rank();
        group->send(0, 3, &value, 4);
        continue;
      }
      std::vector<int32_t> got(static_cast<size_t>(n), -1);
      std::vector<int> sources(static_cast<size_t>(n), -7);
      std::vector<RequestId> ids;
      for (int k = 1; k < n; ++k) ids.push_back(group->irecv_any(3, &got[k], 4, &sources[k]));
      // Half by wait(), one by test() where there is more than one.
      if (ids.size() > 1) {
        while (!group->test(ids.back())) std::this_thread::yield();
        ids.pop_back();
      }
      group->wait(ids);
      std::set<int> senders;
      for (int k = 1; k < n; ++k) {
        EXPECT_EQ(sources[k], got[k]) << "group of " << n;
        senders.insert(sources[k]);
      }
      EXPECT_EQ(senders.size(), static_cast<size_t>(n - 1));
    }
  });
  rethrow_first(errors);
}

TEST(Group, SplitOddEvenOrderedByKey) {
  auto errors = run_group(7, [](Group& g) {
    const int colour = g.rank() % 2;
    auto sub = g.split(colour, -g.rank());  // descending parent rank
    ASSERT_TRUE(sub);
    const int expected_size = colour == 0 ? 4 : 3;
    EXPECT_EQ(sub->size(), expected_size);
    // Members sorted by key: the highest parent rank first.
    std::vector<int> want;
    for (int r = 6; r >= 0; --r)
      if (r % 2 == colour) want.push_back(r);
    EXPECT_EQ(sub->members(), want);
    EXPECT_EQ(sub->global_rank(sub->rank()), g.rank());
    EXPECT_NE(sub->channel(), g.channel());
    // A collective on each half, concurrently with the other half's.
    int64_t v = g.rank();
    allreduce(*sub, &v, 1, DType::i64, ReduceOp::sum);
    EXPECT_EQ(v, colour == 0 ? 0 + 2 + 4 + 6 : 1 + 3 + 5);
    // And on the parent afterwards.
    int64_t w = 1;
    allreduce(g, &w, 1, DType::i64, ReduceOp::sum);
    EXPECT_EQ(w, 7);
  });
  rethrow_first(errors);
}

TEST(Group, SplitTiesAndOptOutAndNesting) {
  std::mutex m;
  std::set<uint32_t> channels;
  auto errors = run_group(6, [&](Group& g) {
    // Equal keys keep parent order; a negative colour joins nothing.
    auto sub = g.split(g.rank() == 5 ? -1 : g.rank() / 3, 0);
    if (g.rank() == 5) {
      EXPECT_EQ(sub, nullptr);
    } else {
      ASSERT_TRUE(sub);
      EXPECT_EQ(sub->members(),
                g.rank() < 3 ? (std::vector<int>{0, 1, 2}) : (std::vector<int>{3, 4}));
      // Nested split of the sub-group, then collectives at both levels.
      auto pair = sub->split(sub->rank() / 2, sub->rank());
      ASSERT_TRUE(pair);
      float x = 1.0f;
      allreduce(*pair, &x, 1, DType::f32, ReduceOp::sum);
      EXPECT_EQ(x, static_cast<float>(pair->size()));
      allreduce(*sub, &x, 1, DType::f32, ReduceOp::max);
      {
        std::lock_guard lock(m);
        channels.insert(sub->channel());
        channels.insert(pair->channel());
      }
    }
    // Same colour again on the parent: a fresh channel (the split counter differs).
    auto again = g.split(0, g.rank());
    ASSERT_TRUE(again);
    EXPECT_EQ(again->size(), 6);
    std::lock_guard lock(m);
    channels.insert(again->channel());
  });
  rethrow_first(errors);
  // Two colours of the first split, three pairs under {0,1,2} (two) and {3,4} (one), one
  // group from the second split: all distinct.
  EXPECT_EQ(channels.size(), 2u + 3u + 1u);
}

// The selection table is the group's (GroupOptions::algorithm_table), inherited by its
// sub-groups: ranks whose tables pick different algorithms for a call fail it as a
// mismatch, while ranks sharing a table agree. Nothing process-wide decides.
TEST(Group, TheAlgorithmTableIsAGroupOptionThatSubGroupsInherit) {
  auto table_of = [](Algorithm a) {
    return std::make_shared<const SelectionTable>(
        std::vector<SelectionRule>{SelectionRule{CallKind::allreduce, 1, 1 << 30, 0, SIZE_MAX, a}});
  };
  const auto tree = table_of(Algorithm::tree), direct = table_of(Algorithm::direct);
  auto agree = testing::run_transports(4, [&](int, const std::shared_ptr<Transport>& t) {
    GroupOptions o;
    o.timeout = testing::kTestTimeout;
    o.algorithm_table = tree;
    auto g = Group::world(t, o);
    EXPECT_EQ(&g->algorithm_table(), tree.get());
    auto half = g->split(g->rank() % 2, g->rank());
    EXPECT_EQ(&half->algorithm_table(), tree.get());
    float x = 1.0f;
    allreduce(*half, &x, 1, DType::f32, ReduceOp::sum);
    EXPECT_EQ(x, 2.0f);
  });
  rethrow_first(agree);
  auto builtin = Group::world(make_inproc_transports(1)[0]);
  EXPECT_EQ(&builtin->algorithm_table(), &SelectionTable::builtin());

  auto disagree = testing::run_transports(2, [&](int rank, const std::shared_ptr<Transport>& t) {
    GroupOptions o;
    o.timeout = testing::kTestTimeout;
    o.algorithm_table = rank == 0 ? tree : direct;
    auto g = Group::world(t, o);
    float x = 1.0f;
    allreduce(*g, &x, 1, DType::f32, ReduceOp::sum);
  });
  EXPECT_TRUE(disagree[0] || disagree[1]) << "ranks with different tables agreed";
  bool named = false;
  for (const auto& e : disagree)
    named |= testing::message(e).find("allreduce") != std::string::npos;
  EXPECT_TRUE(named) << testing::message(disagree[0]) << " / " << testing::message(disagree[1]);
}

TEST(Group, MeshTwoByTwoByTwo) {
  auto errors = run_group(8, [](Group& world) {
    const Mesh mesh = make_mesh(world, 2, 2, 2);
    const int r = world.rank();
    EXPECT_EQ(mesh.tensor_index, r % 2);
    EXPECT_EQ(mesh.data_index, (r / 2) % 2);
    EXPECT_EQ(mesh.pipeline_index, r / 4);
    ASSERT_TRUE(mesh.data && mesh.tensor && mesh.pipeline);
    EXPECT_EQ(mesh.tensor->size(), 2);
    EXPECT_EQ(mesh.data->size(), 2);
    EXPECT_EQ(mesh.pipeline->size(), 2);
    // rank = (p * D + d) * T + t.
    const int p = mesh.pipeline_index, d = mesh.data_index, t = mesh.tensor_index;
    EXPECT_EQ(mesh.tensor->members(), (std::vector<int>{(p * 2 + d) * 2, (p * 2 + d) * 2 + 1}));
    EXPECT_EQ(mesh.data->members(), (std::vector<int>{(p * 2 + 0) * 2 + t, (p * 2 + 1) * 2 + t}));
    EXPECT_EQ(mesh.pipeline->members(),
              (std::vector<int>{(0 * 2 + d) * 2 + t, (1 * 2 + d) * 2 + t}));
    EXPECT_EQ(mesh.tensor->rank(), t);
    EXPECT_EQ(mesh.data->rank(), d);
    EXPECT_EQ(mesh.pipeline->rank(), p);
    // A collective on each axis: sum the world ranks along it.
    int32_t along_t = r, along_d = r, along_p = r;
    allreduce(*mesh.tensor, &along_t, 1, DType::i32, ReduceOp::sum);
    allreduce(*mesh.data, &along_d, 1, DType::i32, ReduceOp::sum);
    allreduce(*mesh.pipeline, &along_p, 1, DType::i32, ReduceOp::sum);
    EXPECT_EQ(along_t, 2 * r - t + (1 - t));  // r - t + (r - t + 1)
    EXPECT_EQ(along_d, 2 * (r - 2 * d) + 2);  // ranks differing in d
    EXPECT_EQ(along_p, 2 * (r - 4 * p) + 4);  // ranks differing in p
    int32_t root_value = r;
    broadcast(*mesh.pipeline, &root_value, 1, DType::i32, 1);
    EXPECT_EQ(root_value, (1 * 2 + d) * 2 + t);
  });
  rethrow_first(errors);
}

TEST(Group, MeshRejectsWrongSizes) {
  auto errors = run_group(4, [](Group& world) {
    EXPECT_THROW(make_mesh(world, 3, 1, 1), Error);
    EXPECT_THROW(make_mesh(world, 0, 4, 1), Error);
    const Mesh m = make_mesh(world, 1, 4, 1);  // a pure tensor-parallel mesh
    EXPECT_EQ(m.tensor->size(), 4);
    EXPECT_EQ(m.data->size(), 1);
    EXPECT_EQ(m.pipeline->size(), 1);
  });
  rethrow_first(errors);
}

}  // namespace
}  // namespace braid::comm
