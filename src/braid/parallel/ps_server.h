// A parameter server: serves one key range of the model to the job's workers, running the
// range's optimizer on the gradients they push under the consistency rule of ps_shard.h,
// until every worker is done or lost. Speaks ps_protocol.h over the world group.
//
// One thread (the caller of run()) drives the group. Pulls that the rule does not allow
// yet (sync: the step's update is not applied; ssp: the worker is too far ahead; any: the
// initial parameters have not arrived) wait in a queue and are answered after the push that
// allows them. Each answer's sends complete before the next push changes the parameters, so
// a worker never reads a half-updated range.
//
// An evaluator (PsLayout::evaluators) pulls the current model whenever it asks and may stop
// the run; the server serves it until it says done, after the workers.
//
// Membership: a worker is gone when the transport reports its process gone (shared memory
// notices at once), when a message to or from it fails, or when it says it failed (a
// `fail` request: its run raised an error); it is lost when it stays silent past
// worker_timeout. Either way the server logs it by name and goes on: it no longer counts in
// sync steps or in SSP's slowest worker. Sync mode without a backup worker to cover it
// cannot go on, and run() throws an error naming the worker (and, when it fell silent,
// comm/blame.h's "no progress from job rank N"). A lost worker that speaks again (async,
// ssp: it was only slow) is counted again and pulls the current parameters; one silent
// past worker_deadline is gone. run() returns once every worker is done or gone and no
// lost one can still come back.
//
// The run failed, and run() throws saying why, when no worker finished (every one failed
// or was lost) or when the chief (worker 0, which saves the run) did not: a failed job
// never looks complete.
//
// Restarts (options.restarts, ps_restarts.h): a worker found dead may come back, so the
// server waits (bounded) for the launcher's word on it; once told of a restart it connects
// to the new process as soon as that published itself, and the newcomer's `rejoin` makes it
// count again from PsShard::rejoin_worker's step. A restarted server (layout.incarnation
// > 0) starts from options.resume_from (the run's checkpoint, not worker 0's init) and
// counts every worker as lost until it hears from it (or reads that it finished).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/group.h"
#include "parallel/ps_protocol.h"
#include "parallel/ps_push_codec.h"
#include "parallel/ps_restarts.h"
#include "parallel/ps_shard.h"

namespace braid::parallel {

struct PsServerOptions {
  PsLayout layout;
  int server = 0;  // this server's index, in [0, layout.servers)
  // The model's tensors (optimizer segments, in offset order) and its flat size: every
  // server cuts the same key ranges from them (key_ranges.h).
  std::vector<optim::Segment> segments;
  int64_t buffer_size = 0;
  optim::OptimizerConfig optimizer;
  PsRules rules;
  // How long a worker may stay silent before it counts as lost (0: never by silence), and
  // before a lost one counts as gone for good (the job's deadline; at least worker_timeout).
  std::chrono::milliseconds worker_timeout{0};
  std::chrono::milliseconds worker_deadline{0};
  // Writes the shard's snapshot into a checkpoint directory (the chief's save request);
  // null: saving is an error.
  std::function<void(const std::string& dir, const PsShardSnapshot&)> save{};
  // A resumed job: the shard starts from this instead of worker 0's initial parameters
  // (which are received and dropped). A restarted server starts from it at once.
  std::optional<PsShardSnapshot> resume_from{};
  // The launcher restarts dead processes (null: it does not).
  std::shared_ptr<PsRestarts> restarts{};
  // How pushes cross the wire (ps_push_codec.h): the workers' compression codec.
  CodecConfig push_codec{};
};

// What a server saw, for the run's metrics.
struct PsServerStats {
  int64_t version = 0;  // updates applied
  int64_t dropped = 0;  // sync: late gradients dropped
  int64_t pushes = 0, pulls = 0;
  std::vector<int64_t> staleness_histogram;
  std::vector<std::string> lost;  // "worker 1: its process is gone (...)", in order
  // Per worker: pushes, and the seconds since run() began of its first and last push (its
  // own rate is (pushes - 1) steps over the time between).
  std::vector<int64_t> worker_pushes;
  std::vector<double> first_push_s, last_push_s;
  // Restarted workers that rejoined: which, which restart, the step it went on at, and the
  // pushes this server had from that worker's earlier processes.
  struct Rejoin {
    int worker = 0;
    int incarnation = 0;
    int64_t step = 0;
    int64_t pushes_before = 0;
  };
  std::vector<Rejoin> rejoins;
};

class PsServer {
 public:
  PsServer(std::shared_ptr<comm::Group> world, PsServerOptions options);

  // Serves until every worker sent done or was lost. Throws braid::Error naming the worker
  // when sync mode cannot go on without a lost one, or for a request out of protocol.
  void run();

  const KeyRange& range() const { return range_; }
  // Valid once a worker's init arrived (after run() returned, always).
  const PsShard& shard() const { return *shard_; }
  PsServerStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  void handle(const PsRequest& r, int source);
  void handle_evaluator(const PsRequest& r, int source);
  bool may_answer(int64_t step) const;
  void finish_worker(int worker);
  void answer(int worker);
  void answer_waiting_pulls();
  // Marks workers silent past worker_timeout as lost (not those waiting for a pull's answer)
  // and, with `may_lose` (after a quiet wait), those whose process is gone. Returns how long
  // to wait for a request before the next check.
  std::chrono::milliseconds check_workers(bool may_lose);
  // Stops counting `worker`: `gone` for good, or only lost (silent) and may come back.
  void lose(int worker, const std::string& why, bool gone);
  // Receives a worker's message that follows its request, within the silence limit: false
  // (the worker counted gone) when it died or stopped sending halfway.
  bool receive_from_worker(int worker, uint32_t tag, void* data, size_t bytes);
  // How long the server waits on one worker's message or answer before giving up on it.
  std::chrono::milliseconds silence_limit() const;
  // While alive, the server is blocked on one worker's transfer; its duration is then
  // added to every other worker's last_heard_.
  class BlockedOn {
   public:
    BlockedOn(PsServer& server, int worker);
    ~BlockedOn();
    BlockedOn(const BlockedOn&) = delete;
    BlockedOn& operator=(const BlockedOn&) = delete;

   private:
    PsServer& server_;
    int worker_;
    Clock::time_point since_;
  };
  // A lost worker may still speak again before its deadline; a dead one may be restarted.
  bool may_come_back() const;
  // Restarts: reads the launcher's word on dead workers, connects to restarted ones that
  // published themselves, and gives up on those past their deadlines. Returns how long to
  // wait before looking again.
  std::chrono::milliseconds look_at_restarts();
  // A restarted worker's first request: it counts again.
  void rejoin(int worker);
  // A restarted server's start: the shard from the checkpoint, every worker lost or done.
  void start_restarted();
  // After run()'s loop: throws when no worker finished, or the chief did not.
  void check_outcome() const;

  std::shared_ptr<comm::Group> world_;
  PsServerOptions options_;
  KeyRange range_;
  std::vector<float> staging_;                  // a push's gradient, or the initial values
  std::unique_ptr<ChunkEncoder> push_decoder_;  // null: pushes are fp32
  std::vector<std::byte> push_wire_;            // an encoded push of the range
  std::optional<PsShard> shard_;
  struct WaitingPull {
    int worker;
    int64_t step;
  };
  std::deque<WaitingPull> waiting_;
  enum class Member : uint8_t { live, done, lost, gone };
  std::vector<Member> members_;
  std::vector<Clock::time_point> last_heard_;
  int64_t stop_at_ = -1;
  PsStopReason stop_reason_ = PsStopReason::none;
  int stop_worker_ = -1;
  std::vector<std::string> why_lost_;  // per worker: the last reason it stopped counting
  bool evaluator_live_ = false;
  int64_t pushes_ = 0, pulls_ = 0;
  Clock::time_point started_;
  std::vector<int64_t> worker_pushes_;
  std::vector<double> first_push_s_, last_push_s_;
  std::vector<std::string> lost_log_;
  // Restarts: per worker, the launcher's announced restart not rejoined yet, and since when
  // a worker found dead waits for the launcher's word.
  struct Comeback {
    int incarnation = 0;
    Clock::time_point since;
    bool connected = false;
  };
  std::vector<std::optional<Comeback>> comebacks_;
  std::vector<std::optional<Clock::time_point>> awaiting_word_;
  Clock::time_point next_restart_look_{};
  std::vector<bool> silent_since_restart_;  // a restarted server: not heard from yet
  std::vector<PsServerStats::Rejoin> rejoins_;
};

}  // namespace braid::parallel
