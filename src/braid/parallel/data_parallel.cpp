#include "parallel/data_parallel.h"

#include "comm/group.h"
#include "parallel/rank0_broadcast.h"
#include "parallel/share_weight.h"

namespace braid::parallel {

DataParallel::DataParallel(std::unique_ptr<nn::Module> module, StepOptions options,
                           std::shared_ptr<comm::Group> group, DataParallelOptions common)
    : Strategy(std::move(module), std::move(options)),
      group_(std::move(group)),
      common_(std::move(common)) {
  BRAID_CHECK(group_, "a data-parallel strategy needs a group");
  BRAID_CHECK(common_.bucket_bytes > 0 && common_.first_bucket_bytes > 0,
              "bucket sizes must be > 0");
  weight_ = parallel::share_weight(common_.global_batch, group_->rank(), group_->size());
}

DataParallel::~DataParallel() { stop_engine(); }

void DataParallel::make_reducer(ReducerOptions options, const WireAllocator& wire) {
  reducer_ = std::make_unique<GradientReducer>(params_, group_, std::move(options));
  reducer_->prepare(wire);
}

void DataParallel::start_engine() {
  engine_ = std::make_unique<comm::ProgressEngine>(group_);
  reducer_->use_engine(engine_.get());
  if (common_.batchnorm_reducer) common_.batchnorm_reducer->use_engine(engine_.get());
  params_.add_ready_listener([this](int64_t begin, int64_t end) { on_ready(begin, end); });
}

void DataParallel::stop_engine() {
  if (reducer_) reducer_->abort();  // a step's exchange waiting for a backward that ended
  if (common_.batchnorm_reducer) common_.batchnorm_reducer->use_engine(nullptr);
  engine_.reset();
  if (reducer_) reducer_->use_engine(nullptr);
}

int DataParallel::rank() const { return group_->rank(); }
int DataParallel::world_size() const { return group_->size(); }

void DataParallel::on_ready(int64_t begin, int64_t end) {
  if (!communicate_) return;
  // The last micro-batch completes this range's sum over the rank's micro-batches.
  if (micro_sum_.count() > 1) {
    float* grads = params_.grad_memory();
    micro_sum_.add(micro_sum_.count() - 1, grads, grads, begin, end);
  }
  reducer_->on_ready(begin, end, [this](size_t i) { start_bucket(i); });
}

double DataParallel::run_micro_batches(const data::Batch& batch, int64_t step, bool every_micro) {
  const int n = group_->size();
  const int m = options_.accumulate_steps;
  micro_.split(batch, m);
  params_.zero_grads();
  double loss_sum = 0;
  // Deterministic mode sums the micro-batches' gradients in a fixed tree (tree_sum.h), each
  // computed alone and scaled by the share's weight only; otherwise backward accumulates
  // them in place. A weight of 1 leaves the scale's bits as they were.
  const bool tree = micro_sum_.count() > 1;
  const float scale =
      (m > 1 && !options_.deterministic ? 1.0f / static_cast<float>(m) : 1.0f) * weight_;
  float* grads = params_.grad_memory();
  for (int p = 0; p < m; ++p) {
    const int k = tree ? micro_sum_.order()[static_cast<size_t>(p)] : p;
    if ((tree || every_micro) && p > 0) params_.zero_grads();
    before_micro(p);
    // Micro-batch k of rank r holds global rows r + n k (mod n m): its dropout stream.
    loss_sum += forward_loss(micro_[k], step, group_->rank() + int64_t{n} * k, scale);
    communicate_ = every_micro || p == m - 1;
    if (communicate_) reducer_->arm(step);
    before_backward(p);
    backward();
    communicate_ = false;
    if (tree && p < m - 1) micro_sum_.add(p, grads, grads, 0, params_.size());
    after_micro(p);
  }
  return loss_sum / m;
}

float DataParallel::average_factor() const {
  const int terms =
      options_.deterministic ? group_->size() * options_.accumulate_steps : group_->size();
  return 1.0f / static_cast<float>(terms);
}

void DataParallel::publish_codec_report() {
  codec_report_ = reducer_->take_report();
  if (timeline_ && codec_report_.wire_bytes > 0) {
    const int64_t now = Timeline::now();
    timeline_->record(TimelineLane::kComm, "gradient bytes on the wire", now, now,
                      {"bytes", static_cast<int64_t>(codec_report_.wire_bytes)},
                      {"dense_bytes", static_cast<int64_t>(codec_report_.dense_bytes)});
  }
}

void DataParallel::broadcast_buffers() { broadcast_model_buffers(*engine_, params_); }

void DataParallel::sum_over_ranks(double* values, size_t count, const char* what) {
  engine_->iallreduce(values, count, DType::f64, ReduceOp::sum, comm::OpLabel(what)).wait();
}

void DataParallel::start_sum_over_ranks(double* values, size_t count, const char* what) {
  BRAID_CHECK(pending_sum_.done(), "a sum over ranks is already under way");
  pending_sum_ = engine_->iallreduce(values, count, DType::f64, ReduceOp::sum, comm::OpLabel(what));
}

void DataParallel::finish_sum_over_ranks() {
  pending_sum_.wait();
  pending_sum_ = {};
}

}  // namespace braid::parallel
