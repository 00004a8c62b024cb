#include "train/shard_recovery.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "comm/collectives.h"
#include "core/error.h"

namespace braid::train {
namespace {

using parallel::StateShard;

// Point-to-point tag of the shards sent to rank 0 (plus the old rank whose shard it is).
constexpr uint32_t kGatherTag = 0x47415448;  // "GATH"
// What a member says of each of the shards it may hold: round, world, rank, step.
constexpr size_t kFields = 4;
constexpr size_t kSlots = 4;  // mine[2], left[2]

std::array<const StateShard*, kSlots> slots_of(const TrainCommit& c) {
  return {&c.mine[0], &c.mine[1], &c.left[0], &c.left[1]};
}

struct Choice {
  int64_t round = 0, world = 0, step = -1;
  // Per old rank: the member that sends its shard, and from which of its slots.
  std::vector<int> holder, slot;
};

// The newest commit (by round, then step) every shard of which some member holds; step -1
// when there is none. `held` holds kSlots x kFields values per member.
Choice choose(const std::vector<int64_t>& held, int members) {
  struct Key {
    int64_t round, step, world;
  };
  std::vector<Key> keys;
  for (size_t i = 0; i < held.size(); i += kFields)
    if (held[i + 3] >= 0) keys.push_back({held[i], held[i + 3], held[i + 1]});
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    return a.round != b.round ? a.round > b.round : a.step > b.step;
  });
  for (const Key& k : keys) {
    Choice c{k.round, k.world, k.step, std::vector<int>(static_cast<size_t>(k.world), -1),
             std::vector<int>(static_cast<size_t>(k.world), -1)};
    for (int m = members - 1; m >= 0; --m)  // the lowest-ranked holder wins
      for (size_t s = 0; s < kSlots; ++s) {
        const int64_t* e = &held[(static_cast<size_t>(m) * kSlots + s) * kFields];
        if (e[0] != k.round || e[3] != k.step) continue;
        BRAID_CHECK(e[1] == k.world && e[2] >= 0 && e[2] < k.world, "elastic: member ", m,
                    " holds a shard of round ", k.round, " cut for rank ", e[2], " of ", e[1],
                    " ranks, but that round had ", k.world);
        c.holder[static_cast<size_t>(e[2])] = m;
        c.slot[static_cast<size_t>(e[2])] = static_cast<int>(s);
      }
    if (std::find(c.holder.begin(), c.holder.end(), -1) == c.holder.end()) return c;
  }
  return {};
}

void send_shard(comm::Group& g, int to, uint32_t tag, const StateShard& shard) {
  const std::vector<uint8_t> bytes = shard.bytes();
  const int64_t size = static_cast<int64_t>(bytes.size());
  g.send(to, tag, &size, sizeof size);
  g.send(to, tag, bytes.data(), bytes.size());
}

void receive_shard(comm::Group& g, int from, uint32_t tag, StateShard& into) {
  int64_t size = 0;
  g.recv(from, tag, &size, sizeof size);
  BRAID_CHECK(size >= 0 && size < (int64_t{1} << 40), "elastic: rank ", from,
              " announced a shard of ", size, " bytes");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  g.recv(from, tag, bytes.data(), bytes.size());
  StateShard::from_bytes(bytes, into);
}

// Rank 0: the shards of every old rank, written into `whole` in the full logical layout.
void write_whole(const std::vector<StateShard>& shards, const nn::ParamSet& params,
                 const optim::NamedTensors& optimizer_layout, TrainCommit& whole) {
  const int64_t total = params.size();
  const std::vector<std::string>& names = shards.front().names;
  std::vector<std::vector<float>> vectors(1 + names.size(),
                                          std::vector<float>(static_cast<size_t>(total)));
  int64_t covered = 0;
  for (const StateShard& s : shards) {
    BRAID_CHECK(s.names == names,
                "elastic: the shards of one commit name different optimizer "
                "state (rank ",
                s.rank, "'s against rank 0's)");
    const int64_t floats = s.floats_per_vector();
    int64_t at = 0;
    for (size_t r = 0; r < s.ranges.size(); r += 2) {
      const int64_t begin = s.ranges[r], count = s.ranges[r + 1];
      BRAID_CHECK(begin >= 0 && count >= 0 && begin + count <= total, "elastic: rank ", s.rank,
                  "'s shard covers [", begin, ", ", begin + count, ") of a model of ", total,
                  " floats (another model?)");
      for (size_t k = 0; k < vectors.size(); ++k)
        std::memcpy(vectors[k].data() + begin,
                    s.values.data() + static_cast<int64_t>(k) * floats + at,
                    static_cast<size_t>(count) * sizeof(float));
      at += count;
      covered += count;
    }
  }
  BRAID_CHECK(covered == total, "elastic: the shards of the commit cover ", covered,
              " floats of a model of ", total);
  const StateShard& first = shards.front();
  whole.step = first.step;
  whole.position = first.position;
  whole.live = false;
  whole.average.clear();
  whole.model.clear();
  for (nn::ParamSet::Id id = 0; id < params.layout().size(); ++id) {
    const nn::ParamInfo& p = params.info(id);
    const auto* from = reinterpret_cast<const uint8_t*>(vectors[0].data() + p.offset);
    whole.model.insert(whole.model.end(), from, from + p.numel() * sizeof(float));
  }
  whole.model.insert(whole.model.end(), first.buffers.begin(), first.buffers.end());
  whole.optimizer.clear();
  for (const auto& [name, t] : optimizer_layout) {
    const uint8_t* from = nullptr;
    size_t bytes = 0;
    if (t.dtype() == DType::f32) {
      const auto k = std::find(names.begin(), names.end(), name) - names.begin();
      BRAID_CHECK(static_cast<size_t>(k) < names.size(),
                  "elastic: the shards hold no optimizer "
                  "state '",
                  name, "'");
      from = reinterpret_cast<const uint8_t*>(vectors[static_cast<size_t>(k) + 1].data());
      bytes = static_cast<size_t>(total) * sizeof(float);
    } else {
      BRAID_CHECK(t.dtype() == DType::i64 && t.numel() == 1, "elastic: optimizer state '", name,
                  "' is neither a float buffer nor the step count");
      from = reinterpret_cast<const uint8_t*>(&first.optimizer_steps);
      bytes = sizeof(int64_t);
    }
    whole.optimizer.insert(whole.optimizer.end(), from, from + bytes);
  }
}

}  // namespace

bool gather_shards(comm::Group& group, const TrainCommit& mine, const nn::ParamSet& params,
                   const optim::NamedTensors& optimizer_layout, TrainCommit& whole) {
  const int n = group.size(), me = group.rank();
  std::vector<int64_t> said(kSlots * kFields, -1);
  const auto my_slots = slots_of(mine);
  for (size_t s = 0; s < kSlots; ++s) {
    const StateShard& shard = *my_slots[s];
    if (shard.empty()) continue;
    int64_t* e = &said[s * kFields];
    e[0] = shard.round;
    e[1] = shard.world;
    e[2] = shard.rank;
    e[3] = shard.step;
  }
  std::vector<int64_t> held(said.size() * static_cast<size_t>(n));
  comm::allgather(group, said.data(), held.data(), said.size(), DType::i64);
  const Choice c = choose(held, n);
  whole = TrainCommit{};
  if (c.step < 0) return false;
  whole.step = c.step;
  std::vector<StateShard> shards(static_cast<size_t>(c.world));
  for (int old = 0; old < c.world; ++old) {
    const auto i = static_cast<size_t>(old);
    const uint32_t tag = kGatherTag + static_cast<uint32_t>(old);
    if (c.holder[i] == me && me == 0) {
      shards[i] = *my_slots[static_cast<size_t>(c.slot[i])];
    } else if (c.holder[i] == me) {
      send_shard(group, 0, tag, *my_slots[static_cast<size_t>(c.slot[i])]);
    } else if (me == 0) {
      receive_shard(group, c.holder[i], tag, shards[i]);
    }
  }
  if (me == 0) write_whole(shards, params, optimizer_layout, whole);
  return true;
}

}  // namespace braid::train
