#include "parallel/mesh_strategy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "comm/collectives.h"
#include "core/kernels.h"
#include "core/log.h"
#include "core/timer.h"
#include "nn/gpt.h"
#include "nn/gpt_tensor_parallel.h"
#include "nn/loss_function.h"
#include "nn/sequential_tensor_parallel.h"
#include "optim/clip.h"
#include "parallel/mesh_stage.h"
#include "parallel/same_model.h"

namespace braid::parallel {
namespace {

constexpr uint32_t kStateTag = 0xFFFF0000u;  // + state tensor: optimizer state to stage 0

std::vector<optim::Segment> segments_of(const nn::ParamSet& params, nn::ParamSet::Id first,
                                        nn::ParamSet::Id end, int64_t begin) {
  std::vector<optim::Segment> out;
  for (nn::ParamSet::Id id = first; id < end; ++id) {
    const nn::ParamInfo& p = params.info(id);
    out.push_back({p.name, p.offset - begin, p.numel(), p.decay});
  }
  return out;
}

std::string format_ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g ms", seconds * 1e3);
  return text;
}

}  // namespace

MeshStrategy::MeshStrategy(std::unique_ptr<nn::Module> module, StepOptions options,
                           std::shared_ptr<comm::Group> world, MeshShape shape,
                           PipelineOptions pipeline)
    : Strategy(std::move(module), std::move(options)),
      world_(std::move(world)),
      popts_(std::move(pipeline)) {
  BRAID_CHECK(world_, "mesh: needs the job's group");
  BRAID_CHECK(!options_.loss,
              "pipeline, tensor and mesh: the last stage's loss is the built-in cross-entropy; "
              "a loss of another kind (",
              options_.loss ? options_.loss->name() : "", ") is not built there");
  const int D = shape.data, T = shape.tensor, P = shape.pipeline;
  BRAID_CHECK(D >= 1 && T >= 1 && P >= 1 && int64_t{D} * T * P == world_->size(), "mesh: ", D,
              " data x ", T, " tensor x ", P, " pipeline = ", int64_t{D} * T * P,
              " ranks, but the job has ", world_->size(),
              "; choose axes whose product is the number of ranks");
  BRAID_CHECK(popts_.micro_batches >= 1, "pipeline.micro_batches must be >= 1, got ",
              popts_.micro_batches);
  BRAID_CHECK(options_.accumulate_steps == 1,
              "mesh: the batch is already cut into pipeline.micro_batches (", popts_.micro_batches,
              "); drop accumulate_steps (", options_.accumulate_steps,
              ") or fold it into micro_batches");
  // The full model: what evaluation and checkpoints see. Cut by width, it never runs
  // backward.
  declare();
  if (T > 1)
    params_.set_grad_locator([](size_t) -> float* {
      BRAID_THROW(Error,
                  "tensor parallel: the full model has no gradients (each rank trains "
                  "its shard of it)");
    });
  build(nullptr, /*with_optimizer=*/false);
  check_same_model(*world_, params_, "mesh");
  mesh_ = comm::make_mesh(*world_, D, T, P);
  pipe_ = mesh_.pipeline.get();
  if (T > 1) {
    reducer_ = std::make_unique<GroupTensorReducer>(mesh_.tensor);
    const int t = mesh_.tensor_index;
    if (const auto* gpt = dynamic_cast<const nn::Gpt*>(module_.get())) {
      BRAID_CHECK(options_.label_smoothing == 0,
                  "tensor parallel: label smoothing is not built for the vocabulary-parallel "
                  "loss; drop label_smoothing");
      const nn::GptConfig& c = gpt->config();
      auto cuts = nn::gpt_width_cuts(c, t, T);  // checks the sizes divide first
      shards_ = std::make_unique<TensorShards>(
          std::make_unique<nn::TensorParallelGpt>(c, *reducer_), cuts, params_, t);
      vocab_ = c.vocab;
      vocab_first_ = t * (c.vocab / T);
    } else if (const auto* seq = dynamic_cast<const nn::Sequential*>(module_.get())) {
      nn::WidthCutModel cut = nn::cut_sequential(*seq, *reducer_);
      shards_ = std::make_unique<TensorShards>(std::move(cut.model), cut.cuts, params_, t);
    } else {
      BRAID_THROW(Error, "tensor parallel: model '", module_->kind(),
                  "' cannot be cut by width (a GPT or a Sequential model of Linear layers can)");
    }
    tmodule_ = &shards_->model();
    tparams_ = &shards_->params();
    shards_->to_local(params_.params(), tparams_->params());
  } else {
    tmodule_ = module_.get();
    tparams_ = &params_;
  }
  units_ = tmodule_->pipeline_units();
  BRAID_CHECK(!units_.empty(), "pipeline: model '", module_->kind(),
              "' cannot be cut into stages (a Sequential model or a GPT can)");
  BRAID_CHECK(popts_.chunks >= 1 &&
                  (popts_.chunks == 1 || popts_.schedule == PipelineSchedule::interleaved),
              "pipeline.chunks (", popts_.chunks, ") > 1 needs pipeline.schedule interleaved");
  BRAID_CHECK(static_cast<int>(units_.size()) >= P * popts_.chunks, "pipeline: ", P, " stages x ",
              popts_.chunks, " chunks need at least as many layers, but the model has ",
              units_.size(), "; use fewer stages or chunks");
  if (popts_.schedule == PipelineSchedule::interleaved)
    BRAID_CHECK(popts_.micro_batches % P == 0, "pipeline.schedule interleaved: micro_batches (",
                popts_.micro_batches, ") must be a multiple of the stages (", P, ")");
  first_learning_unit_ = units_.size();
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].end > units_[u].first) {
      first_learning_unit_ = u;
      break;
    }
  if (popts_.recompute)
    for (const nn::PipelineUnit& u : units_)
      BRAID_CHECK(u.buffers_end == u.buffers_first, "pipeline.recompute: layer ", u.name,
                  " keeps running statistics (BatchNorm), which a second forward would update "
                  "twice; drop recompute or the BatchNorm layers");
  // From here the progress thread drives the job's groups: every p2p and collective goes
  // through it.
  engine_ = std::make_unique<comm::ProgressEngine>(world_);
  if (reducer_) reducer_->use_engine(engine_.get());
  if (!popts_.cut.empty()) {
    BRAID_CHECK(popts_.cut.size() == static_cast<size_t>(chunk_count()) + 1 &&
                    popts_.cut.front() == 0 && popts_.cut.back() == units_.size() &&
                    std::is_sorted(popts_.cut.begin(), popts_.cut.end()) &&
                    std::adjacent_find(popts_.cut.begin(), popts_.cut.end()) == popts_.cut.end(),
                "pipeline: a cut needs ", chunk_count() + 1,
                " increasing unit boundaries from 0 to ", units_.size());
    cut_ = popts_.cut;
    prepare_stage();
  } else if (chunk_count() == 1) {
    cut_ = {0, units_.size()};
    prepare_stage();
  }
  if (world_->rank() == 0 && world_->size() > 1) log_info(describe_placement());
}

MeshStrategy::~MeshStrategy() {
  // Sends still reading this rank's memory finish before it goes (a failed group throws:
  // nothing to keep in step with any more).
  try {
    for (Chunk& c : chunks_) {
      for (Slot& s : c.slots) wait_all(s.sends);
      wait_all(c.recompute_sends);
    }
    wait_all(sends_);
    for (Tie& t : ties_) wait_all(t.grad_sends);
  } catch (const std::exception&) {
  }
}

std::string_view MeshStrategy::name() const {
  if (mesh_.data_size == 1 && mesh_.tensor_size == 1) return "pipeline";
  if (mesh_.data_size == 1 && mesh_.pipeline_size == 1) return "tensor";
  return "mesh";
}

int MeshStrategy::rank() const { return world_->rank(); }
int MeshStrategy::world_size() const { return world_->size(); }

std::string MeshStrategy::describe_placement() const {
  const int D = mesh_.data_size, T = mesh_.tensor_size, P = mesh_.pipeline_size;
  std::string text = "mesh: " + std::to_string(D) + " data x " + std::to_string(T) + " tensor x " +
                     std::to_string(P) + " pipeline;";
  for (int r = 0; r < world_->size(); ++r)
    text += std::string(r ? "," : "") + " rank " + std::to_string(r) + " = (data " +
            std::to_string((r / T) % D) + ", tensor " + std::to_string(r % T) + ", stage " +
            std::to_string(r / (T * D)) + ")";
  return text;
}

void MeshStrategy::on_engine(comm::OpLabel label, const std::function<void(comm::Group&)>& fn) {
  engine_->submit(label, [&fn](comm::Group& g) { fn(g); }).wait();
}

void MeshStrategy::measure_and_cut(const data::Batch& micro) {
  // Every unit's forward and backward on the first micro-batch, twice (the first pays for
  // first touches); the faster of the two counts. BatchNorm's statistics are put back.
  nn::ParamSet& params = *tparams_;
  std::vector<Tensor> saved;
  for (const nn::NamedBuffer& b : params.buffers()) {
    saved.push_back(Tensor::empty(b.value.shape(), b.value.dtype(), MemCategory::workspace));
    saved.back().copy_from(b.value);
  }
  std::vector<double> cost(units_.size(), std::numeric_limits<double>::infinity());
  std::vector<std::unique_ptr<nn::Cache>> caches;
  for (const nn::PipelineUnit& u : units_) caches.push_back(u.module->make_cache());
  for (int round = 0; round < 2; ++round) {
    params.zero_grads();
    std::vector<double> t(units_.size(), 0);
    const nn::ForwardContext ctx = train_context(0, 0);
    const Tensor* h = &micro.inputs;
    for (size_t u = 0; u < units_.size(); ++u) {
      Stopwatch w;
      h = &units_[u].module->forward(*h, *caches[u], ctx);
      t[u] += w.elapsed();
    }
    Stopwatch w;
    loss_and_gradient(*h, micro.targets, 1.0f);
    t.back() += w.elapsed();
    const Tensor* g = &dy_;
    for (size_t u = units_.size(); u-- > first_learning_unit_;) {
      Stopwatch wb;
      g = &units_[u].module->backward(*g, *caches[u], u > first_learning_unit_);
      t[u] += wb.elapsed();
    }
    for (size_t u = 0; u < units_.size(); ++u) cost[u] = std::min(cost[u], t[u]);
  }
  params.zero_grads();
  for (size_t i = 0; i < saved.size(); ++i) {
    Tensor live = params.buffers()[i].value;  // shares the layer's memory
    live.copy_from(saved[i]);
  }
  // Every rank cuts from the same (summed) times.
  engine_->iallreduce(cost.data(), cost.size(), DType::f64, ReduceOp::sum, "layer timing sum")
      .wait();
  for (double& c : cost) c /= world_->size();
  cut_ = balance_stages(cost, chunk_count());
  prepare_stage();
  if (world_->rank() == 0) {
    std::vector<double> per_stage(static_cast<size_t>(stages()), 0);
    for (int c = 0; c < chunk_count(); ++c)
      for (size_t u = cut_[c]; u < cut_[c + 1]; ++u) per_stage[stage_of_chunk(c)] += cost[u];
    std::string times;
    for (double t : per_stage) times.append(" ").append(format_ms(t));
    log_info("pipeline: ", stages(), " stages",
             popts_.chunks > 1 ? detail::concat(" x ", popts_.chunks, " chunks") : "", ", ",
             schedule_name(popts_.schedule), ", ", popts_.micro_batches, " micro-batches",
             popts_.recompute ? ", recompute" : "", "; cut by measured time: ", describe_cut(),
             " (per stage:", times, ")");
  }
}

std::string MeshStrategy::describe_cut() const {
  std::string text;
  for (size_t c = 0; c + 1 < cut_.size(); ++c) {
    if (c > 0) text.append(" | ");
    text.append(popts_.chunks > 1 ? detail::concat("chunk ", c, " (stage ",
                                                   stage_of_chunk(static_cast<int>(c)), ")")
                                  : detail::concat("stage ", c));
    text.append(": ").append(units_[cut_[c]].name);
    if (cut_[c + 1] - cut_[c] > 1) text.append("..").append(units_[cut_[c + 1] - 1].name);
  }
  return text;
}

int64_t MeshStrategy::stage_floats() const {
  int64_t n = 0;
  for (const Chunk& c : chunks_) n += c.end - c.begin;
  return n;
}

std::pair<int64_t, int64_t> MeshStrategy::range_of_chunk(int chunk) const {
  const size_t fu = cut_[static_cast<size_t>(chunk)], eu = cut_[static_cast<size_t>(chunk) + 1];
  const nn::ParamSet::Id first = units_[fu].first, end = units_[eu - 1].end;
  if (end <= first) return {tparams_->range_begin(first), tparams_->range_begin(first)};
  return {tparams_->range_begin(first), tparams_->range_end(end)};
}

void MeshStrategy::prepare_stage() {
  const int s = stage(), n = stages();
  const nn::ParamSet& params = *tparams_;
  actions_ = stage_actions(popts_.schedule, s, n, popts_.micro_batches, popts_.chunks);
  chunks_.clear();
  chunks_.resize(static_cast<size_t>(popts_.chunks));
  for (int j = 0; j < popts_.chunks; ++j) {
    Chunk& c = chunks_[static_cast<size_t>(j)];
    c.index = s + j * n;
    c.first_unit = cut_[static_cast<size_t>(c.index)];
    c.end_unit = cut_[static_cast<size_t>(c.index) + 1];
    c.first_id = units_[c.first_unit].first;
    c.end_id = units_[c.end_unit - 1].end;
    std::tie(c.begin, c.end) = range_of_chunk(c.index);
    c.backward_here = c.end_unit > first_learning_unit_;
    c.sends_dx = c.index > 0 && c.first_unit > first_learning_unit_;
    const std::vector<optim::Segment> segments = segments_of(params, c.first_id, c.end_id, c.begin);
    c.optimizer = optim::make_optimizer(options_.optimizer, segments, c.end - c.begin);
    // The global norm: each chunk once over the data replicas, a replicated parameter of
    // the tensor shards once over the tensor ranks.
    if (mesh_.data_index == 0)
      for (nn::ParamSet::Id id = c.first_id; id < c.end_id; ++id)
        if (!shards_ || shards_->is_cut(id) || mesh_.tensor_index == 0)
          c.norm_segments.push_back(segments[id - c.first_id]);
    c.slots.resize(static_cast<size_t>(std::max(1, in_flight(actions_, j))));
    for (Slot& slot : c.slots)
      if (!popts_.recompute)
        for (size_t u = c.first_unit; u < c.end_unit; ++u)
          slot.caches.push_back(units_[u].module->make_cache());
    if (popts_.recompute)
      for (size_t u = c.first_unit; u < c.end_unit; ++u)
        c.recompute_caches.push_back(units_[u].module->make_cache());
    if (options_.deterministic && popts_.micro_batches > 1)
      c.micro_sum = TreeSum(c.end - c.begin, popts_.micro_batches);
    if (mesh_.data_size > 1 && c.end > c.begin) {
      ReducerOptions r;
      r.bucket_bytes = popts_.data_bucket_bytes;
      r.first_bucket_bytes = std::min(r.bucket_bytes, size_t{1} << 20);
      r.codec = popts_.data_codec;
      r.first_param = c.first_id;
      r.end_param = c.end_id;
      c.data_reducer = std::make_unique<GradientReducer>(params, mesh_.data, r);
      c.data_reducer->prepare([&c](size_t bytes) -> void* {
        c.wire.push_back(Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::f32,
                                       MemCategory::gradients));
        std::memset(c.wire.back().raw(), 0, bytes);
        return c.wire.back().raw();
      });
      c.data_reducer->use_engine(engine_.get());
    }
  }
  auto chunk_of_unit = [&](size_t u) {
    return static_cast<int>(std::upper_bound(cut_.begin(), cut_.end(), u) - cut_.begin()) - 1;
  };
  ties_.clear();
  for (size_t u = 0; u < units_.size(); ++u)
    for (nn::ParamSet::Id id : units_[u].tied) {
      size_t owner = 0;
      while (owner < units_.size() && !(id >= units_[owner].first && id < units_[owner].end))
        ++owner;
      BRAID_CHECK(owner < units_.size(), "pipeline: layer ", units_[u].name,
                  " reads a parameter no layer declares");
      const int oc = chunk_of_unit(owner), uc = chunk_of_unit(u);
      if (oc == uc) continue;
      BRAID_CHECK(oc < uc, "pipeline: layer ", units_[u].name, " reads ", params.info(id).name,
                  " of a later stage; only weights tied forward (as the GPT's head) are built");
      BRAID_CHECK(stage_of_chunk(oc) != stage_of_chunk(uc), "pipeline: the tied weight ",
                  params.info(id).name,
                  " is read by two chunks of one stage; use another number of chunks");
      Tie t;
      t.id = id;
      t.owner_unit = owner;
      t.owner_chunk = oc;
      t.user_chunk = uc;
      t.owner = stage_of_chunk(oc);
      t.user = stage_of_chunk(uc);
      if (s == t.owner)
        t.staging = Tensor::empty({params.info(id).numel()}, DType::f32, MemCategory::gradients);
      ties_.push_back(std::move(t));
    }
  prepared_ = true;
  if (!loaded_state_.empty()) {  // a state loaded before the cut was known
    const optim::NamedTensors full = std::move(loaded_state_);
    loaded_state_.clear();
    load_optimizer_state(full);
  }
}

double MeshStrategy::step(const data::Batch& batch, float lr, int64_t step) {
  Stopwatch watch;
  times_ = {};
  ptimes_ = {};
  codec_report_ = {};
  if (reducer_) reducer_->reset_seconds();
  const int m = popts_.micro_batches;
  micro_.split(batch, m);
  if (!prepared_) measure_and_cut(micro_[0]);
  settle_tied_values();
  wait_all(sends_);
  const bool ordered = options_.deterministic && m > 1;
  order_.resize(static_cast<size_t>(m));
  for (int p = 0; p < m; ++p)
    order_[static_cast<size_t>(p)] =
        ordered ? chunks_.front().micro_sum.order()[static_cast<size_t>(p)] : p;
  // Every micro-batch has the same shape: the activations at each chunk's two ends.
  Shape shape = micro_[0].inputs.shape();
  for (Chunk& c : chunks_) {
    for (size_t u = 0; u < c.end_unit; ++u) {
      if (u == c.first_unit) c.in_shape = shape;
      shape = units_[u].module->output_shape(shape);
    }
    c.out_shape = shape;
    shape = micro_[0].inputs.shape();
  }
  grad_scale_ = m > 1 && !ordered ? 1.0f / static_cast<float>(m) : 1.0f;
  loss_sum_ = 0;
  tparams_->zero_grads();
  for (const PipelineAction& a : actions_) {
    Chunk& c = chunks_[static_cast<size_t>(a.chunk)];
    if (a.kind == PipelineAction::forward)
      forward_action(c, a.position, step);
    else
      backward_action(c, a.position, step);
  }
  finish_ties_after_backward();
  std::vector<float*> grads;
  for (Chunk& c : chunks_) {
    grads.push_back(tparams_->grads(c.first_id, c.end_id) + c.begin);
    if (ordered && c.end > c.begin)
      scale_into(grads.back(), grads.back(), c.end - c.begin, 1.0f / static_cast<float>(m));
  }
  // One small all-reduce for the loss (from the last stage). Until every stage is here the
  // pipeline is still draining: this stage's tail of the bubble, so the wait counts as
  // waiting and the schedule ends after it.
  const bool reports_loss = stage() == stages() - 1 && mesh_.tensor_index == 0;
  double loss = reports_loss ? loss_sum_ : 0.0;
  Stopwatch comm_watch;
  engine_->iallreduce(&loss, 1, DType::f64, ReduceOp::sum, "the step's loss sum").wait();
  ptimes_.waiting += comm_watch.lap();
  ptimes_.schedule = watch.lap();
  ptimes_.compute = times_.forward + times_.backward;
  for (size_t j = 0; j < chunks_.size(); ++j) average_over_data(chunks_[j], grads[j], step);
  for (size_t j = 0; j < chunks_.size(); ++j) finish_average_over_data(chunks_[j], grads[j]);
  double overflow = 0;
  if (scaler_) {  // voted, so every rank skips together
    for (size_t j = 0; j < chunks_.size(); ++j)
      overflow += optim::LossScaler::has_overflow(
                      {grads[j], static_cast<size_t>(chunks_[j].end - chunks_[j].begin)})
                      ? 1
                      : 0;
    engine_->iallreduce(&overflow, 1, DType::f64, ReduceOp::sum, "overflow vote").wait();
  }
  times_.communication_exposed =
      ptimes_.waiting + comm_watch.elapsed() + (reducer_ ? reducer_->seconds() : 0);
  bool skip = false;
  if (scaler_) {
    const float scale = scaler_->scale();
    skip = scaler_->update(overflow > 0);
    if (!skip)
      for (size_t j = 0; j < chunks_.size(); ++j)
        scale_into(grads[j], grads[j], chunks_[j].end - chunks_[j].begin, 1.0f / scale);
  }
  watch.lap();
  if (!skip) {
    float coefficient = 1;
    if (options_.clip_grad_norm > 0) {
      double sq = 0;
      for (size_t j = 0; j < chunks_.size(); ++j)
        sq += optim::grad_sum_squares(grads[j], chunks_[j].norm_segments);
      engine_->iallreduce(&sq, 1, DType::f64, ReduceOp::sum, "gradient norm").wait();
      coefficient = optim::clip_coefficient(std::sqrt(sq), options_.clip_grad_norm);
    }
    for (size_t j = 0; j < chunks_.size(); ++j) {
      Chunk& c = chunks_[j];
      if (options_.clip_grad_norm > 0)
        optim::scale_grads(grads[j], c.optimizer->segments(), coefficient);
      c.optimizer->step(tparams_->params() + c.begin, grads[j], lr);
    }
    full_current_ = false;
  }
  send_updated_ties();
  times_.optimizer = watch.lap();
  times_.total = ptimes_.schedule + times_.optimizer;
  return loss / (m * mesh_.data_size);
}

// Data axis: each replica's gradients of this chunk's range summed over the replicas, bucket
// by bucket through the codec; every chunk's buckets go out before the first is waited for.
void MeshStrategy::average_over_data(Chunk& c, float* grads, int64_t step) {
  if (!c.data_reducer) return;
  // The reducer's buckets are offsets of the flat layout; grads is the chunk's first float.
  float* base = grads - c.begin;
  c.data_reducer->arm(step);
  for (size_t i = 0; i < c.data_reducer->buckets().size(); ++i)
    c.data_reducer->start(i, base + c.data_reducer->buckets()[i].begin);
}

void MeshStrategy::finish_average_over_data(Chunk& c, float* grads) {
  if (!c.data_reducer) return;
  for (size_t i = 0; i < c.data_reducer->buckets().size(); ++i) c.data_reducer->wait(i, timeline_);
  scale_into(grads, grads, c.end - c.begin, 1.0f / static_cast<float>(mesh_.data_size));
  const CodecReport r = c.data_reducer->take_report();
  codec_report_.wire_bytes += r.wire_bytes;
  codec_report_.dense_bytes += r.dense_bytes;
  codec_report_.error_norm = std::hypot(codec_report_.error_norm, r.error_norm);
}

void MeshStrategy::sync_parameters() {
  settle_tied_values();
  engine_
      ->ibroadcast(params_.params(), static_cast<size_t>(params_.size()), DType::f32, 0,
                   "broadcast of the parameters")
      .wait();
  for (const nn::NamedBuffer& b : params_.buffers())
    engine_
        ->ibroadcast(b.value.raw(), static_cast<size_t>(b.value.numel()), b.value.dtype(), 0,
                     "broadcast of a buffer")
        .wait();
  if (shards_) shards_->to_local(params_.params(), tparams_->params());
  full_current_ = true;
}

// Every stage's parameters and buffers to every rank of the pipeline, from the stage that
// owns them; then the tensor shards into the full layout.
void MeshStrategy::synchronize() {
  if (full_current_) return;
  settle_tied_values();
  for (int c = 0; c < chunk_count(); ++c) {
    const int s = stage_of_chunk(c);
    const auto [b, e] = range_of_chunk(c);
    float* at = tparams_->params() + b;
    if (e > b)
      on_engine({"broadcast of the parameters of stage", s}, [&](comm::Group&) {
        comm::broadcast(*pipe_, at, static_cast<size_t>(e - b), DType::f32, s);
      });
    for (size_t u = cut_[static_cast<size_t>(c)]; u < cut_[static_cast<size_t>(c) + 1]; ++u)
      for (size_t i = units_[u].buffers_first; i < units_[u].buffers_end; ++i) {
        const Tensor& v = tparams_->buffers()[i].value;
        on_engine({"broadcast of the buffers of stage", s}, [&](comm::Group&) {
          comm::broadcast(*pipe_, v.raw(), static_cast<size_t>(v.numel()), v.dtype(), s);
        });
      }
  }
  if (shards_) {
    fill(0.0f, params_.params(), params_.size());
    shards_->to_full(tparams_->params(), params_.params());
    comm::Group* tensor = mesh_.tensor.get();
    on_engine("gather of the tensor shards", [&](comm::Group&) {
      comm::allreduce(*tensor, params_.params(), static_cast<size_t>(params_.size()), DType::f32,
                      ReduceOp::sum);
    });
  }
  full_current_ = true;
}

void MeshStrategy::sum_over_ranks(double* values, size_t count, const char* what) {
  engine_->iallreduce(values, count, DType::f64, ReduceOp::sum, comm::OpLabel(what)).wait();
}

void MeshStrategy::start_sum_over_ranks(double* values, size_t count, const char* what) {
  BRAID_CHECK(pending_sum_.done(), "mesh: a sum over ranks is already under way");
  pending_sum_ = engine_->iallreduce(values, count, DType::f64, ReduceOp::sum, comm::OpLabel(what));
}

void MeshStrategy::finish_sum_over_ranks() {
  pending_sum_.wait();
  pending_sum_ = {};
}

std::string_view MeshStrategy::optimizer_name() const {
  return optim::make_optimizer(options_.optimizer, {}, 0)->name();
}

void MeshStrategy::gather_for_checkpoint() {
  synchronize();  // the whole parameters too (a no-op where the caller did it)
  gathered_full_.clear();
  const bool root = world_->rank() == 0;
  // Rank 1 keeps a copy (keep_gathered_copy): computed there when it is a stage-0 rank too
  // (a tensor or data peer of rank 0), else sent over by rank 0.
  const bool second = holds_gathered_state() && !root;
  const bool second_at_stage0 = mesh_.tensor_size * mesh_.data_size > 1 || mesh_.pipeline_size == 1;
  if (!prepared_) {
    // No step yet: the state loaded and not yet cut, or a fresh optimizer's.
    if ((root || second) && !loaded_state_.empty())
      gathered_full_ = loaded_state_;
    else if (root || second)
      gathered_full_ =
          optim::make_optimizer(options_.optimizer,
                                segments_of(params_, 0, params_.layout().size(), 0), params_.size())
              ->state();
    return;
  }
  // Each chunk's optimizer names its buffers alike, in the same order.
  const size_t names = chunks_.front().optimizer->state().size();
  for (size_t k = 0; k < names; ++k) {
    const auto [name, sample] = chunks_.front().optimizer->state()[k];
    if (sample.dtype() != DType::f32) {
      if (root || second) gathered_full_.emplace_back(name, sample);
      continue;
    }
    const uint32_t state_tag = kStateTag + static_cast<uint32_t>(k);
    if (stage() != 0) {  // this rank's chunks to stage 0, in the trained layout
      for (Chunk& c : chunks_) {
        const Tensor t = c.optimizer->state()[k].second;
        if (t.numel() == 0) continue;  // a chunk without parameters
        on_engine("send of optimizer state for a checkpoint",
                  [&](comm::Group&) { pipe_->send(0, state_tag, t.raw(), t.nbytes()); });
      }
      if (second) {
        Tensor copy = Tensor::empty({params_.size()}, DType::f32, MemCategory::optimizer);
        on_engine("receive of the gathered optimizer state's copy",
                  [&](comm::Group&) { world_->recv(0, state_tag, copy.raw(), copy.nbytes()); });
        gathered_full_.emplace_back(name, copy);
      }
      continue;
    }
    Tensor trained = Tensor::empty({tparams_->size()}, DType::f32, MemCategory::optimizer);
    for (int c = 0; c < chunk_count(); ++c) {  // in each stage's chunk order
      const int s = stage_of_chunk(c);
      const auto [b, e] = range_of_chunk(c);
      const size_t bytes = static_cast<size_t>(e - b) * sizeof(float);
      // This stage's own chunks are copied; the others' arrive from their stages.
      const bool mine = s == 0;
      const Tensor own =
          mine ? chunks_[static_cast<size_t>(c / stages())].optimizer->state()[k].second : Tensor();
      if (mine && bytes > 0)  // a chunk without parameters (Flatten) has an empty state
        std::memcpy(trained.f32() + b, own.raw(), bytes);
      else if (!mine && bytes > 0)
        on_engine({"receive of optimizer state from stage", s},
                  [&](comm::Group&) { pipe_->recv(s, state_tag, trained.f32() + b, bytes); });
    }
    Tensor full = trained;
    if (shards_) {  // the tensor shards into the full layout (stage 0's tensor group)
      full = Tensor::empty({params_.size()}, DType::f32, MemCategory::optimizer);
      shards_->to_full(trained.f32(), full.f32());
      comm::Group* tensor = mesh_.tensor.get();
      on_engine("gather of optimizer state shards", [&](comm::Group&) {
        comm::allreduce(*tensor, full.f32(), static_cast<size_t>(params_.size()), DType::f32,
                        ReduceOp::sum);
      });
    }
    if (root || second) gathered_full_.emplace_back(name, full);
    if (root && keep_copy_ && world_->size() > 1 && !second_at_stage0)
      on_engine("send of the gathered optimizer state's copy",
                [&](comm::Group&) { world_->send(1, state_tag, full.raw(), full.nbytes()); });
  }
}

optim::NamedTensors MeshStrategy::optimizer_state_layout() const {
  return optim::make_optimizer(options_.optimizer,
                               segments_of(params_, 0, params_.layout().size(), 0), params_.size())
      ->state();
}

optim::NamedTensors MeshStrategy::optimizer_state() const {
  BRAID_CHECK(holds_gathered_state() && !gathered_full_.empty(),
              "mesh: the full optimizer state is gathered on rank 0 by gather_for_checkpoint()");
  return gathered_full_;
}

void MeshStrategy::load_optimizer_state(const optim::NamedTensors& state) {
  for (const auto& [name, t] : state)
    BRAID_CHECK(t.dtype() != DType::f32 || t.numel() == params_.size(), "optimizer state '", name,
                "' holds ", t.numel(), " floats; this model's layout has ", params_.size());
  if (!prepared_) {  // the stage is known at the first step: kept until then
    loaded_state_ = state;
    return;
  }
  Tensor trained;
  if (shards_) trained = Tensor::empty({tparams_->size()}, DType::f32, MemCategory::workspace);
  std::vector<optim::NamedTensors> parts(chunks_.size());
  for (const auto& [name, t] : state) {
    const float* from = t.dtype() == DType::f32 ? t.f32() : nullptr;
    if (from && shards_) {
      shards_->to_local(t.f32(), trained.f32());
      from = trained.f32();
    }
    for (size_t j = 0; j < chunks_.size(); ++j) {
      const Chunk& c = chunks_[j];
      if (!from) {
        parts[j].emplace_back(name, t);
        continue;
      }
      Tensor slice = Tensor::empty({c.end - c.begin}, DType::f32, MemCategory::optimizer);
      if (c.end > c.begin)
        std::memcpy(slice.f32(), from + c.begin, static_cast<size_t>(c.end - c.begin) * 4);
      parts[j].emplace_back(name, slice);
    }
  }
  for (size_t j = 0; j < chunks_.size(); ++j) chunks_[j].optimizer->load_state(parts[j]);
}

}  // namespace braid::parallel
