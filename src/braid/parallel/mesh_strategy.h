// Model parallelism on a data x tensor x pipeline mesh (docs/ARCHITECTURE.md,
// "Strategies"): D x T x P = the job's ranks, laid out by comm::make_mesh (tensor
// fastest), with a sub-group per axis.
//
// Pipeline axis (P stages): the trained model's units (nn::Module::pipeline_units:
// Sequential's children; the GPT's embedding, blocks and head) cut into P contiguous
// stages; each step's batch cut into M micro-batches (MicroBatches' interleaved rows, as
// gradient accumulation cuts it) that flow through the stages, activations forward and
// their gradients back, point to point.
// - Stages are balanced by measured time: at the first step every rank times each unit's
//   forward and backward on the first micro-batch, the times are averaged over the ranks
//   (so every rank cuts alike) and the cut minimising the slowest stage is taken and
//   printed (balance_stages).
// - Schedules: GPipe or 1F1B (pipeline_schedule.h). A stage keeps the caches of the
//   micro-batches in flight (M under GPipe, at most P - s under 1F1B); with recompute it
//   keeps only its inputs and runs its forward again just before each backward.
// - Tied weights (the GPT's wte, read by the embedding on the first stage and the head on
//   the last): the stage that declares one owns and updates it; the stage that reads it
//   sends its gradient over (in deterministic mode each micro-batch's, into the owner's
//   gradient before the embedding adds its own: the one-process order) and receives the
//   updated values after each step.
// - Deterministic mode: every stage sums its micro-batches' gradients in tree_sum.h's
//   order: with D = T = 1 the run equals one process accumulating M micro-batches bit for
//   bit.
// Tensor axis (T ranks): the GPT cut by width (nn/gpt_tensor_parallel.h; the loss is the
// vocabulary-parallel cross-entropy) or a Sequential model's Linear pairs
// (nn/sequential_tensor_parallel.h); tensor_shards.h maps the parts to the full layout.
// Each rank trains its shard.
// Data axis (D replicas): each replica steps on its share of the global batch; a stage's
// gradients are averaged over the replicas before the update.
//
// Every rank holds the full model (the strategy's module(), initialised alike) for
// evaluation and checkpoints only; it trains its stage's range of its (tensor-local)
// parameters with an optimizer over that range. synchronize() (before evaluation and
// checkpoints) rebuilds the full model on every rank, so evaluation runs the whole model on
// each rank's share of the split and checkpoints keep the one-process layout (they resume
// as DDP, one process or PyTorch). Clipping takes the global norm from every stage's and
// shard's sum of squares; fp16's overflow is voted so all ranks skip together; the loss
// reaches every rank in the step's closing all-reduce.
//
// Communication runs on a progress thread (comm::ProgressEngine over the whole job), in
// each rank's program order: a send leaves while the stage computes its next micro-batch.
// Every wait has the group's deadline: a rank that dies makes its neighbours' waits fail
// naming it, and every other rank's at the step's closing all-reduce.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"
#include "comm/progress_engine.h"
#include "parallel/group_tensor_reducer.h"
#include "parallel/micro_batches.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/strategy.h"
#include "parallel/tensor_shards.h"

namespace braid::parallel {

struct MeshShape {
  int data = 1, tensor = 1, pipeline = 1;
};

struct PipelineOptions {
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  int chunks = 1;          // interleaved: chunks of layers a rank (v)
  bool recompute = false;  // keep only each stage's inputs; forward again in backward
  // Unit boundaries (stages x chunks + 1 values, 0 first, the unit count last) instead of
  // the measured balance; empty: measure.
  std::vector<size_t> cut;
  // The data axis: each stage's gradients cross it in buckets of this size, through this
  // codec (gradient_reducer.h).
  size_t data_bucket_bytes = size_t{25} << 20;
  CodecConfig data_codec = {};
};

// Where a stage's time went in the last step, seconds. bubble() is the idle fraction of the
// schedule: the time spent waiting for a neighbour.
struct PipelineTimes {
  double compute = 0;   // forwards, losses and backwards
  double waiting = 0;   // for an activation, a gradient or a tied weight, or for the slowest
                        // stage at the step's end (the pipeline draining)
  double schedule = 0;  // from the step's start until every stage is done with the batch
  double bubble() const { return schedule > 0 ? waiting / schedule : 0; }
};

class MeshStrategy : public Strategy {
 public:
  MeshStrategy(std::unique_ptr<nn::Module> module, StepOptions options,
               std::shared_ptr<comm::Group> world, MeshShape shape, PipelineOptions pipeline);
  ~MeshStrategy() override;

  // "pipeline", "tensor" (one axis) or "mesh".
  std::string_view name() const override;
  const CodecReport& last_codec_report() const override { return codec_report_; }
  double step(const data::Batch& batch, float lr, int64_t step) override;
  void sync_parameters() override;
  void synchronize() override;
  void sum_over_ranks(double* values, size_t count, const char* what) override;
  void start_sum_over_ranks(double* values, size_t count, const char* what) override;
  void finish_sum_over_ranks() override;
  int rank() const override;
  int world_size() const override;
  void gather_for_checkpoint() override;
  std::string_view optimizer_name() const override;
  optim::NamedTensors optimizer_state() const override;
  void load_optimizer_state(const optim::NamedTensors& state) override;
  optim::NamedTensors optimizer_state_layout() const override;
  void keep_gathered_copy(bool on) override { keep_copy_ = on; }
  bool holds_gathered_state() const override {
    return world_->rank() == 0 || (keep_copy_ && world_->rank() == 1);
  }

  const comm::Mesh& mesh() const { return mesh_; }
  int stage() const { return mesh_.pipeline_index; }
  int stages() const { return mesh_.pipeline_size; }
  // Unit boundaries of the chunks (stages x chunks; after the first step, or from the
  // options).
  const std::vector<size_t>& cut() const { return cut_; }
  // "stage 0: embedding..h.2 | stage 1: ..." (after the cut is known).
  std::string describe_cut() const;
  // "2 data x 2 tensor x 1 pipeline; rank r = (data d, tensor t, stage s)".
  std::string describe_placement() const;
  const PipelineTimes& last_pipeline_times() const { return ptimes_; }
  // The parameters this rank trains: its tensor shard of the model (all of it when T = 1).
  int64_t local_floats() const { return tparams_->size(); }
  nn::ParamSet& trained_params() { return *tparams_; }
  // The floats of this rank's chunks of them; the optimizer's state is over these.
  int64_t stage_floats() const;

 private:
  struct Slot;
  struct Chunk;
  struct Tie;

  void measure_and_cut(const data::Batch& micro);
  void prepare_stage();
  double loss_and_gradient(const Tensor& logits, const Tensor& targets, float scale);
  void forward_action(Chunk& c, int position, int64_t step);
  void backward_action(Chunk& c, int position, int64_t step);
  void run_units_forward(Chunk& c, Slot& slot, const Tensor& x, const nn::ForwardContext& ctx);
  void finish_ties_after_backward();
  void average_over_data(Chunk& c, float* grads, int64_t step);
  void finish_average_over_data(Chunk& c, float* grads);
  void send_updated_ties();
  void settle_tied_values();
  void wait_timed(const comm::Handle& handle);
  static void wait_all(std::vector<comm::Handle>& handles);
  comm::Handle start_receive(comm::Group* g, int from, uint32_t tag, void* data, size_t bytes,
                             comm::OpLabel label);
  void post_send(comm::Group* g, int to, uint32_t tag, const void* data, size_t bytes,
                 comm::OpLabel label, std::vector<comm::Handle>& into);
  // A collective on a sub-group, as an operation of the engine; waits.
  void on_engine(comm::OpLabel label, const std::function<void(comm::Group&)>& fn);
  // The parameters of chunk c (among all), in floats of the trained layout.
  std::pair<int64_t, int64_t> range_of_chunk(int c) const;
  int chunk_count() const { return stages() * popts_.chunks; }
  int stage_of_chunk(int c) const { return c % stages(); }

  std::shared_ptr<comm::Group> world_;
  comm::Mesh mesh_;
  comm::Group* pipe_ = nullptr;  // mesh_.pipeline
  PipelineOptions popts_;
  std::unique_ptr<GroupTensorReducer> reducer_;  // T > 1
  CodecReport codec_report_;                     // the data axis's, this step
  std::unique_ptr<TensorShards> shards_;         // T > 1
  nn::Module* tmodule_ = nullptr;                // what is trained: shards_'s model or module_
  nn::ParamSet* tparams_ = nullptr;              // and its parameters
  std::vector<nn::PipelineUnit> units_;
  std::vector<size_t> cut_;
  size_t first_learning_unit_ = 0;  // below it no unit needs dL/dx
  std::vector<Chunk> chunks_;       // this rank's, in order
  bool prepared_ = false;
  bool full_current_ = true;  // params_ holds the trained values
  std::vector<Tie> ties_;
  optim::NamedTensors loaded_state_;   // loaded before the cut was known
  optim::NamedTensors gathered_full_;  // rank 0 (and 1, keep_copy_): gathered for a checkpoint
  bool keep_copy_ = false;

  MicroBatches micro_;
  std::vector<int> order_;               // position -> micro-batch
  Tensor dy_;                            // a received gradient, or the loss's
  Tensor loss_work_;                     // the vocabulary-parallel loss's scratch
  int64_t vocab_ = 0, vocab_first_ = 0;  // > 0: the loss is vocabulary-parallel
  std::vector<PipelineAction> actions_;
  std::vector<comm::Handle> sends_;  // the tied values' sends
  float grad_scale_ = 1;
  double loss_sum_ = 0;
  PipelineTimes ptimes_;
  comm::Handle pending_sum_;
  // Last: destroyed first, finishing the sends that read the buffers above.
  std::unique_ptr<comm::ProgressEngine> engine_;
};

}  // namespace braid::parallel
