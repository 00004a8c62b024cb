// A parameter-server worker (strategy "ps"): each step pulls every server's key range into
// its parameter buffer, runs forward and backward on its batch, and pushes each range of
// the gradient to its server, which applies it under the job's consistency rule
// (ps_shard.h). The worker holds no optimizer state that matters: the servers run the
// optimizer (the strategy's own optimizer object is never stepped).
//
// Worker 0 sends each server the initial parameters of its range before its first pull
// (so weights loaded after construction, from a checkpoint or --init-from, are what the
// servers start from). The workers' own group (split from the world: servers take no part)
// carries sums over ranks (stop votes, in sync mode). finish() tells every server this
// worker is done; the destructor does it if the caller did not, unless an exception is
// unwinding: then it tells them this worker failed, so a failed worker never counts as
// finished.
//
// Stopping: the chief (worker 0) announces a stop to every server; each worker learns it
// from its next pull's reply and stops at that step boundary (stop_announced()). A server
// that dies fails this worker's next wait with an error naming it, unless the launcher
// restarts it (set_restarts, ps_restarts.h): then the worker waits for the new process
// (bounded by the job's deadline), connects to it and goes on. What was under way with the
// dead server is redone where it must be (a pull, a request, a checkpoint's save) and
// dropped where the restart loses it anyway (a push: the new server starts from the run's
// last checkpoint, so every update the dead one applied since is lost).
//
// A restarted worker (layout.incarnation > 0) joins the running job: it is in no
// collective (no workers' group, no init), and rejoin() asks the servers where it goes on.
// Every wait on a server is that server's alone, so one server's failure leaves the
// exchanges with the others intact.
//
// A server's range is pushed as soon as backward has made all of it final (the last layers'
// server first), so pushes overlap the rest of backward; with micro-batches, after the last.
// Every range is requested before forward, the first layers' server first, and forward
// waits for a server's range only before the first layer that reads it
// (ParamSet::about_to_use), so the first layers compute while the rest is on the way. One
// thread drives the world group: the rank's compute thread.
//
// Priority scheduling (scheduler.priority; ByteScheduler's credit on a worker's link): a
// pull requests the ranges in layer order with at most `pull credit` bytes of them
// requested and not yet landed (at least one range), and requests the next as one lands or
// as forward asks for it, so the first layers' range has the link to itself instead of
// sharing it with every other server's answer. Without it every range is requested at once.
//
// With a compression codec (ps_push_codec.h) each server's range of a push is encoded, with
// this worker's error-feedback memory of that range, into a buffer of the range's encoded
// size; last_codec_report() gives the step's bytes against fp32's.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "comm/group.h"
#include "core/timer.h"
#include "parallel/micro_batches.h"
#include "parallel/partition_tuner.h"
#include "parallel/ps_protocol.h"
#include "parallel/ps_push_codec.h"
#include "parallel/ps_restarts.h"
#include "parallel/strategy.h"

namespace braid::parallel {

class PsWorker : public Strategy {
 public:
  PsWorker(std::unique_ptr<nn::Module> module, StepOptions options,
           std::shared_ptr<comm::Group> world, PsLayout layout, const CodecConfig& push_codec = {});
  ~PsWorker() override;

  std::string_view name() const override { return "ps"; }
  double step(const data::Batch& batch, float lr, int64_t step) override;
  // ps-lite's worker calls (KVWorker's Push, Pull and Wait): each starts its exchange with
  // every server's range at once and returns a timestamp; wait(ts) completes it, and after a
  // pull's wait the parameters and versions are in place. One pull and one push at a time
  // (a pull lands in the parameter buffer, a push reuses its requests); a server's messages
  // from this worker arrive in the order started, so a pull started after a push sees it.
  int start_pull(int64_t step);
  // Pushes the gradient buffer as step `step`'s at rate `lr` (fedavg: a change weighted by
  // `weight` samples): the ranges not already pushed when backward made them final.
  int start_push(float lr, int64_t step, int64_t weight = 1);
  void wait(int timestamp);
  // Pulls the servers' current parameters (sync mode: after `step` updates).
  void pull(int64_t step) { wait(start_pull(step)); }
  void push(float lr, int64_t step, int64_t weight = 1) { wait(start_push(lr, step, weight)); }
  // Pulls the parameters after the last step this worker took (sync mode: once every
  // worker's gradient of that step is applied), so evaluation and checkpoints see the
  // servers' model, not the one this worker computed its last step on.
  void synchronize() override { pull(next_step_); }
  void sum_over_ranks(double* values, size_t count, const char* what) override;
  void start_sum_over_ranks(double* values, size_t count, const char* what) override;
  void finish_sum_over_ranks() override;
  int rank() const override { return workers_->rank(); }
  int world_size() const override { return workers_->size(); }
  // Each worker's stop request is its own, in every mode: the servers end the others'
  // steps (a done worker's last step bounds what sync mode can still complete).
  bool ranks_step_together() const override { return false; }
  // Only the chief evaluates (the others' models are the servers', which it reads too), and
  // not even it when the job has an evaluator.
  bool evaluates() const override { return world_->rank() == 0 && layout_.evaluators == 0; }
  void announce_stop(int64_t step) override;
  // The chief's checkpoint: every server writes its range and optimizer state into `dir`.
  void save_outside(const std::string& dir) override;
  bool stop_announced() const override { return stop_at_ >= 0 && next_step_ >= stop_at_; }
  std::string stop_unfinished_reason() const override;
  // The launcher restarts the job's dead processes: reconnect to restarted servers, and mark
  // this worker's run done in the store when it finishes.
  void set_restarts(std::shared_ptr<PsRestarts> restarts);
  // A restarted worker: tells every server it is back and returns the step it goes on at
  // (the latest any server gives: PsShard::rejoin_worker); a stop already decided is taken.
  int64_t rejoin();
  // Tells every server this worker's run ended well (once). Destroyed without it while an
  // exception unwinds, the worker tells them it failed instead (PsRequestKind::fail).
  void finish() override;

  const CodecReport& last_codec_report() const override { return codec_report_; }
  // Pulls request at most `bytes` of ranges ahead of their arrival (0: all at once).
  void set_pull_credit(size_t bytes) { pull_credit_ = bytes; }
  // The credit measured on the first steps instead (partition_tuner.h): every range at once,
  // a quarter of the bytes, one range at a time. Each worker picks alone, by its own step
  // times: the credit orders only its own link, and no result depends on it.
  void tune_pull_credit();
  // The tuner of the credit (null when the credit is given).
  const PartitionTuner* pull_tuner() const { return pull_tuner_ ? &*pull_tuner_ : nullptr; }
  // The most bytes of ranges a pull has had requested and not landed, since the start.
  size_t most_pull_bytes_in_flight() const { return most_pull_in_flight_; }

  const std::vector<KeyRange>& ranges() const { return ranges_; }
  // The version of each server's range that the parameters hold now.
  const std::vector<int64_t>& versions() const { return versions_; }

 private:
  using Ids = std::vector<comm::RequestId>;
  void seed_servers();
  // Starts pushing server `s`'s range of the gradient (request and payload, not waited for).
  void send_range(int s, float lr, int64_t step, int64_t weight);
  void on_ready(int64_t begin, int64_t end);
  // Forward is about to read [begin, end): completes the pull from the servers holding it.
  void on_use(int64_t begin, int64_t end);
  // Posts server s's answer to a pull (its reply and its range of the parameters) and asks.
  Ids start_pull_from(int s, int64_t step);
  // Requests the pull under way from the next servers in layer order, within the credit
  // (all of them without one), and at least up to server `upto` (-1: none required).
  struct Pending;
  void request_pulls(Pending& pull, int upto);
  // Completes server `s`'s answer to the pull under way (once).
  void receive_pull_from(size_t s);
  // Sends `r` to server s and waits for the send, reconnecting to a restarted server.
  void request(int server, const PsRequest& r);
  // The same without reconnecting (a destructor's last word, the initial parameters).
  void request_once(int server, const PsRequest& r);
  // Waits on requests to server s alone; its failure becomes an error naming it and `what`.
  void wait_server(int s, const Ids& ids, const char* what);
  // Asks server s where this restarted worker goes on, into *reply. Its process may never
  // have connected to this one (it does so as it learns of the restart), so its death would
  // fail no request here: the launcher's word on it is watched too, and a server restarted
  // meanwhile is reconnected and asked again.
  void rejoin_server(int s, PsRejoinReply* reply);
  // Server s failed (`e`) while talking to its process `incarnation`: rethrows unless the
  // launcher restarted it, else connects to the new process (at once when that happened
  // already) and returns, the caller redoing what must be redone.
  void reconnect(int s, int incarnation, const comm::PeerError& e);
  // The rest of it, given the launcher's word on the dead process.
  void connect_restarted(int s, const comm::RankRestart& word, const comm::PeerError& e);
  // The process of server s this worker's transport talks to (its restarts before it). Not
  // the latest the launcher's log knows of: a look at the log for one server reads every
  // server's restarts, before this worker has connected to them.
  int server_incarnation(int s) const { return attached_.at(static_cast<size_t>(s)); }

  std::shared_ptr<comm::Group> world_;
  std::shared_ptr<comm::Group> workers_;  // null on a restarted worker
  PsLayout layout_;
  std::shared_ptr<PsRestarts> restarts_;
  std::vector<int> attached_;  // server_incarnation()
  std::vector<KeyRange> ranges_;
  std::vector<int64_t> versions_;
  std::vector<PsPullReply> replies_;
  // pull_arrived_[s]: the pull under way has received server s's answer (all true when
  // no pull is under way).
  std::vector<bool> pull_arrived_;
  // The pull under way: the next server to request, and the bytes requested and not landed.
  size_t pull_credit_ = 0;
  std::optional<PartitionTuner> pull_tuner_;
  Stopwatch since_step_;  // for the tuner: from one step's start to the next's
  int next_pull_ = 0;
  size_t pull_in_flight_ = 0, most_pull_in_flight_ = 0;
  double waited_in_forward_ = 0;  // seconds this step's forward waited for pulls
  // Exchanges started and not yet waited for, by timestamp: each server's requests, and the
  // server's process they went to.
  struct Pending {
    int timestamp = 0;
    bool is_pull = false;
    int64_t step = 0;  // a pull's
    std::vector<Ids> by_server = {};
    std::vector<int> incarnations = {};
  };
  std::vector<Pending> pending_;
  int next_timestamp_ = 0;
  // The push under way: armed for the step's last backward, each server's floats reported
  // final so far, whether its push started, and the requests to wait for.
  struct PushInFlight {
    bool armed = false;
    float lr = 0;
    int64_t step = 0;
    std::vector<int64_t> final_floats;
    std::vector<bool> started;
    std::vector<PsRequest> requests;
    std::vector<Ids> ids;
  } push_;
  // The push's encoding (null: fp32), and per server its error-feedback memory and the
  // encoded range, which stays unchanged until the push's send completes.
  std::unique_ptr<ChunkEncoder> push_encoder_;
  std::vector<std::vector<float>> push_memory_;
  std::vector<std::vector<std::byte>> push_wire_;
  std::vector<double> push_memory_norm2_;
  CodecReport push_report_;   // the push being sent
  CodecReport codec_report_;  // the last push sent whole
  bool seeded_ = false;
  int64_t stop_at_ = -1;
  PsStopReason stop_reason_ = PsStopReason::none;
  int stop_worker_ = -1;
  MicroBatches micro_;
  // start_sum_over_ranks's values, summed (blocking) in finish_sum_over_ranks.
  double* pending_values_ = nullptr;
  size_t pending_count_ = 0;
  const char* pending_what_ = nullptr;
  bool finished_ = false;
  int64_t next_step_ = 0;  // the step after the last one taken
};

}  // namespace braid::parallel
