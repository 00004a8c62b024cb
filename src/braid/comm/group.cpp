// Groups (comm/group.h): world, point-to-point, split and the data x tensor x pipeline
// mesh.
//
// Tags: point-to-point messages carry seq 0 and the user's tag as the step, because ranks
// do not make p2p calls in lockstep (a pipeline's middle stage sends and receives, its
// ends do one of the two); collectives take seq 1, 2, ... from next_seq(), so the two
// never meet. A sub-group's channel is a hash of (parent channel, the parent's split
// counter, colour), which every member computes alike; sibling groups with equal
// channels would still never mix, since they share no ranks.
#include "comm/group.h"

#include <algorithm>
#include <tuple>

#include "comm/algorithm.h"
#include "comm/algorithms.h"
#include "core/error.h"

namespace braid::comm {

namespace {

constexpr uint32_t kWorldChannel = 0x62726431;  // "brd1"

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint32_t child_channel(uint32_t parent, uint32_t split, int colour) {
  uint64_t h = splitmix64(parent);
  h = splitmix64(h ^ split);
  h = splitmix64(h ^ static_cast<uint32_t>(colour));
  auto c = static_cast<uint32_t>(h ^ (h >> 32));
  return c == 0 || c == kWorldChannel ? c + 2 : c;
}

}  // namespace

std::shared_ptr<Group> Group::world(std::shared_ptr<Transport> transport, GroupOptions options) {
  BRAID_CHECK(transport != nullptr, "Group::world: null transport");
  std::vector<int> members(static_cast<size_t>(transport->size()));
  for (size_t i = 0; i < members.size(); ++i) members[i] = static_cast<int>(i);
  return std::make_shared<Group>(std::move(transport), std::move(members), kWorldChannel,
                                 std::move(options));
}

const SelectionTable& Group::algorithm_table() const {
  return options_.algorithm_table ? *options_.algorithm_table : SelectionTable::builtin();
}

Group::Group(std::shared_ptr<Transport> transport, std::vector<int> members, uint32_t channel,
             GroupOptions options)
    : transport_(std::move(transport)),
      members_(std::move(members)),
      channel_(channel),
      options_(std::move(options)) {
  BRAID_CHECK(transport_ != nullptr, "Group: null transport");
  BRAID_CHECK(!members_.empty(), "Group: no members");
  std::vector<int> sorted = members_;
  std::sort(sorted.begin(), sorted.end());
  BRAID_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
              "Group: a transport rank appears twice among the members");
  BRAID_CHECK(sorted.front() >= 0 && sorted.back() < transport_->size(),
              "Group: members must be transport ranks in [0, ", transport_->size(), ")");
  const auto it = std::find(members_.begin(), members_.end(), transport_->rank());
  BRAID_CHECK(it != members_.end(), "Group: transport rank ", transport_->rank(),
              " is not among the members");
  rank_ = static_cast<int>(it - members_.begin());
}

RequestId Group::isend(int to, uint32_t tag, const void* data, size_t bytes) {
  BRAID_CHECK(to >= 0 && to < size(), "Group::isend: rank ", to, " is not in this group of ",
              size());
  CallSignature sig;
  sig.count = bytes;
  return transport_->isend(global_rank(to), Tag{channel_, 0, tag}, sig, data, bytes);
}

RequestId Group::irecv(int from, uint32_t tag, void* data, size_t bytes) {
  BRAID_CHECK(from >= 0 && from < size(), "Group::irecv: rank ", from, " is not in this group of ",
              size());
  CallSignature sig;
  sig.count = bytes;
  return transport_->irecv(global_rank(from), Tag{channel_, 0, tag}, sig, data, bytes);
}

RequestId Group::irecv_any(uint32_t tag, void* data, size_t bytes, int* source) {
  CallSignature sig;
  sig.count = bytes;
  // Members are distinct transport ranks: all of them, in order, is the identity.
  if (source == nullptr || (members_.size() == static_cast<size_t>(transport_->size()) &&
                            std::is_sorted(members_.begin(), members_.end())))
    return transport_->irecv(kAnyRank, Tag{channel_, 0, tag}, sig, data, bytes, std::nullopt,
                             source);
  const RequestId id =
      transport_->irecv(kAnyRank, Tag{channel_, 0, tag}, sig, data, bytes, std::nullopt, source);
  any_sources_.push_back(AnySource{id, source});
  return id;
}

void Group::wait(std::span<const RequestId> requests, Deadline until) {
  if (requests.empty()) return;
  if (any_sources_.empty()) return transport_->wait(requests, until);
  try {
    transport_->wait(requests, until);
  } catch (...) {
    settle_sources(requests, false);
    throw;
  }
  settle_sources(requests, true);
}

bool Group::test(RequestId request) {
  if (any_sources_.empty()) return transport_->test(request);
  bool done = false;
  try {
    done = transport_->test(request);
  } catch (...) {
    settle_sources(std::span<const RequestId>(&request, 1), false);
    throw;
  }
  if (done) settle_sources(std::span<const RequestId>(&request, 1), true);
  return done;
}

void Group::settle_sources(std::span<const RequestId> requests, bool completed) {
  int stranger = -1;
  std::erase_if(any_sources_, [&](const AnySource& a) {
    if (std::find(requests.begin(), requests.end(), a.id) == requests.end()) return false;
    if (completed) {
      const auto it = std::find(members_.begin(), members_.end(), *a.source);
      if (it == members_.end())
        stranger = *a.source;
      else
        *a.source = static_cast<int>(it - members_.begin());
    }
    return true;
  });
  // Only members send on this group's channel; anything else is a broken promise.
  BRAID_CHECK(stranger < 0, "Group::irecv_any: a message on group channel ", channel_,
              " came from transport rank ", stranger, ", which is not a member");
}

std::shared_ptr<Group> Group::split(int colour, int key) {
  uint32_t seq = next_seq();
  if (seq == 0) seq = next_seq();  // 0 is point-to-point's
  CallSignature sig;
  sig.call = CallKind::split;
  sig.dtype = DType::i32;
  sig.algorithm = static_cast<uint8_t>(Algorithm::ring);
  sig.count = 2;
  const int32_t mine[2] = {colour, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(size()));
  if (size() == 1) {
    std::copy(mine, mine + 2, all.begin());
  } else {
    allgather_ring(CallContext{*this, seq, sig, options_.timeout}, mine, all.data(), 2);
  }
  ++splits_;
  if (colour < 0) return nullptr;

  std::vector<std::tuple<int, int>> chosen;  // (key, parent rank)
  for (int r = 0; r < size(); ++r)
    if (all[2 * static_cast<size_t>(r)] == colour)
      chosen.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
  std::sort(chosen.begin(), chosen.end());
  std::vector<int> members;
  members.reserve(chosen.size());
  for (const auto& [k, r] : chosen) members.push_back(global_rank(r));
  return std::make_shared<Group>(transport_, std::move(members),
                                 child_channel(channel_, splits_, colour), options_);
}

Mesh make_mesh(Group& world, int data, int tensor, int pipeline) {
  BRAID_CHECK(data >= 1 && tensor >= 1 && pipeline >= 1, "make_mesh: axis sizes must be >= 1, got ",
              data, " x ", tensor, " x ", pipeline);
  BRAID_CHECK(static_cast<int64_t>(data) * tensor * pipeline == world.size(), "make_mesh: ", data,
              " x ", tensor, " x ", pipeline, " = ", static_cast<int64_t>(data) * tensor * pipeline,
              " ranks, but the group has ", world.size());
  Mesh m;
  m.data_size = data;
  m.tensor_size = tensor;
  m.pipeline_size = pipeline;
  const int r = world.rank();
  m.tensor_index = r % tensor;
  m.data_index = (r / tensor) % data;
  m.pipeline_index = r / (tensor * data);
  // Every member splits in the same order: tensor, data, pipeline.
  m.tensor = world.split(m.pipeline_index * data + m.data_index, m.tensor_index);
  m.data = world.split(m.pipeline_index * tensor + m.tensor_index, m.data_index);
  m.pipeline = world.split(m.data_index * tensor + m.tensor_index, m.pipeline_index);
  return m;
}

}  // namespace braid::comm
