// ZeRO's shards for elastic training (parallel/state_shard.h): a rank's shard is its chunk
// of every bucket, the chunks its optimizers and (stage 3) its master weights cover.
#include <cstring>

#include "comm/group.h"
#include "core/error.h"
#include "parallel/zero.h"

namespace braid::parallel {
namespace {

// Point-to-point tag of the shards passed on at a commit (collectives never use p2p tags).
constexpr uint32_t kShardTag = 0x53484152;  // "SHAR"

}  // namespace

void Zero::cut_shard(StateShard& into) const {
  const int r = group_->rank();
  into.world = group_->size();
  into.rank = r;
  into.ranges.clear();
  for (const Bucket& b : buckets_)
    if (b.mine > 0) {
      into.ranges.push_back(b.chunk_begin(r));
      into.ranges.push_back(b.mine);
    }
  const int64_t floats = into.floats_per_vector();
  into.names.clear();
  for (const auto& [name, t] : buckets_.front().optimizer->state())
    if (t.dtype() == DType::f32) into.names.push_back(name);
  into.optimizer_steps = buckets_.front().optimizer->steps();
  into.values.resize(static_cast<size_t>(floats) * (1 + into.names.size()));
  float* out = into.values.data();
  for (const Bucket& b : buckets_) {
    if (b.mine == 0) continue;
    const float* params =
        zero_.stage == 3 ? master_.f32() + b.shard_offset : params_.params() + b.chunk_begin(r);
    std::memcpy(out, params, static_cast<size_t>(b.mine) * sizeof(float));
    size_t k = 0;
    for (const auto& [name, t] : b.optimizer->state()) {
      if (t.dtype() != DType::f32) continue;
      ++k;
      std::memcpy(out + k * static_cast<size_t>(floats), t.f32(),
                  static_cast<size_t>(b.mine) * sizeof(float));
    }
    out += b.mine;
  }
}

// The exchange runs on the progress thread, queued before the next step's reductions, so
// it overlaps that step's forward; `mine` stays as it is until the next commit (which
// writes the other slot) and `from_left` is not read before finish_passing_shard.
void Zero::pass_shard_on(const StateShard& mine, StateShard& from_left) {
  finish_passing_shard(false);
  const int n = group_->size(), r = group_->rank();
  from_left.step = -1;  // until the whole of it arrived
  if (n == 1) return;
  passing_.header = mine.header_bytes();
  passing_.into = &from_left;
  passing_.handle = engine_->submit(
      "passing the commit's shard to the next rank",
      [this, &mine, &into = from_left, n, r](comm::Group& g) {
        const int right = (r + 1) % n, left = (r + n - 1) % n;
        const int64_t size = static_cast<int64_t>(passing_.header.size());
        int64_t left_size = 0;
        const comm::RequestId sizes[2] = {g.isend(right, kShardTag, &size, sizeof size),
                                          g.irecv(left, kShardTag, &left_size, sizeof left_size)};
        g.wait(sizes);
        BRAID_CHECK(left_size >= 0 && left_size < (int64_t{1} << 30), "zero: rank ", left,
                    " announced a shard header of ", left_size, " bytes");
        passing_.left_header.resize(static_cast<size_t>(left_size));
        const comm::RequestId headers[2] = {
            g.isend(right, kShardTag, passing_.header.data(), passing_.header.size()),
            g.irecv(left, kShardTag, passing_.left_header.data(), passing_.left_header.size())};
        g.wait(headers);
        StateShard::from_header(passing_.left_header, into);
        into.step = -1;  // until finish_passing_shard
        into.values.resize(into.values_size());
        const comm::RequestId values[2] = {
            g.isend(right, kShardTag, mine.values.data(), mine.values.size() * sizeof(float)),
            g.irecv(left, kShardTag, into.values.data(), into.values.size() * sizeof(float))};
        g.wait(values);
      });
}

void Zero::finish_passing_shard(bool quietly) {
  if (!passing_.into) return;
  StateShard& into = *passing_.into;
  passing_.into = nullptr;
  try {
    passing_.handle.wait();
  } catch (const Error&) {
    if (!quietly) throw;
    return;  // `into` stays empty: the commit before keeps its copy
  }
  StateShard::from_header(passing_.left_header, into);  // its step, now that it is whole
  const int n = group_->size(), left = (group_->rank() + n - 1) % n;
  BRAID_CHECK(into.rank == left && into.world == n,
              "zero: the shard passed on from the previous rank is rank ", into.rank, " of ",
              into.world, "'s, not rank ", left, " of ", n, "'s");
}

optim::NamedTensors Zero::optimizer_state_layout() const {
  optim::NamedTensors out;
  for (const auto& [name, t] : buckets_.front().optimizer->state())
    out.emplace_back(name, t.dtype() == DType::f32
                               ? Tensor::empty({params_.size()}, DType::f32, MemCategory::other)
                               : t);
  return out;
}

}  // namespace braid::parallel
