// What parameter-server workers and servers say to each other, over the job's world group
// (ranks: workers 0..W-1, then servers W..W+S-1; launch/cluster_spec.h's layout).
//
// Every exchange starts with a fixed-size PsRequest from a worker on kRequestTag; the
// server takes requests from whichever worker sends first (Group::irecv_any). What follows
// depends on the kind:
//   init  worker 0 sends the initial parameters of the server's range (kInitTag), once,
//         before anything else reaches that server;
//   push  the worker sends its gradient of the range (kPushTag) right after the request;
//   pull  (workers; the evaluator with step -1: whatever is current) the server answers,
//         when its consistency rule allows (ps_shard.h), with a
//         PsPullReply (kVersionTag) and then the range's parameters (kParamsTag); the
//         worker posts both receives before it sends the request. Once a stop is set, a
//         pull for a step at or past it is answered at once, whatever the rule;
//   stop  the chief decided the run is over: every worker stops before step `step` (a
//         worker learns it from its next pull's reply);
//   save  the chief saves a checkpoint: the directory's path follows (kSaveTag, `step`
//         bytes); the server writes its shard there and answers with its version
//         (kSavedTag, an int64) once the file is complete;
//   done  the worker's run ended well (finished, converged, or stopped at a step boundary
//         by a signal, with its checkpoint); a server stops once every worker is done or
//         lost;
//   fail  the worker's run failed (an error, a deadline): the server counts it lost at once
//         and never as finished, so a failed worker cannot make a job look complete;
//   rejoin a restarted worker (a new process in a dead worker's place, ps_restarts.h) asks
//         where to go on: the server counts it again and answers (kRejoinTag) with a
//         PsRejoinReply, the worker having posted that receive before it asked.
// Messages from one peer with one tag arrive in send order, so a push's gradient is the
// next kPushTag message from that worker.
#pragma once

#include <cstdint>

#include "comm/message.h"
#include "parallel/key_ranges.h"

namespace braid::parallel {

enum class PsRequestKind : uint32_t {
  init = 1,
  push = 2,
  pull = 3,
  done = 4,
  stop = 5,
  save = 6,
  fail = 7,
  rejoin = 8
};

struct PsRequest {
  PsRequestKind kind = PsRequestKind::pull;
  int32_t worker = 0;
  // push: the step the gradient is for; pull: the step about to run; stop: the first step
  // no worker runs
  int64_t step = 0;
  int64_t based_on = 0;  // push: the server version the worker's parameters came from
  float lr = 0;          // push: the learning rate of the worker's step
  uint32_t reserved = 0;
  int64_t weight = 1;  // push, federated: the samples the change sums over
};
static_assert(sizeof(PsRequest) == 40);

// Why a run stops early at PsPullReply::stop_at.
enum class PsStopReason : int32_t {
  none = 0,
  converged = 1,  // the chief (or the evaluator) judged the run converged
  // A worker left (done early, e.g. stopped by a signal) and sync mode cannot complete a
  // step without it: the run ends unfinished at its last step.
  worker_left = 2,
};

// The header of a pull's answer.
struct PsPullReply {
  int64_t version = 0;                            // updates applied to the range
  int64_t stop_at = -1;                           // >= 0: the run stops before this step
  int64_t live_workers = 0;                       // workers still training (0: the run is over)
  PsStopReason stop_reason = PsStopReason::none;  // why, when stop_at >= 0
  int32_t stop_worker = -1;                       // worker_left: which worker left
};
static_assert(sizeof(PsPullReply) == 32);

// The answer to a restarted worker's rejoin.
struct PsRejoinReply {
  int64_t step = 0;     // the step it continues at (PsShard::rejoin_worker)
  int64_t version = 0;  // updates applied to the range
  int64_t stop_at = -1;
  PsStopReason stop_reason = PsStopReason::none;
  int32_t stop_worker = -1;
};
static_assert(sizeof(PsRejoinReply) == 32);

// Named tags (comm::named_tag): a failed message's error names them ("tag 'pver'").
inline constexpr uint32_t kRequestTag = comm::named_tag("preq");  // a PsRequest
inline constexpr uint32_t kInitTag = comm::named_tag("pini");     // the initial parameters
inline constexpr uint32_t kPushTag = comm::named_tag("push");     // a push's gradient
inline constexpr uint32_t kVersionTag = comm::named_tag("pver");  // a pull's PsPullReply
inline constexpr uint32_t kParamsTag = comm::named_tag("ppar");   // a pull's parameters
inline constexpr uint32_t kSaveTag = comm::named_tag("psav");     // a save's directory
inline constexpr uint32_t kSavedTag = comm::named_tag("pdon");    // a save's answer: done
inline constexpr uint32_t kRejoinTag = comm::named_tag("prej");   // a rejoin's answer

// Who is who in a job of `workers` workers, `servers` servers and at most one evaluator
// (the last rank), which pulls the model to evaluate it and makes the stop decisions.
struct PsLayout {
  int workers = 1;
  int servers = 1;
  int evaluators = 0;  // 0 or 1
  // This process's restarts before it: > 0 for a new process in the place of a dead worker
  // or server (ps_restarts.h), which joins the running job instead of starting it.
  int incarnation = 0;
  int size() const { return workers + servers + evaluators; }
  int server_rank(int server) const { return workers + server; }
  bool is_worker(int rank) const { return rank < workers; }
  bool is_evaluator(int rank) const { return evaluators > 0 && rank == workers + servers; }
};

}  // namespace braid::parallel
