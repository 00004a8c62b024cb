// The receiving half of a pull (ps_protocol.h), shared by workers and the evaluator: before
// any pull request goes out, post for every server the receive of its reply header and of
// its range of the parameters, so the answers land in place whenever they come.
#pragma once

#include <span>
#include <vector>

#include "comm/group.h"
#include "parallel/key_ranges.h"
#include "parallel/ps_protocol.h"

namespace braid::parallel {

// replies[s] and params[ranges[s]] receive server s's answer; returns the receives to wait on.
inline std::vector<comm::RequestId> post_pull_receives(comm::Group& world, const PsLayout& layout,
                                                       std::span<const KeyRange> ranges,
                                                       std::span<PsPullReply> replies,
                                                       float* params) {
  std::vector<comm::RequestId> ids;
  ids.reserve(ranges.size() * 2);
  for (int s = 0; s < layout.servers; ++s) {
    const KeyRange& r = ranges[static_cast<size_t>(s)];
    const int rank = layout.server_rank(s);
    ids.push_back(
        world.irecv(rank, kVersionTag, &replies[static_cast<size_t>(s)], sizeof(PsPullReply)));
    ids.push_back(world.irecv(rank, kParamsTag, params + r.begin,
                              static_cast<size_t>(r.size()) * sizeof(float)));
  }
  return ids;
}

}  // namespace braid::parallel
