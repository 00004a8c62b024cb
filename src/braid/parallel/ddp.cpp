#include "parallel/ddp.h"

#include <algorithm>
#include <cstring>

#include "comm/collectives.h"
#include "comm/group.h"
#include "core/convert.h"
#include "core/memory.h"
#include "core/timer.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "parallel/buckets.h"
#include "parallel/rank0_broadcast.h"
#include "parallel/same_model.h"
#include "parallel/share_weight.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {

Ddp::Ddp(std::unique_ptr<nn::Module> module, StepOptions options,
         std::shared_ptr<comm::Group> group, DdpOptions ddp)
    : Strategy(std::move(module), std::move(options)), group_(std::move(group)), ddp_(ddp) {
  BRAID_CHECK(group_, "ddp needs a group");
  BRAID_CHECK(ddp_.bucket_bytes > 0 && ddp_.first_bucket_bytes > 0,
              "ddp: bucket sizes must be > 0");
  weight_ = parallel::share_weight(ddp_.global_batch, group_->rank(), group_->size());
  declare();
  check_same_model(*group_, params_, "ddp");
  build([this](size_t bytes, MemCategory category) -> nn::FlatMemory {
    // Shared memory is counted under its category too, for as long as ParamSet holds it.
    auto counted = [bytes, category] {
      MemoryTracker::process().on_alloc(category, bytes);
      return std::shared_ptr<void>(
          nullptr, [bytes, category](void*) { MemoryTracker::process().on_free(category, bytes); });
    };
    if (category == MemCategory::gradients && ddp_.shared_gradients) {
      shared_grads_ = comm::allocate_shared(*group_, bytes);
      return {shared_grads_.as<float>(), counted()};
    }
    if (category == MemCategory::parameters && ddp_.shared_parameters) {
      shared_params_ = comm::allocate_shared(*group_, bytes);
      return {shared_params_.as<float>(), counted()};
    }
    auto buffer = std::make_shared<Buffer>(bytes, category);
    return {static_cast<float*>(buffer->data()), buffer};
  });
  make_buckets();
  if (ddp_.comm_dtype != DType::f32) {
    BRAID_CHECK(ddp_.comm_dtype == DType::bf16 || ddp_.comm_dtype == DType::f16,
                "ddp: comm_dtype must be fp32, bf16 or fp16, got ", dtype_name(ddp_.comm_dtype));
    BRAID_CHECK(!options_.deterministic, "ddp: comm_dtype ", dtype_name(ddp_.comm_dtype),
                " cannot be combined with deterministic (its rank-ordered exchange is fp32); "
                "drop one of them");
    const auto bytes = static_cast<size_t>(params_.size()) * sizeof(uint16_t);
    if (ddp_.shared_gradients) {
      shared_comm_ = comm::allocate_shared(*group_, bytes);
      comm_ = shared_comm_.as<uint16_t>();
    } else {
      private_comm_.assign(static_cast<size_t>(params_.size()), 0);
      comm_ = private_comm_.data();
    }
  }
  if (options_.deterministic) {
    // The exchange of the largest bucket, in shares of a whole number of floats per rank.
    const int n = group_->size();
    int64_t largest = 0;
    for (const Bucket& b : buckets_) largest = std::max(largest, b.end - b.begin);
    const auto size = static_cast<size_t>((largest + n - 1) / n * n);
    send_.assign(size, 0.0f);
    recv_.assign(size, 0.0f);
    if (options_.accumulate_steps > 1)
      micro_sum_ = TreeSum(params_.size(), static_cast<int>(options_.accumulate_steps));
  }
  engine_ = std::make_unique<comm::ProgressEngine>(group_);
  if (ddp_.batchnorm_reducer) ddp_.batchnorm_reducer->use_engine(engine_.get());
  sync_parameters();
  params_.add_ready_listener([this](int64_t begin, int64_t end) { on_ready(begin, end); });
}

Ddp::~Ddp() {
  if (ddp_.batchnorm_reducer) ddp_.batchnorm_reducer->use_engine(nullptr);
}

int Ddp::rank() const { return group_->rank(); }
int Ddp::world_size() const { return group_->size(); }

void Ddp::make_buckets() {
  for (const FloatRange& r : bucket_ranges(params_, ddp_.first_bucket_bytes, ddp_.bucket_bytes)) {
    Bucket b;
    b.begin = r.begin;
    b.end = r.end;
    buckets_.push_back(std::move(b));
  }
}

void Ddp::on_ready(int64_t begin, int64_t end) {
  if (!communicate_) return;
  // The last micro-batch completes this range's sum over the rank's micro-batches.
  if (micro_sum_.count() > 1) {
    float* grads = params_.grad_memory();
    micro_sum_.add(micro_sum_.count() - 1, grads, grads, begin, end);
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const int64_t lo = std::max(b.begin, begin), hi = std::min(b.end, end);
    if (lo >= hi) continue;
    b.pending -= hi - lo;
    if (b.pending == 0) start_bucket(i);
  }
}

void Ddp::start_bucket(size_t index) {
  Bucket& b = buckets_[index];
  float* data = params_.grad_memory() + b.begin;
  const auto count = static_cast<size_t>(b.end - b.begin);
  const comm::OpLabel label("allreduce of gradient bucket", static_cast<int64_t>(index));
  if (options_.deterministic) {
    b.handle = engine_->submit(label, [this, &b](comm::Group& g) { ordered_allreduce(g, b); });
  } else if (comm_ != nullptr) {
    narrow_bucket(b);
    b.handle = engine_->iallreduce(comm_ + b.begin, count, ddp_.comm_dtype, ReduceOp::sum, label);
  } else {
    b.handle = engine_->iallreduce(data, count, DType::f32, ReduceOp::sum, label);
  }
}

void Ddp::narrow_bucket(const Bucket& b) {
  const float* g = params_.grad_memory() + b.begin;
  uint16_t* out = comm_ + b.begin;
  if (ddp_.comm_dtype == DType::bf16)
    f32_to_bf16(g, reinterpret_cast<BFloat16*>(out), b.end - b.begin);
  else
    f32_to_f16(g, reinterpret_cast<Half*>(out), b.end - b.begin);
}

void Ddp::widen_bucket(const Bucket& b) {
  float* g = params_.grad_memory() + b.begin;
  const uint16_t* in = comm_ + b.begin;
  if (ddp_.comm_dtype == DType::bf16)
    bf16_to_f32(reinterpret_cast<const BFloat16*>(in), g, b.end - b.begin);
  else
    f16_to_f32(reinterpret_cast<const Half*>(in), g, b.end - b.begin);
}

double Ddp::communicate_alone() {
  Stopwatch watch;
  for (size_t i = 0; i < buckets_.size(); ++i) start_bucket(i);
  for (Bucket& b : buckets_) b.handle.wait();
  return watch.elapsed();
}

// Rank r gets every rank's copy of share r, adds them in the tree of tree_sum.h, and
// everyone gathers the shares: every element is summed in the same order on every rank.
void Ddp::ordered_allreduce(comm::Group& g, Bucket& b) {
  const int n = g.size();
  const int64_t len = b.end - b.begin;
  const int64_t share = (len + n - 1) / n;
  float* data = params_.grad_memory() + b.begin;
  float* send = send_.data();
  float* recv = recv_.data();
  std::memcpy(send, data, static_cast<size_t>(len) * sizeof(float));
  std::fill(send + len, send + share * n, 0.0f);
  comm::alltoall(g, send, recv, static_cast<size_t>(share), DType::f32);
  tree_reduce(recv, n, share, share);
  comm::allgather(g, recv, send, static_cast<size_t>(share), DType::f32);
  std::memcpy(data, send, static_cast<size_t>(len) * sizeof(float));
}

void Ddp::broadcast_buffers() { broadcast_model_buffers(*engine_, params_); }

void Ddp::sync_parameters() {
  broadcast_parameters(*engine_, params_);
  broadcast_buffers();
  broadcast_tensors(*engine_, optimizer_->state(), "broadcast of rank 0's optimizer state");
}

void Ddp::sum_over_ranks(double* values, size_t count, const char* what) {
  engine_->iallreduce(values, count, DType::f64, ReduceOp::sum, comm::OpLabel(what)).wait();
}

void Ddp::start_sum_over_ranks(double* values, size_t count, const char* what) {
  BRAID_CHECK(pending_sum_.done(), "ddp: a sum over ranks is already under way");
  pending_sum_ = engine_->iallreduce(values, count, DType::f64, ReduceOp::sum, comm::OpLabel(what));
}

void Ddp::finish_sum_over_ranks() {
  pending_sum_.wait();
  pending_sum_ = {};
}

double Ddp::step(const data::Batch& batch, float lr, int64_t step) {
  check_batch_share(batch, ddp_.global_batch, group_->rank(), group_->size(), name());
  Stopwatch watch;
  times_ = {};
  const int n = group_->size();
  const int m = options_.accumulate_steps;
  if (!params_.buffers().empty()) broadcast_buffers();
  times_.communication_exposed += watch.lap();
  micro_.split(batch, m);
  params_.zero_grads();
  double loss_sum = 0;
  // Deterministic mode sums the micro-batches' gradients in a fixed tree (tree_sum.h),
  // each computed alone and scaled by the share's weight only; otherwise backward
  // accumulates them in place. A weight of 1 leaves the scale's bits as they were.
  const bool tree = micro_sum_.count() > 1;
  const float scale =
      (m > 1 && !options_.deterministic ? 1.0f / static_cast<float>(m) : 1.0f) * weight_;
  float* grads = params_.grad_memory();
  for (int p = 0; p < m; ++p) {
    const int k = tree ? micro_sum_.order()[static_cast<size_t>(p)] : p;
    if (tree && p > 0) params_.zero_grads();
    // Micro-batch k of rank r holds global rows r + n k (mod n m): its dropout stream.
    loss_sum += forward_loss(micro_[k], step, group_->rank() + int64_t{n} * k, scale);
    communicate_ = p == m - 1;
    if (communicate_)
      for (Bucket& bucket : buckets_) bucket.pending = bucket.end - bucket.begin;
    backward();
    communicate_ = false;
    if (tree && p < m - 1) micro_sum_.add(p, grads, grads, 0, params_.size());
  }
  watch.lap();
  // Buckets in the order they went out; without clipping each bucket's update runs while
  // later buckets are still on the wire.
  const bool fused = !update_needs_whole_gradient() && !transactional_;
  // The mean over the global batch: deterministic mode scales its sum once, here.
  const int terms = options_.deterministic ? n * m : n;
  const float average = 1.0f / static_cast<float>(terms);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const int64_t t0 = timeline_ ? Timeline::now() : 0;
    b.handle.wait();
    times_.communication_exposed += watch.lap();
    if (timeline_) {
      const comm::OpTimes t = b.handle.times();
      const auto ns = [](comm::Clock::time_point p) {
        return static_cast<int64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(p.time_since_epoch()).count());
      };
      const TimelineArg bucket{"bucket", static_cast<int64_t>(i)};
      timeline_->record(
          TimelineLane::kComm, "allreduce", ns(t.started), ns(t.finished), bucket,
          {"bytes", (b.end - b.begin) * static_cast<int64_t>(dtype_size(ddp_.comm_dtype))});
      timeline_->record(TimelineLane::kCompute, "wait for allreduce", t0, Timeline::now(), bucket);
    }
    const TimelineSpan span(timeline_, TimelineLane::kCompute, "optimizer",
                            {"bucket", static_cast<int64_t>(i)});
    if (comm_ != nullptr) widen_bucket(b);
    if (terms > 1) scale_into(grads + b.begin, grads + b.begin, b.end - b.begin, average);
    if (fused) optimizer_->step_range(params_.params(), grads, lr, b.begin, b.end);
    times_.optimizer += watch.lap();
  }
  if (fused) {
    optimizer_->finish_step();
  } else {
    clip_and_step(lr);
    times_.optimizer += watch.lap();
  }
  times_.total = watch.elapsed();
  return loss_sum / m;
}

}  // namespace braid::parallel
