#include "data/client_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/rng.h"

namespace braid::data {
namespace {

using Split = std::vector<std::vector<int64_t>>;

// n labels of num_classes classes, class c drawn with weight c + 1, so classes differ in size
// and the global mix is not uniform.
std::vector<int32_t> skewed_labels(int64_t n, int num_classes, uint64_t seed) {
  Rng rng(seed);
  const auto total = static_cast<uint64_t>(num_classes) * (num_classes + 1) / 2;
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int32_t& label : labels) {
    uint64_t w = rng.below(total);
    label = 0;
    while (w >= static_cast<uint64_t>(label + 1)) w -= static_cast<uint64_t>(++label);
  }
  return labels;
}

// labels[i] = i % num_classes: equal classes.
std::vector<int32_t> cyclic_labels(int64_t n, int num_classes) {
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % num_classes);
  return labels;
}

// Every index of [0, n) in exactly one of `clients` non-empty, ascending lists.
void expect_partition(const Split& s, int64_t n, int clients) {
  ASSERT_EQ(s.size(), static_cast<size_t>(clients));
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (size_t c = 0; c < s.size(); ++c) {
    EXPECT_FALSE(s[c].empty()) << "client " << c;
    EXPECT_TRUE(std::is_sorted(s[c].begin(), s[c].end())) << "client " << c;
    for (const int64_t i : s[c]) {
      ASSERT_TRUE(i >= 0 && i < n) << i;
      ++seen[static_cast<size_t>(i)];
    }
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
}

std::vector<int64_t> histogram(const std::vector<int64_t>& list, const std::vector<int32_t>& labels,
                               int num_classes) {
  std::vector<int64_t> h(static_cast<size_t>(num_classes), 0);
  for (const int64_t i : list) ++h[static_cast<size_t>(labels[static_cast<size_t>(i)])];
  return h;
}

// The share of a client's samples that its most frequent label has.
double largest_share(const std::vector<int64_t>& list, const std::vector<int32_t>& labels,
                     int num_classes) {
  const std::vector<int64_t> h = histogram(list, labels, num_classes);
  return static_cast<double>(*std::max_element(h.begin(), h.end())) /
         static_cast<double>(list.size());
}

double mean_largest_share(const Split& s, const std::vector<int32_t>& labels, int num_classes) {
  double sum = 0.0;
  for (const auto& list : s) sum += largest_share(list, labels, num_classes);
  return sum / static_cast<double>(s.size());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ClientSplit, EveryKindIsASeededPartition) {
  const ClientSplitSpec specs[] = {
      {.kind = ClientSplitKind::iid},
      {.kind = ClientSplitKind::dirichlet, .alpha = 0.5},
      {.kind = ClientSplitKind::labels_per_client, .labels_per_client = 2},
  };
  struct Case {
    int64_t n;
    int num_classes, clients;
  };
  for (const ClientSplitSpec& base : specs) {
    for (const Case& k : {Case{1000, 10, 5}, Case{1000, 10, 7}, Case{1000, 10, 50}, Case{101, 3, 2},
                          Case{60, 2, 6}, Case{5, 1, 1}}) {
      SCOPED_TRACE(testing::Message() << client_split_kind_name(base.kind) << " n=" << k.n
                                      << " classes=" << k.num_classes << " clients=" << k.clients);
      ClientSplitSpec spec = base;
      spec.labels_per_client = std::min(spec.labels_per_client, k.num_classes);
      const std::vector<int32_t> labels = skewed_labels(k.n, k.num_classes, 3);
      spec.seed = 11;
      const Split a = split_clients(labels, k.num_classes, k.clients, spec);
      expect_partition(a, k.n, k.clients);
      EXPECT_EQ(a, split_clients(labels, k.num_classes, k.clients, spec));  // same seed
      spec.seed = 12;
      const Split b = split_clients(labels, k.num_classes, k.clients, spec);
      expect_partition(b, k.n, k.clients);
      if (k.clients > 1) {  // one client holds everything, whatever the seed
        EXPECT_NE(a, b);
      }
    }
  }
}

TEST(ClientSplit, IidSizesDifferByAtMostOneAndFollowTheGlobalMix) {
  const int64_t n = 100003;
  const int classes = 10, clients = 8;
  const std::vector<int32_t> labels = skewed_labels(n, classes, 5);
  const Split s = split_clients(labels, classes, clients, {.kind = ClientSplitKind::iid});
  expect_partition(s, n, clients);
  // The first n % clients clients hold one more.
  for (int c = 0; c < clients; ++c)
    EXPECT_EQ(static_cast<int64_t>(s[static_cast<size_t>(c)].size()),
              n / clients + (c < n % clients ? 1 : 0));
  std::vector<int64_t> total(static_cast<size_t>(classes), 0);  // the global histogram
  for (const int32_t l : labels) ++total[static_cast<size_t>(l)];
  // A client's share of each label is within 0.02 of the global share (about 6 standard
  // errors at 12,500 samples a client).
  for (int c = 0; c < clients; ++c) {
    const auto& list = s[static_cast<size_t>(c)];
    const std::vector<int64_t> h = histogram(list, labels, classes);
    for (int l = 0; l < classes; ++l) {
      const double share =
          static_cast<double>(h[static_cast<size_t>(l)]) / static_cast<double>(list.size());
      const double want =
          static_cast<double>(total[static_cast<size_t>(l)]) / static_cast<double>(n);
      EXPECT_NEAR(share, want, 0.02) << "client " << c << " label " << l;
    }
  }
}

TEST(ClientSplit, DirichletSkewFollowsAlpha) {
  const int classes = 10, clients = 10, seeds = 5;
  const std::vector<int32_t> labels = cyclic_labels(10000, classes);
  // alpha 0.05: each client is dominated by one label. A client's largest share varies a lot
  // from draw to draw (over seeds 0..19 the mean over clients ranges 0.61 to 0.81), so the
  // bound is on the average over a few seeds, each seed only having to be clearly skewed.
  double skew = 0.0;
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    const Split s =
        split_clients(labels, classes, clients,
                      {.kind = ClientSplitKind::dirichlet, .alpha = 0.05, .seed = seed});
    expect_partition(s, 10000, clients);
    const double share = mean_largest_share(s, labels, classes);
    EXPECT_GT(share, 0.5);
    skew += share / seeds;
  }
  EXPECT_GT(skew, 0.6);
  // alpha 1000: every client sees nearly the global mix, a tenth of each label (the largest
  // share is about 0.105).
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    const Split s =
        split_clients(labels, classes, clients,
                      {.kind = ClientSplitKind::dirichlet, .alpha = 1000, .seed = seed});
    expect_partition(s, 10000, clients);
    EXPECT_LT(mean_largest_share(s, labels, classes), 0.12);
    for (const auto& list : s) EXPECT_LT(largest_share(list, labels, classes), 0.13);
  }
}

TEST(ClientSplit, DirichletDealsEveryClassExactly) {
  const int classes = 7, clients = 13;
  const std::vector<int32_t> labels = skewed_labels(3001, classes, 8);
  std::vector<int64_t> want(static_cast<size_t>(classes), 0);  // the class sizes
  for (const int32_t l : labels) ++want[static_cast<size_t>(l)];
  for (const double alpha : {0.1, 0.5, 10.0}) {
    SCOPED_TRACE(testing::Message() << "alpha=" << alpha);
    const Split s = split_clients(labels, classes, clients,
                                  {.kind = ClientSplitKind::dirichlet, .alpha = alpha, .seed = 4});
    expect_partition(s, 3001, clients);
    // The cumulative rounding hands out each class's samples exactly, none twice or lost.
    std::vector<int64_t> dealt(static_cast<size_t>(classes), 0);
    for (const auto& list : s) {
      const std::vector<int64_t> h = histogram(list, labels, classes);
      for (int l = 0; l < classes; ++l) dealt[static_cast<size_t>(l)] += h[static_cast<size_t>(l)];
    }
    EXPECT_EQ(dealt, want);
  }
}

TEST(ClientSplit, LabelsPerClientHoldsExactlyKLabels) {
  struct Case {
    int num_classes, clients, k;
  };
  const std::vector<int32_t> labels10 = skewed_labels(5000, 10, 6);
  for (const Case& t : {Case{10, 5, 2}, Case{10, 10, 2}, Case{10, 7, 3}, Case{10, 20, 1},
                        Case{10, 3, 4}, Case{10, 4, 10}, Case{10, 100, 2}}) {
    SCOPED_TRACE(testing::Message() << "clients=" << t.clients << " k=" << t.k);
    const Split s =
        split_clients(labels10, t.num_classes, t.clients,
                      {.kind = ClientSplitKind::labels_per_client, .labels_per_client = t.k});
    expect_partition(s, 5000, t.clients);
    std::vector<int> holders(static_cast<size_t>(t.num_classes), 0);
    std::vector<std::vector<int64_t>> pieces(static_cast<size_t>(t.num_classes));
    for (const auto& list : s) {
      const std::vector<int64_t> h = histogram(list, labels10, t.num_classes);
      EXPECT_EQ(std::count_if(h.begin(), h.end(), [](int64_t x) { return x > 0; }), t.k);
      for (int l = 0; l < t.num_classes; ++l)
        if (h[static_cast<size_t>(l)] > 0) {
          ++holders[static_cast<size_t>(l)];
          pieces[static_cast<size_t>(l)].push_back(h[static_cast<size_t>(l)]);
        }
    }
    // Every label is held (coverage), by floor(clients * k / classes) clients or one more,
    // and its samples are cut evenly among them.
    const int least = t.clients * t.k / t.num_classes;
    for (int l = 0; l < t.num_classes; ++l) {
      EXPECT_TRUE(holders[static_cast<size_t>(l)] == least ||
                  holders[static_cast<size_t>(l)] == least + 1)
          << "label " << l << " has " << holders[static_cast<size_t>(l)] << " holders";
      const auto& p = pieces[static_cast<size_t>(l)];
      EXPECT_LE(*std::max_element(p.begin(), p.end()) - *std::min_element(p.begin(), p.end()), 1);
    }
  }
  // A class that never occurs cannot be held: the split is over the labels that do.
  const Split s = split_clients(
      labels10, 12, 5, {.kind = ClientSplitKind::labels_per_client, .labels_per_client = 2});
  expect_partition(s, 5000, 5);
  for (const auto& list : s) {
    const std::vector<int64_t> h = histogram(list, labels10, 12);
    EXPECT_EQ(std::count_if(h.begin(), h.end(), [](int64_t x) { return x > 0; }), 2);
  }
}

TEST(ClientSplit, ErrorsNameTheKeyAndValue) {
  auto has = [](const std::string& e, const char* want) {
    return e.find(want) != std::string::npos;
  };
  const std::vector<int32_t> labels = cyclic_labels(100, 10);
  const ClientSplitSpec iid{}, dirichlet{.kind = ClientSplitKind::dirichlet};
  const ClientSplitSpec shards{.kind = ClientSplitKind::labels_per_client};
  EXPECT_TRUE(has(error_of([&] { split_clients(labels, 10, 0, iid); }), "fedavg.clients is 0"));
  EXPECT_TRUE(
      has(error_of([&] { split_clients(labels, 10, -3, dirichlet); }), "fedavg.clients is -3"));
  const std::string too_many = error_of([&] { split_clients(labels, 10, 101, iid); });
  EXPECT_TRUE(has(too_many, "fedavg.clients is 101")) << too_many;
  EXPECT_TRUE(has(too_many, "only 100 samples")) << too_many;
  EXPECT_TRUE(has(error_of([&] { split_clients({}, 10, 1, iid); }), "only 0 samples"));
  EXPECT_TRUE(has(error_of([&] { split_clients(labels, 0, 2, iid); }), "num_classes is 0"));
  EXPECT_TRUE(has(error_of([&] { split_clients(labels, 9, 2, shards); }), "label 9 of sample 9"));
  std::vector<int32_t> negative = labels;
  negative[42] = -1;
  EXPECT_TRUE(
      has(error_of([&] { split_clients(negative, 10, 2, dirichlet); }), "label -1 of sample 42"));

  for (const double alpha : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity()}) {
    const ClientSplitSpec bad{.kind = ClientSplitKind::dirichlet, .alpha = alpha};
    const std::string e = error_of([&] { split_clients(labels, 10, 2, bad); });
    EXPECT_TRUE(has(e, "fedavg.alpha is")) << e;
    EXPECT_TRUE(has(error_of([&] { validate(bad); }), "fedavg.alpha is"));
  }
  // A Dirichlet so concentrated that clients stay empty, redraw after redraw.
  const std::string stuck = error_of([&] {
    split_clients(cyclic_labels(200, 2), 2, 40,
                  {.kind = ClientSplitKind::dirichlet, .alpha = 1e-4});
  });
  EXPECT_TRUE(has(stuck, "fedavg.alpha is 0.0001")) << stuck;
  EXPECT_TRUE(has(stuck, "raise fedavg.alpha")) << stuck;

  auto shards_of = [](int k) {
    return ClientSplitSpec{.kind = ClientSplitKind::labels_per_client, .labels_per_client = k};
  };
  EXPECT_TRUE(has(error_of([&] { validate(shards_of(0)); }), "fedavg.labels_per_client is 0"));
  EXPECT_TRUE(has(error_of([&] { split_clients(labels, 10, 5, shards_of(-2)); }),
                  "fedavg.labels_per_client is -2"));
  const std::string too_wide = error_of([&] { split_clients(labels, 10, 5, shards_of(11)); });
  EXPECT_TRUE(has(too_wide, "fedavg.labels_per_client is 11")) << too_wide;
  EXPECT_TRUE(has(too_wide, "only 10 classes")) << too_wide;
  const std::string uncovered = error_of([&] { split_clients(labels, 10, 3, shards_of(2)); });
  EXPECT_TRUE(has(uncovered, "fedavg.labels_per_client is 2")) << uncovered;
  EXPECT_TRUE(has(uncovered, "cover the 10 labels")) << uncovered;
  // Label 0 has one sample but each of the 4 clients holds both labels.
  std::vector<int32_t> rare(20, 1);
  rare[0] = 0;
  const std::string thin = error_of([&] { split_clients(rare, 2, 4, shards_of(2)); });
  EXPECT_TRUE(has(thin, "label 0 is held by 4")) << thin;

  EXPECT_TRUE(
      has(error_of([] { parse_client_split_kind("non_iid"); }), "fedavg.split is 'non_iid'"));
  for (const ClientSplitKind k :
       {ClientSplitKind::iid, ClientSplitKind::dirichlet, ClientSplitKind::labels_per_client})
    EXPECT_EQ(parse_client_split_kind(client_split_kind_name(k)), k);
}

TEST(ClientSplitGamma, MeanAndVarianceMatchTheShape) {
  // Gamma(a, 1) has mean a and variance a; with n draws the sample mean's standard error is
  // sqrt(a / n) and the sample variance's sqrt((2a^2 + 6a) / n) (its fourth central moment
  // is 3a^2 + 6a). Fixed seeds: deterministic, so the 5-standard-error bounds cannot flake.
  const int n = 200000;
  for (const double a : {0.3, 1.0, 4.5}) {
    SCOPED_TRACE(testing::Message() << "a=" << a);
    Rng rng(17, 1);
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) v = sample_gamma(rng, a);
    EXPECT_TRUE(
        std::all_of(x.begin(), x.end(), [](double v) { return std::isfinite(v) && v > 0; }));
    double mean = 0.0;
    for (const double v : x) mean += v;
    mean /= n;
    double var = 0.0;
    for (const double v : x) var += (v - mean) * (v - mean);
    var /= n - 1;
    EXPECT_NEAR(mean, a, 5.0 * std::sqrt(a / n));
    EXPECT_NEAR(var, a, 5.0 * std::sqrt((2.0 * a * a + 6.0 * a) / n));
  }
  Rng rng(1);
  EXPECT_THROW(sample_gamma(rng, 0.0), Error);
}

TEST(ClientSplitGamma, DirichletSumsToOneEvenForTinyAlpha) {
  Rng rng(23, 2);
  for (const double alpha : {1e-3, 0.05, 1.0, 100.0}) {
    for (const int parts : {1, 2, 10, 100}) {
      SCOPED_TRACE(testing::Message() << "alpha=" << alpha << " parts=" << parts);
      const std::vector<double> p = sample_dirichlet(rng, alpha, parts);
      ASSERT_EQ(p.size(), static_cast<size_t>(parts));
      EXPECT_TRUE(std::all_of(p.begin(), p.end(), [](double v) { return v >= 0 && v <= 1; }));
      double sum = 0.0;
      for (const double v : p) sum += v;
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  }
  // Dir(1, 1, 1, 1): each part has mean 1/4 and variance (1/4)(3/4)/5.
  const int draws = 20000;
  double first = 0.0;
  for (int i = 0; i < draws; ++i) first += sample_dirichlet(rng, 1.0, 4)[0];
  EXPECT_NEAR(first / draws, 0.25, 5.0 * std::sqrt(0.75 / 4 / 5 / draws));
}

}  // namespace
}  // namespace braid::data
