#include "parallel/gradient_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "comm/collectives.h"
#include "comm/group.h"
#include "core/error.h"
#include "core/timer.h"
#include "parallel/buckets.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {
namespace {

BucketLayout layout_of(const nn::ParamSet& params, int64_t begin, int64_t end) {
  BucketLayout out{begin, end, {}};
  for (const nn::ParamInfo& p : params.layout()) {
    if (p.offset < begin || p.offset >= end) continue;
    const int64_t rows = p.shape.rank() > 0 ? p.shape[0] : 1;
    out.tensors.push_back({p.offset - begin, rows, rows > 0 ? p.numel() / rows : 0});
  }
  return out;
}

int64_t ns(comm::Clock::time_point p) {
  return static_cast<int64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(p.time_since_epoch()).count());
}

}  // namespace

GradientReducer::GradientReducer(const nn::ParamSet& params, std::shared_ptr<comm::Group> group,
                                 ReducerOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  BRAID_CHECK(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0,
              "bucket sizes must be > 0");
  codec_ = make_codec(options_.codec);
  BRAID_CHECK(!options_.deterministic || codec_->plain_sum(), "deterministic mode sums ",
              "every bucket in rank order in fp32, which compression codec '", codec_->name(),
              "' does not; drop one of them");
  const int n = group_->size();
  int64_t largest = 0;
  for (const FloatRange& r :
       bucket_ranges(params, options_.first_bucket_bytes, options_.bucket_bytes,
                     options_.first_param, options_.end_param)) {
    Bucket b;
    b.begin = r.begin;
    b.end = r.end;
    b.chunk = (b.size() + n - 1) / n;
    largest_chunk_ = std::max(largest_chunk_, b.chunk);
    largest = std::max(largest, b.size());
    layouts_.push_back(layout_of(params, b.begin, b.end));
    std::vector<FloatRange> gaps;
    int64_t covered = b.begin;
    for (const CodecTensor& t : layouts_.back().tensors) {
      if (b.begin + t.offset > covered) gaps.push_back({covered, b.begin + t.offset});
      covered = b.begin + t.offset + t.rows * t.cols;
    }
    if (covered < b.end) gaps.push_back({covered, b.end});
    gaps_.push_back(std::move(gaps));
    buckets_.push_back(std::move(b));
  }
  largest_bucket_ = largest;
  if (options_.priority) {
    BRAID_CHECK(codec_->plain_sum(), "priority scheduling sends fp32 pieces; compression codec '",
                codec_->name(), "' exchanges whole buckets: use one of them");
    data_.assign(buckets_.size(), nullptr);
    ready_.assign(buckets_.size(), 0);
    done_.assign(buckets_.size(), 0);
  }
  cut_pieces();
}

// Priority mode's pieces of at most partition_bytes, and the buffers an exchange of the
// widest one needs (a piece and its readiness floats, in deterministic mode in shares of a
// whole number of floats per rank). Grown, never shrunk: a tuned partition does not
// allocate again when the search comes back to a smaller one.
void GradientReducer::cut_pieces() {
  const auto buckets = static_cast<int64_t>(buckets_.size());
  int64_t largest = largest_bucket_;
  if (options_.priority) {
    const auto partition =
        std::max<int64_t>(1, static_cast<int64_t>(options_.partition_bytes / sizeof(float)));
    pieces_.clear();
    first_piece_.clear();
    int64_t widest = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      first_piece_.push_back(pieces_.size());
      for (int64_t at = 0; at < buckets_[i].size(); at += partition) {
        pieces_.push_back({i, at, std::min(partition, buckets_[i].size() - at)});
        widest = std::max(widest, pieces_.back().size);
      }
    }
    first_piece_.push_back(pieces_.size());
    const auto need = static_cast<size_t>(widest + buckets);
    if (piece_buffer_.size() < need) piece_buffer_.assign(need, 0.0f);
    largest = std::max(largest, widest + buckets);
  }
  if (options_.deterministic) {
    const int n = group_->size();
    const auto size = static_cast<size_t>((largest + n - 1) / n * n);
    if (send_.size() < size) {
      send_.assign(size, 0.0f);
      recv_.assign(size, 0.0f);
    }
  }
}

void GradientReducer::set_partition_bytes(size_t bytes) {
  BRAID_CHECK(options_.priority && bytes > 0, "gradient reducer: a partition of ", bytes,
              " bytes; pieces are priority mode's, of at least a float");
  pieces_handle_.wait();  // the last step's task reads the pieces until it ends
  options_.partition_bytes = bytes;
  cut_pieces();
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::prepare(const WireAllocator& wire) {
  codec_->prepare(layouts_, group_->size(), wire);
}

void GradientReducer::arm(int64_t step) {
  step_ = step;
  for (Bucket& b : buckets_) b.pending = b.size();
  if (!options_.priority) return;
  BRAID_CHECK(engine_ != nullptr, "gradient reducer: no progress engine to run on");
  // The last step's task marked every bucket done before it ended; it may still be leaving.
  pieces_handle_.wait();
  {
    const std::lock_guard lock(mu_);
    std::fill(ready_.begin(), ready_.end(), 0);
    std::fill(done_.begin(), done_.end(), 0);
    order_.clear();
  }
  pieces_handle_ = engine_->submit("prioritised pieces of the gradient buckets",
                                   [this](comm::Group& g) { run_pieces(g); });
}

void GradientReducer::abort() {
  const std::lock_guard lock(mu_);
  aborted_ = true;
  changed_.notify_all();
}

CodecReport GradientReducer::take_report() {
  CodecReport out = codec_->take_report();
  out.wire_bytes += pieces_report_.wire_bytes;
  out.dense_bytes += pieces_report_.dense_bytes;
  pieces_report_ = {};
  return out;
}

std::vector<int> GradientReducer::last_order() const {
  const std::lock_guard lock(mu_);
  return order_;
}

void GradientReducer::run_pieces(comm::Group& /*engine_group*/) {
  comm::Group& g = *group_;
  const int n = g.size();
  const size_t buckets = buckets_.size();
  std::vector<size_t> next(first_piece_.begin(), first_piece_.end() - 1);
  std::vector<float> everywhere(buckets, 0.0f);  // ranks known to hold each bucket ready
  const auto unsent = [&](size_t b) { return next[b] < first_piece_[b + 1]; };
  const auto deadline = std::chrono::steady_clock::now() + g.timeout();
  for (size_t left = pieces_.size(); left > 0; --left) {
    size_t b = buckets;
    for (size_t k = buckets; k-- > 0;)
      if (everywhere[k] > static_cast<float>(n) - 0.5f && unsent(k)) {
        b = k;
        break;
      }
    if (b == buckets)
      for (size_t k = 0; k < buckets && b == buckets; ++k)
        if (unsent(k)) b = k;
    const Piece& piece = pieces_[next[b]++];
    float* data = nullptr;
    float* buffer = piece_buffer_.data();
    {
      std::unique_lock lock(mu_);
      if (!changed_.wait_until(lock, deadline, [&] { return ready_[b] != 0 || aborted_; }))
        BRAID_THROW(Error, "gradient bucket ", b, " was not finished by backward within the ",
                    "group's timeout; the compute thread stopped or is stuck");
      if (aborted_) BRAID_THROW(Error, "the step's exchange was stopped before bucket ", b);
      data = data_[b] + piece.offset;
      for (size_t k = 0; k < buckets; ++k) buffer[piece.size + static_cast<int64_t>(k)] = ready_[k];
      order_.push_back(static_cast<int>(b));
    }
    const int64_t len = piece.size + static_cast<int64_t>(buckets);
    std::memcpy(buffer, data, static_cast<size_t>(piece.size) * sizeof(float));
    if (options_.deterministic)
      ordered_allreduce(g, buffer, len);
    else
      comm::allreduce(g, buffer, static_cast<size_t>(len), DType::f32, ReduceOp::sum);
    std::memcpy(data, buffer, static_cast<size_t>(piece.size) * sizeof(float));
    std::copy(buffer + piece.size, buffer + len, everywhere.begin());
    // Each piece is an fp32 ring allreduce, readiness floats included.
    pieces_report_.wire_bytes += dense_allreduce_bytes(len, n);
    pieces_report_.dense_bytes += dense_allreduce_bytes(piece.size, n);
    if (!unsent(b)) {
      const std::lock_guard lock(mu_);
      done_[b] = 1;
      changed_.notify_all();
    }
  }
}

void GradientReducer::start(size_t i, float* data, float* sum) {
  BRAID_CHECK(engine_ != nullptr, "gradient reducer: no progress engine to run on");
  if (options_.priority) {
    const std::lock_guard lock(mu_);
    data_[i] = data;
    ready_[i] = 1;
    changed_.notify_all();
    return;
  }
  Bucket& b = buckets_[i];
  const auto index = static_cast<int64_t>(i);
  if (options_.reduce_scatter) {
    const comm::OpLabel label("reduce-scatter of gradient bucket", index);
    b.handle = engine_->submit(label, [this, i, data, sum](comm::Group&) {
      const Bucket& bucket = buckets_[i];
      if (options_.deterministic) {
        ordered_reduce_scatter(*group_, bucket, data, sum);
      } else {
        codec_->reduce_scatter(*group_, i, data, bucket.size(), sum, bucket.chunk, step_);
        zero_gaps(i, data);  // the codec may have used the bucket as scratch
      }
    });
    return;
  }
  const comm::OpLabel label("allreduce of gradient bucket", index);
  b.handle = engine_->submit(label, [this, i, data](comm::Group&) {
    const Bucket& bucket = buckets_[i];
    if (options_.deterministic)
      ordered_allreduce(*group_, data, bucket.size());
    else
      codec_->allreduce(*group_, i, data, bucket.size(), step_);
    zero_gaps(i, data);
  });
}

// A lossy codec decodes something into the alignment gaps between parameters too; backward
// never writes them, so they are put back to zero before a later step reads them as data.
void GradientReducer::zero_gaps(size_t i, float* data) const {
  const int64_t begin = buckets_[i].begin;
  for (const FloatRange& gap : gaps_[i])
    std::fill(data + (gap.begin - begin), data + (gap.end - begin), 0.0f);
}

double GradientReducer::wait(size_t i, Timeline* timeline) {
  Bucket& b = buckets_[i];
  const int64_t t0 = timeline ? Timeline::now() : 0;
  Stopwatch watch;
  if (options_.priority) {
    bool done = false;
    {
      std::unique_lock lock(mu_);
      // The task's failure ends the wait too: it is rethrown below.
      while (done_[i] == 0 && !pieces_handle_.done())
        changed_.wait_for(lock, std::chrono::milliseconds(10));
      done = done_[i] != 0;
    }
    if (!done) {
      pieces_handle_.wait();
      const std::lock_guard lock(mu_);
      BRAID_CHECK(done_[i] != 0, "gradient bucket ", i, " was never sent");
    }
    if (timeline)
      timeline->record(TimelineLane::kCompute, "wait for gradients", t0, Timeline::now(),
                       {"bucket", static_cast<int64_t>(i)});
    return watch.elapsed();
  }
  b.handle.wait();
  const double waited = watch.elapsed();
  if (timeline) {
    const comm::OpTimes t = b.handle.times();
    const TimelineArg bucket{"bucket", static_cast<int64_t>(i)};
    const char* name = options_.reduce_scatter ? "reduce-scatter" : "allreduce";
    timeline->record(TimelineLane::kComm, name, ns(t.started), ns(t.finished), bucket,
                     {"floats", b.size()});
    timeline->record(TimelineLane::kCompute, "wait for gradients", t0, Timeline::now(), bucket);
  }
  return waited;
}

// Rank r gets every rank's copy of share r, adds them in the tree of tree_sum.h, and
// everyone gathers the shares: every element is summed in the same order on every rank.
void GradientReducer::ordered_allreduce(comm::Group& g, float* data, int64_t len) {
  const int n = g.size();
  const int64_t share = (len + n - 1) / n;
  float* send = send_.data();
  float* recv = recv_.data();
  std::memcpy(send, data, static_cast<size_t>(len) * sizeof(float));
  std::fill(send + len, send + share * n, 0.0f);
  comm::alltoall(g, send, recv, static_cast<size_t>(share), DType::f32);
  tree_reduce(recv, n, share, share);
  comm::allgather(g, recv, send, static_cast<size_t>(share), DType::f32);
  std::memcpy(data, send, static_cast<size_t>(len) * sizeof(float));
}

// The same exchange without its all-gather: rank r keeps the ordered sum of chunk r.
void GradientReducer::ordered_reduce_scatter(comm::Group& g, const Bucket& b, const float* data,
                                             float* sum) {
  const int n = g.size();
  const int64_t len = b.size();
  std::memcpy(send_.data(), data, static_cast<size_t>(len) * sizeof(float));
  std::fill(send_.data() + len, send_.data() + b.chunk * n, 0.0f);
  comm::alltoall(g, send_.data(), recv_.data(), static_cast<size_t>(b.chunk), DType::f32);
  tree_reduce(recv_.data(), n, b.chunk, b.chunk);
  std::memcpy(sum, recv_.data(), static_cast<size_t>(b.chunk) * sizeof(float));
}

}  // namespace braid::parallel
