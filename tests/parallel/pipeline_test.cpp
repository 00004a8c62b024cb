// Pipeline parallelism against one process, with stages as threads over the in-process
// transport: deterministic mode is bitwise one process accumulating M micro-batches, at
// 2, 3 and 4 stages, under GPipe and 1F1B, on an MLP, a CNN with BatchNorm and dropout, and
// the GPT whose embedding is tied to its head across the first and last stages; otherwise
// within rounding, with clipping and fp16 loss scaling; recompute changes no bit; the
// gathered optimizer state is one process's; a stage that dies fails every stage.
#include "parallel/pipeline.h"

#include <gtest/gtest.h>

#include <mutex>

#include "comm/inproc_ranks.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::message;
using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;
constexpr int64_t kBatch = 8;
constexpr int64_t kTokens = 16;  // the GPT's sequence length

json deep_mlp() {
  json layers = json::array({{{"type", "flatten"}}, {{"type", "linear"}, {"out_features", 32}}});
  for (int i = 0; i < 4; ++i) {
    layers.push_back({{"type", "relu"}});
    layers.push_back({{"type", "linear"}, {"out_features", 32}});
  }
  layers.push_back({{"type", "relu"}});
  layers.push_back({{"type", "linear"}, {"out_features", 10}});
  return {{"input", {12, 12, 1}}, {"layers", layers}};
}

// A model: a layer spec, or "gpt-tiny".
struct Model {
  json spec;
  bool gpt = false;
  std::unique_ptr<nn::Module> build() const {
    return gpt ? train::build_model("gpt-tiny", kTokens).module : train::build_model(spec).module;
  }
  data::Batch batch(int64_t step) const {
    return gpt ? token_batch(kBatch, kTokens, 91 + static_cast<uint64_t>(step))
               : global_batch(kBatch, step);
  }
};

Model mlp() { return {deep_mlp(), false}; }
Model cnn() { return {small_cnn(), false}; }
Model gpt() { return {json(), true}; }

struct Outcome {
  std::vector<float> params;
  optim::NamedTensors state;
  std::vector<double> losses;
};

Outcome copy_state(const optim::NamedTensors& state) {
  Outcome out;
  for (const auto& [name, t] : state) {
    Tensor copy = Tensor::empty(t.shape(), t.dtype());
    copy.copy_from(t);
    out.state.emplace_back(name, copy);
  }
  return out;
}

Outcome single(const Model& m, StepOptions o, int micro, int steps) {
  o.accumulate_steps = micro;
  SingleProcess s(m.build(), o);
  std::vector<double> losses;
  for (int t = 0; t < steps; ++t) losses.push_back(s.step(m.batch(t), kLr, t));
  Outcome out = copy_state(s.optimizer_state());
  out.params = params_of(s);
  out.losses = losses;
  return out;
}

Outcome pipeline(const Model& m, const StepOptions& o, int stages, PipelineOptions p, int steps,
                 const std::function<void(int rank, int step)>& before_step = nullptr) {
  Outcome out;
  std::mutex mu;
  rethrow_first(run_group(stages, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Pipeline s(m.build(), o, group, p);
    std::vector<double> losses;
    for (int t = 0; t < steps; ++t) {
      if (before_step) before_step(group->rank(), t);
      losses.push_back(s.step(m.batch(t), kLr, t));
    }
    s.synchronize();
    EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), s.params().size()))
        << "rank " << group->rank();
    s.gather_for_checkpoint();
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out = copy_state(s.optimizer_state());
      out.params = params_of(s);
      out.losses = losses;
    }
  }));
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const float tol = rel * largest(want);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol) << what << " at float " << i;
}

void expect_state_bitwise(const optim::NamedTensors& a, const optim::NamedTensors& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first) << what;
    ASSERT_EQ(a[i].second.nbytes(), b[i].second.nbytes()) << what << " " << a[i].first;
    EXPECT_EQ(std::memcmp(a[i].second.raw(), b[i].second.raw(), a[i].second.nbytes()), 0)
        << what << " " << a[i].first;
  }
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostStagesInFlightAndGpipeAll) {
  for (auto schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (int P : {1, 2, 3, 4})
      for (int M : {1, 2, 4, 8})
        for (int s = 0; s < P; ++s) {
          const auto actions = stage_actions(schedule, s, P, M);
          ASSERT_EQ(actions.size(), static_cast<size_t>(2 * M));
          int flying = 0, most = 0, next_f = 0, next_b = 0;
          for (const PipelineAction& a : actions) {
            if (a.kind == PipelineAction::forward) {
              EXPECT_EQ(a.position, next_f++);
              most = std::max(most, ++flying);
            } else {
              EXPECT_EQ(a.position, next_b++);  // backwards in position order
              EXPECT_LT(a.position, next_f);
              --flying;
            }
          }
          EXPECT_EQ(most, in_flight(actions, 0));
          if (schedule == PipelineSchedule::gpipe) {
            EXPECT_EQ(most, M);
          }
          if (schedule == PipelineSchedule::one_f_one_b) {
            EXPECT_LE(most, P - s);
          }
        }
  EXPECT_DOUBLE_EQ(theoretical_bubble(2, 4), 1.0 / 5.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 8), 3.0 / 11.0);
}

// Every stage runs its actions in order, each as soon as what it needs is done (a chunk's
// forward needs the previous chunk's, its backward the next chunk's and its own forward):
// every schedule finishes (no stage waits forever), and each chunk runs each micro-batch's
// forward and backward once, backwards in position order.
TEST(PipelineSchedule, EverySchedulesStagesTogetherFinishWithoutDeadlock) {
  for (auto schedule :
       {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved})
    for (int P : {1, 2, 3, 4})
      for (int v : {1, 2, 3})
        for (int M : {P, 2 * P, 4 * P}) {
          if (schedule != PipelineSchedule::interleaved && v > 1) continue;
          const int V = P * v;
          std::vector<std::vector<PipelineAction>> lists;
          for (int s = 0; s < P; ++s) lists.push_back(stage_actions(schedule, s, P, M, v));
          std::vector<std::vector<int>> forward_done(V, std::vector<int>(M, 0)),
              backward_done(V, std::vector<int>(M, 0));
          std::vector<int> next_b(V, 0);
          std::vector<size_t> at(P, 0);
          for (bool moved = true; moved;) {
            moved = false;
            for (int s = 0; s < P; ++s) {
              if (at[s] == lists[s].size()) continue;
              const PipelineAction& a = lists[s][at[s]];
              const int c = s + a.chunk * P, m = a.position;
              const bool ready =
                  a.kind == PipelineAction::forward
                      ? c == 0 || forward_done[c - 1][m]
                      : forward_done[c][m] && (c == V - 1 || backward_done[c + 1][m]);
              if (!ready) continue;
              if (a.kind == PipelineAction::forward) {
                ++forward_done[c][m];
              } else {
                ++backward_done[c][m];
                EXPECT_EQ(m, next_b[c]++) << "chunk " << c;
              }
              ++at[s];
              moved = true;
            }
          }
          for (int s = 0; s < P; ++s)
            ASSERT_EQ(at[s], lists[s].size()) << schedule_name(schedule) << " P=" << P << " v=" << v
                                              << " M=" << M << ": stage " << s << " waits forever";
          for (int c = 0; c < V; ++c)
            for (int m = 0; m < M; ++m) ASSERT_EQ(forward_done[c][m] + backward_done[c][m], 2);
        }
  EXPECT_DOUBLE_EQ(theoretical_bubble(2, 8, 2), 0.5 / 8.5);
  EXPECT_THROW(stage_actions(PipelineSchedule::interleaved, 0, 2, 3, 2), Error);
}

// The kinds of a stage's actions, "F" and "B" in order.
std::string kinds(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const PipelineAction& a : actions) out += a.kind == PipelineAction::forward ? 'F' : 'B';
  return out;
}

// w forwards of warm-up, then (forward, backward) pairs until every forward ran, then the
// w remaining backwards: the steady state of 1F1B.
std::string warm_up_then_alternate(int w, int total) {
  std::string out(static_cast<size_t>(w), 'F');
  for (int i = w; i < total; ++i) out += "FB";
  return out + std::string(static_cast<size_t>(w), 'B');
}

// PipeDream-Flush / Megatron-LM: stage s of P warms up with P - s - 1 forwards (the last
// stage with none), so its first backward comes after P - s forwards: the first
// micro-batch's gradient reaches it just as it finishes that many. Interleaved (Megatron's
// get_forward_backward_func): (P - s - 1) 2 + (v - 1) P warm-up forwards over its v M
// chunk-forwards. Either capped at everything.
TEST(PipelineSchedule, WarmUpIsExactlyTheStagesBelowThenOneForwardOneBackward) {
  for (int P : {1, 2, 3, 4, 5})
    for (int M : {1, 2, 3, 4, 7, 8})
      for (int s = 0; s < P; ++s) {
        const int w = std::min(P - s - 1, M);
        EXPECT_EQ(kinds(stage_actions(PipelineSchedule::one_f_one_b, s, P, M)),
                  warm_up_then_alternate(w, M))
            << "1f1b P=" << P << " M=" << M << " stage " << s;
      }
  for (int P : {1, 2, 3, 4})
    for (int v : {1, 2, 3})
      for (int M : {P, 2 * P, 4 * P})
        for (int s = 0; s < P; ++s) {
          const int w = std::min((P - s - 1) * 2 + (v - 1) * P, M * v);
          EXPECT_EQ(kinds(stage_actions(PipelineSchedule::interleaved, s, P, M, v)),
                    warm_up_then_alternate(w, M * v))
              << "interleaved P=" << P << " v=" << v << " M=" << M << " stage " << s;
        }
}

// Runs every stage's actions together, each as soon as its stage is free and what it needs
// is done (as in the deadlock test above), a chunk's forward taking `f` and its backward
// `b` time units with no communication time; returns each stage's idle fraction of the
// whole schedule's span.
std::vector<double> simulated_bubbles(PipelineSchedule schedule, int P, int M, int v, int f,
                                      int b) {
  const int V = P * v;
  std::vector<std::vector<PipelineAction>> lists;
  for (int s = 0; s < P; ++s) lists.push_back(stage_actions(schedule, s, P, M, v));
  constexpr int kNotYet = -1;
  std::vector<std::vector<int>> forward_end(V, std::vector<int>(M, kNotYet)),
      backward_end(V, std::vector<int>(M, kNotYet));
  std::vector<size_t> at(P, 0);
  std::vector<int> free_at(P, 0), busy(P, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < P; ++s) {
      if (at[s] == lists[s].size()) continue;
      const PipelineAction& a = lists[s][at[s]];
      const int c = s + a.chunk * P, m = a.position;
      int ready = 0;  // when everything it needs is done
      auto needs = [&](int end) {
        ready = ready == kNotYet || end == kNotYet ? kNotYet : std::max(ready, end);
      };
      if (a.kind == PipelineAction::forward) {
        if (c > 0) needs(forward_end[c - 1][m]);
      } else {
        needs(forward_end[c][m]);
        if (c < V - 1) needs(backward_end[c + 1][m]);
      }
      if (ready == kNotYet) continue;
      const int took = a.kind == PipelineAction::forward ? f : b;
      const int end = std::max(ready, free_at[s]) + took;
      (a.kind == PipelineAction::forward ? forward_end : backward_end)[c][m] = end;
      free_at[s] = end;
      busy[s] += took;
      ++at[s];
      moved = true;
    }
  }
  for (int s = 0; s < P; ++s) EXPECT_EQ(at[s], lists[s].size()) << "stage " << s << " is stuck";
  const int span = *std::max_element(free_at.begin(), free_at.end());
  std::vector<double> out;
  for (int s = 0; s < P; ++s) out.push_back(static_cast<double>(span - busy[s]) / span);
  return out;
}

// With equal stages, every stage of GPipe and 1F1B idles exactly (P - 1) / (M + P - 1) of
// the schedule, and of interleaved 1F1B exactly ((P - 1) / v) / (M + (P - 1) / v): the
// warm-up is as long as it must be and no longer. One forward short, a stage waits for a
// gradient it could have overlapped with a forward (bubble 0.07 -> 0.35 was measured).
TEST(PipelineSchedule, SimulatedBubbleOfEqualStagesIsTheTheorys) {
  for (const auto& [f, b] : {std::pair{1, 1}, {1, 2}})
    for (int P : {1, 2, 3, 4})
      for (int v : {1, 2, 3})
        for (int M : {1, 2, P, 2 * P, 3 * P, 8})
          for (auto schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                PipelineSchedule::interleaved}) {
            if (schedule != PipelineSchedule::interleaved && v > 1) continue;
            if (schedule == PipelineSchedule::interleaved && M % P != 0) continue;
            const std::vector<double> got = simulated_bubbles(schedule, P, M, v, f, b);
            for (int s = 0; s < P; ++s)
              EXPECT_NEAR(got[s], theoretical_bubble(P, M, v), 1e-12)
                  << schedule_name(schedule) << " P=" << P << " v=" << v << " M=" << M
                  << " forward " << f << " backward " << b << ": stage " << s;
          }
}

TEST(PipelineSchedule, BalanceMinimisesTheSlowestStage) {
  EXPECT_EQ(balance_stages({1, 1, 1, 1}, 2), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(balance_stages({5, 1, 1, 1, 1, 1}, 2), (std::vector<size_t>{0, 1, 6}));
  EXPECT_EQ(balance_stages({1, 2, 3, 4, 5}, 3), (std::vector<size_t>{0, 3, 4, 5}));
  EXPECT_EQ(balance_stages({3, 3, 3}, 3), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_THROW(balance_stages({1, 2}, 3), Error);
}

// The heart of it: every stage count and schedule, bitwise one process.
TEST(Pipeline, DeterministicEqualsOneProcessAccumulatingBitwise) {
  StepOptions o = options("adamw");
  o.deterministic = true;
  constexpr int kMicro = 4, kSteps = 3;
  for (const auto& [label, model] :
       {std::pair{"mlp", mlp()}, std::pair{"cnn", cnn()}, std::pair{"gpt", gpt()}}) {
    const Outcome want = single(model, o, kMicro, kSteps);
    for (int P : {2, 3, 4})
      for (auto schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                            PipelineSchedule::interleaved}) {
        // Interleaved: 2 chunks a stage where the model has the layers (P x 2 <= units).
        const int chunks = schedule == PipelineSchedule::interleaved ? 2 : 1;
        if (chunks * P > (label == std::string("cnn") ? 8 : label == std::string("gpt") ? 6 : 12))
          continue;
        if (kMicro % P != 0 && chunks > 1) continue;
        const std::string what = std::string(label) + " P=" + std::to_string(P) + " " +
                                 std::string(schedule_name(schedule));
        const Outcome got = pipeline(model, o, P,
                                     {.micro_batches = kMicro,
                                      .schedule = schedule,
                                      .chunks = chunks,
                                      .recompute = false,
                                      .cut = {}},
                                     kSteps);
        expect_bitwise(got.params, want.params, what.c_str());
        expect_state_bitwise(got.state, want.state, what);
        for (int t = 0; t < kSteps; ++t)
          EXPECT_NEAR(got.losses[t], want.losses[t], 1e-12 * std::abs(want.losses[t])) << what;
      }
  }
}

TEST(Pipeline, RecomputeChangesNoBit) {
  StepOptions o = options("sgd");
  for (auto schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (const auto& model : {mlp(), gpt()}) {
      PipelineOptions p{.micro_batches = 4, .schedule = schedule, .recompute = false, .cut = {}};
      const Outcome plain = pipeline(model, o, 3, p, 2);
      p.recompute = true;
      const Outcome again = pipeline(model, o, 3, p, 2);
      expect_bitwise(again.params, plain.params, "recompute");
    }
}

// The sums run in another order (the tied embedding's two halves meet once, not per
// micro-batch): SGD's update is linear in the gradient, so the difference stays at rounding
// (Adam's division would amplify it where a gradient is near zero).
TEST(Pipeline, WithinRoundingOfOneProcessOutsideDeterministicMode) {
  StepOptions o = options("sgd");
  o.clip_grad_norm = 0.5f;
  for (const auto& model : {mlp(), gpt()}) {
    const Outcome want = single(model, o, 4, 3);
    const Outcome got = pipeline(model, o, 2,
                                 {.micro_batches = 4,
                                  .schedule = PipelineSchedule::one_f_one_b,
                                  .recompute = false,
                                  .cut = {}},
                                 3);
    expect_close(got.params, want.params, 1e-5f, model.gpt ? "gpt" : "mlp");
  }
}

TEST(Pipeline, Fp16LossScalingSkipsOnEveryStageTogether) {
  StepOptions o = options("sgd");
  o.precision = nn::Precision::fp16;
  o.loss_scaling = optim::LossScalerConfig{};
  o.loss_scaling->initial_scale = 1e30f;  // the first steps overflow and are skipped
  o.loss_scaling->hysteresis = 1;
  const Outcome want = single(mlp(), o, 2, 4);
  const Outcome got = pipeline(
      mlp(), o, 2,
      {.micro_batches = 2, .schedule = PipelineSchedule::gpipe, .recompute = false, .cut = {}}, 4);
  expect_close(got.params, want.params, 1e-5f, "fp16");
}

TEST(Pipeline, AGivenCutIsUsedAndAStateLoadedBeforeTheFirstStepResumes) {
  StepOptions o = options("adamw");
  o.deterministic = true;
  const Outcome first = single(gpt(), o, 2, 2);
  // One process's parameters and state after two steps, loaded into a 2-stage pipeline cut
  // at the third block, continue as one process does.
  o.accumulate_steps = 2;
  SingleProcess ref(gpt().build(), o);
  for (int t = 0; t < 4; ++t) ref.step(gpt().batch(t), kLr, t);
  o.accumulate_steps = 1;
  std::vector<float> got;
  rethrow_first(run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Pipeline s(gpt().build(), o, group,
               {.micro_batches = 2,
                .schedule = PipelineSchedule::one_f_one_b,
                .recompute = false,
                .cut = {0, 3, 6}});
    std::copy(first.params.begin(), first.params.end(), s.params().params());
    s.load_optimizer_state(first.state);
    s.sync_parameters();
    for (int t = 2; t < 4; ++t) s.step(gpt().batch(t), kLr, t);
    s.synchronize();
    if (group->rank() == 0) got = params_of(s);
  }));
  expect_bitwise(got, params_of(ref), "resumed");
}

TEST(Pipeline, AStageThatDiesFailsEveryStageNamingIt) {
  StepOptions o = options("sgd");
  const auto results = run_group(3, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Pipeline s(mlp().build(), o, group,
               {.micro_batches = 4,
                .schedule = PipelineSchedule::one_f_one_b,
                .recompute = false,
                .cut = {}});
    for (int t = 0; t < 3; ++t) {
      if (t == 1 && group->rank() == 1) throw Error("stage 1 died");
      s.step(mlp().batch(t), kLr, t);
    }
  });
  for (int r : {0, 2}) {
    const std::string e = message(results[static_cast<size_t>(r)]);
    EXPECT_FALSE(e.empty()) << "rank " << r << " did not fail";
    EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  }
}

TEST(Pipeline, ModelsThatCannotBeCutAndTooFewLayersAreRefused) {
  const auto results = run_group(4, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Pipeline s(train::build_model(small_mlp()).module, options("sgd"), group,
               {.micro_batches = 2,
                .schedule = PipelineSchedule::gpipe,
                .recompute = false,
                .cut = {0, 1, 2, 3, 3}});
  });
  EXPECT_NE(message(results[0]).find("increasing unit boundaries"), std::string::npos)
      << message(results[0]);
  StepOptions o = options("sgd");
  o.accumulate_steps = 2;
  const auto refused = run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Pipeline s(mlp().build(), o, group, {});
  });
  EXPECT_NE(message(refused[0]).find("drop accumulate_steps"), std::string::npos);
  const auto bn = run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Pipeline s(
        cnn().build(), options("sgd"), group,
        {.micro_batches = 2, .schedule = PipelineSchedule::gpipe, .recompute = true, .cut = {}});
  });
  EXPECT_NE(message(bn[0]).find("BatchNorm"), std::string::npos) << message(bn[0]);
}

}  // namespace
}  // namespace braid::parallel
