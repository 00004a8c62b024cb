// The run-time GEMM choice: under the automatic policy sgemm measures both libraries on a
// shape's first product and gives exactly what the chosen one gives (C updated once, with
// beta and padded leading dimensions honoured); under OnMiss::rule nothing is timed and
// the fixed rule multiplies; under rule_and_measure the rule multiplies and the timing is
// kept aside; a forced policy runs that library; a recorded table is obeyed and read back,
// and an added one never replaces a choice in use; ranks as threads share one choice per
// shape.
// (That each library is right: gemm_test.cpp.)
#include "core/gemm_choice.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace braid {
namespace {

std::vector<float> random_values(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.uniform(-1.0f, 1.0f);
  return v;
}

// Restores the automatic policy, timing on a miss and an empty table around each test.
class GemmChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    set_gemm_policy(GemmPolicy::automatic);
    set_on_miss(OnMiss::measure);
    clear_gemm_choices();
  }
  void TearDown() override { SetUp(); }
};

struct Operands {
  GemmShape shape;
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C;
};

// Operands with 2 padding columns on every matrix, so leading dimensions are exercised.
Operands operands(const GemmShape& s, uint64_t seed) {
  Operands o{s, (s.trans_a ? s.M : s.K) + 2, (s.trans_b ? s.K : s.N) + 2, s.N + 2, {}, {}, {}};
  o.A = random_values((s.trans_a ? s.K : s.M) * o.lda, seed);
  o.B = random_values((s.trans_b ? s.N : s.K) * o.ldb, seed + 1);
  o.C = random_values(s.M * o.ldc, seed + 2);
  return o;
}

std::vector<float> product(const Operands& o, float beta, std::optional<GemmMethod> method) {
  std::vector<float> C = o.C;
  const GemmShape& s = o.shape;
  if (method)
    sgemm_by(*method, s.trans_a, s.trans_b, s.M, s.N, s.K, 0.5f, o.A.data(), o.lda, o.B.data(),
             o.ldb, beta, C.data(), o.ldc);
  else
    sgemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 0.5f, o.A.data(), o.B.data(), beta, C.data(), o.lda,
          o.ldb, o.ldc);
  return C;
}

const GemmShape kShapes[] = {{false, true, 64, 96, 200},
                             {true, false, 150, 40, 64},
                             {false, false, 33, 130, 48},
                             {true, true, 20, 24, 16}};

TEST_F(GemmChoice, AutomaticMeasuresOnceAndGivesTheChosenLibrarysBits) {
  for (const float beta : {0.0f, 1.0f}) {
    clear_gemm_choices();
    for (const GemmShape& s : kShapes) {
      SCOPED_TRACE(s.str() + " beta " + std::to_string(beta));
      const Operands o = operands(s, 11);
      ASSERT_FALSE(chosen_gemm_method(s).has_value());
      const std::vector<float> first = product(o, beta, std::nullopt);  // measures
      const std::optional<GemmMethod> chosen = chosen_gemm_method(s);
      ASSERT_TRUE(chosen.has_value());
      // The caller's C was updated exactly once, by the chosen library.
      EXPECT_EQ(first, product(o, beta, *chosen));
      EXPECT_EQ(product(o, beta, std::nullopt), first);  // looked up, not measured again
    }
  }
  const std::vector<braid::GemmChoice> table = gemm_choices();
  ASSERT_EQ(table.size(), std::size(kShapes));
  for (const braid::GemmChoice& c : table) {
    for (const double t : c.seconds) EXPECT_GT(t, 0) << c.shape.str();
    const int best = static_cast<int>(std::min_element(c.seconds, c.seconds + 4) - c.seconds);
    EXPECT_EQ(c.method.library, best % 2 == 1 ? GemmLibrary::onednn : GemmLibrary::openblas);
    EXPECT_EQ(c.method.transposed, best >= 2) << c.shape.str();
  }
}

TEST_F(GemmChoice, TheRuleMultipliesWithNothingTimed) {
  set_on_miss(OnMiss::rule);
  for (const GemmShape& s : kShapes) {
    const Operands o = operands(s, 13);
    EXPECT_EQ(product(o, 1.0f, std::nullopt), product(o, 1.0f, gemm_rule(s))) << s.str();
    EXPECT_EQ(chosen_gemm_method(s), gemm_rule(s));
  }
  const std::vector<braid::GemmChoice> table = gemm_choices();
  ASSERT_EQ(table.size(), std::size(kShapes));
  for (const braid::GemmChoice& c : table) {
    EXPECT_EQ(c.origin, ChoiceOrigin::rule) << c.shape.str();
    for (const double t : c.seconds) EXPECT_EQ(t, 0) << c.shape.str();
  }
  EXPECT_TRUE(gemm_measurements().empty()) << "the rule timed something";
}

TEST_F(GemmChoice, RuleAndMeasureMultipliesByTheRuleAndKeepsTheTiming) {
  set_on_miss(OnMiss::rule_and_measure);
  for (const GemmShape& s : kShapes) {
    const Operands o = operands(s, 17);
    EXPECT_EQ(product(o, 1.0f, std::nullopt), product(o, 1.0f, gemm_rule(s))) << s.str();
    EXPECT_EQ(chosen_gemm_method(s), gemm_rule(s));
  }
  for (const braid::GemmChoice& c : gemm_choices()) EXPECT_EQ(c.origin, ChoiceOrigin::rule);
  const std::vector<braid::GemmChoice> timed = gemm_measurements();
  ASSERT_EQ(timed.size(), std::size(kShapes));
  for (const braid::GemmChoice& c : timed) {
    EXPECT_EQ(c.origin, ChoiceOrigin::timed);
    for (const double t : c.seconds) EXPECT_GT(t, 0) << c.shape.str();
  }
}

TEST_F(GemmChoice, AddedChoicesNeverReplaceOnesInUse) {
  const GemmShape s = kShapes[0], other = kShapes[1];
  const GemmMethod used{GemmLibrary::openblas, true}, offered{GemmLibrary::onednn, false};
  const braid::GemmChoice in_use{s, used, {0, 0, 0, 0}, ChoiceOrigin::given};
  set_gemm_choices(std::span(&in_use, 1));
  const braid::GemmChoice cached[] = {{s, offered, {0, 0, 0, 0}, ChoiceOrigin::given},
                                      {other, offered, {0, 0, 0, 0}, ChoiceOrigin::given}};
  add_gemm_choices(cached);
  EXPECT_EQ(chosen_gemm_method(s), used);
  EXPECT_EQ(chosen_gemm_method(other), offered);
}

TEST_F(GemmChoice, AForcedPolicyRunsThatLibrary) {
  for (const GemmLibrary forced : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    set_gemm_policy(forced == GemmLibrary::onednn ? GemmPolicy::onednn : GemmPolicy::openblas);
    for (const GemmShape& s : kShapes) {
      const Operands o = operands(s, 5);
      const GemmMethod as_asked{forced, false};
      EXPECT_EQ(chosen_gemm_method(s), as_asked);
      EXPECT_EQ(product(o, 1.0f, std::nullopt), product(o, 1.0f, as_asked)) << s.str();
    }
  }
  EXPECT_TRUE(gemm_choices().empty()) << "a forced policy measures nothing";
}

TEST_F(GemmChoice, ARecordedTableIsObeyedAndReadBack) {
  // Record each shape as a method it would not necessarily pick, every way.
  for (const GemmMethod recorded :
       {GemmMethod{GemmLibrary::openblas, false}, GemmMethod{GemmLibrary::onednn, false},
        GemmMethod{GemmLibrary::openblas, true}, GemmMethod{GemmLibrary::onednn, true}}) {
    std::vector<braid::GemmChoice> table;
    for (const GemmShape& s : kShapes) table.push_back({s, recorded, {0, 0, 0, 0}});
    set_gemm_choices(table);
    for (const GemmShape& s : kShapes) {
      const Operands o = operands(s, 9);
      EXPECT_EQ(product(o, 0.0f, std::nullopt), product(o, 0.0f, recorded)) << s.str();
    }
    const std::vector<braid::GemmChoice> back = gemm_choices();
    ASSERT_EQ(back.size(), table.size());
    for (const braid::GemmChoice& c : back) {
      EXPECT_EQ(c.method, recorded);
      EXPECT_EQ(c.seconds[0], 0) << "a recorded choice was measured again";
    }
  }
}

// The transposed method computes the same product (C^T = op(B)^T op(A)^T, transposed into
// C with beta): equal to the product as asked up to the order of fp32 sums.
TEST_F(GemmChoice, TheTransposedMethodComputesTheSameProduct) {
  for (const GemmShape& s : kShapes)
    for (const float beta : {0.0f, 1.0f})
      for (const GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
        const Operands o = operands(s, 21);
        const std::vector<float> direct = product(o, beta, GemmMethod{library, false});
        const std::vector<float> transposed = product(o, beta, GemmMethod{library, true});
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < o.ldc; ++j) {
            const auto at = static_cast<size_t>(i * o.ldc + j);
            if (j >= s.N)  // padding of C untouched
              ASSERT_EQ(transposed[at], o.C[at]) << s.str();
            else
              ASSERT_NEAR(transposed[at], direct[at], 1e-5 * static_cast<double>(s.K + 1))
                  << s.str() << " beta " << beta;
          }
      }
}

TEST_F(GemmChoice, RanksAsThreadsShareOneChoicePerShape) {
  const GemmShape s{false, true, 96, 64, 128};
  const Operands o = operands(s, 3);
  std::vector<std::vector<float>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] { results[t] = product(o, 0.0f, std::nullopt); });
  for (auto& t : threads) t.join();
  ASSERT_EQ(gemm_choices().size(), 1u);
  for (const auto& r : results) EXPECT_EQ(r, product(o, 0.0f, chosen_gemm_method(s)));
}

TEST_F(GemmChoice, PoliciesParseAndABadNameSaysWhatIsAccepted) {
  EXPECT_EQ(parse_gemm_policy("auto"), GemmPolicy::automatic);
  EXPECT_EQ(parse_gemm_policy("openblas"), GemmPolicy::openblas);
  EXPECT_EQ(parse_gemm_policy("onednn"), GemmPolicy::onednn);
  for (const GemmPolicy p : {GemmPolicy::automatic, GemmPolicy::openblas, GemmPolicy::onednn})
    EXPECT_EQ(parse_gemm_policy(gemm_policy_name(p)), p);
  try {
    parse_gemm_policy("mkl");
    FAIL() << "mkl accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'mkl'"), std::string::npos) << what;
    EXPECT_NE(what.find("auto"), std::string::npos) << what;
    EXPECT_NE(what.find("openblas"), std::string::npos) << what;
    EXPECT_NE(what.find("onednn"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace braid
