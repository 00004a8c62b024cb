// What a job's launcher decided about the processes of its that died: an append-only log in
// the job's store, which the survivors read to learn whether a dead peer comes back (a
// parameter-server job under `braid launch --max-restarts K`).
//
// Keys (under the job's prefix): "restarts/count", the number of entries, and
// "restarts/<n>" (n = 1, 2, ...), one entry each: "<rank> <incarnation> restart|none", the
// incarnation being that of the process that died (0 for the first start). The launcher
// writes the entry before it starts the new process, so a survivor that sees a rank's new
// incarnation publish itself (rejoin_published) has already been able to read why.
//
// Thread safety: a RestartLog is used by one thread; the store is thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/deadline.h"
#include "comm/store.h"

namespace braid::comm {

struct RankRestart {
  int rank = 0;
  int incarnation = 0;     // restarts of the rank before the process that died
  bool restarted = false;  // false: no restarts were left; it stays gone
  bool operator==(const RankRestart&) const = default;
};

class RestartLog {
 public:
  explicit RestartLog(std::shared_ptr<Store> job_store);

  // The launcher's side.
  void record(const RankRestart& entry);
  // Entries written since the last call (one store round trip when there are none).
  std::vector<RankRestart> poll();
  // Waits, until `deadline`, for the entry about incarnation `incarnation` of `rank`
  // (reading and keeping every entry on the way); nullopt at the deadline.
  std::optional<RankRestart> await(int rank, int incarnation, Deadline deadline);
  // Every entry read so far, in log order.
  const std::vector<RankRestart>& entries() const { return entries_; }

 private:
  std::shared_ptr<Store> store_;
  std::vector<RankRestart> entries_;
};

}  // namespace braid::comm
