// Client partitions for federated averaging. Inputs are checked before anything is sized by
// them, and memory stays O(N + clients) whatever num_classes is: classes are found by sorting
// the indices by label, not by a table per class. All randomness comes from one
// Rng(spec.seed, kClientSplitStream), consumed in a fixed order (noted per kind), so the
// split is bitwise the same on every rank running the same build.
#include "data/client_split.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/rng.h"

namespace braid::data {
namespace {

// Rng::uniform() is a float of 24 bits that can be 0. The Gamma sampler takes logs of its
// uniforms and raises them to 1 / shape, so it draws doubles of 53 bits from the open (0, 1).
double open_uniform(Rng& rng) {
  return (static_cast<double>(rng.next_u64() >> 11) + 0.5) * 0x1p-53;
}

// Box-Muller in double, for the same reason; the second variate of the pair is not kept.
double standard_normal(Rng& rng) {
  const double radius = std::sqrt(-2.0 * std::log(open_uniform(rng)));
  return radius * std::cos(2.0 * std::numbers::pi * open_uniform(rng));
}

void check_alpha(double alpha) {
  BRAID_CHECK(std::isfinite(alpha) && alpha > 0.0, "fedavg.alpha is ", alpha,
              "; the Dirichlet concentration must be finite and > 0 (0.1 gives strongly "
              "skewed clients, 0.5 moderately skewed, 100 nearly iid)");
}

// The log of a Gamma(shape, 1) variate. Marsaglia and Tsang, "A simple method for generating
// gamma variables" (ACM TOMS 2000): for shape >= 1, with d = shape - 1/3 and c = 1/sqrt(9d),
// d * (1 + c x)^3 of a standard normal x, accepted by the cheap squeeze or else by the log
// test, is Gamma(shape); at least 95% of tries are accepted. For shape < 1 their boost
// Gamma(shape) = Gamma(shape + 1) * u^(1 / shape) is taken in logs: u^(1 / shape) underflows
// for small shapes, its log does not.
double log_gamma_variate(Rng& rng, double shape) {
  if (shape < 1.0) return log_gamma_variate(rng, shape + 1.0) + std::log(open_uniform(rng)) / shape;
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = standard_normal(rng);
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = open_uniform(rng), x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return std::log(d * v);
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return std::log(d * v);
  }
}

// Fisher-Yates, as splits.cpp shuffles.
template <typename T>
void seeded_shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

void check_inputs(std::span<const int32_t> labels, int num_classes, int clients) {
  const auto n = static_cast<int64_t>(labels.size());
  BRAID_CHECK(clients >= 1, "fedavg.clients is ", clients,
              "; federated averaging needs at least one client");
  BRAID_CHECK(clients <= n, "fedavg.clients is ", clients, " but the dataset has only ", n,
              " samples; every client needs one: lower fedavg.clients to at most ", n);
  BRAID_CHECK(num_classes >= 1, "num_classes is ", num_classes,
              "; a labelled dataset has at least one class");
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = labels[static_cast<size_t>(i)];
    BRAID_CHECK(label >= 0 && label < num_classes, "label ", label, " of sample ", i,
                " is outside [0, ", num_classes,
                "); labels must be class ids below num_classes (is num_classes right?)");
  }
}

// The samples of one label that occurs, in index order.
struct ClassSamples {
  int32_t label = 0;
  std::vector<int64_t> samples;
};

// The labels that occur, ascending, with their samples.
std::vector<ClassSamples> group_by_label(std::span<const int32_t> labels) {
  std::vector<int64_t> order(labels.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return labels[static_cast<size_t>(a)] < labels[static_cast<size_t>(b)];
  });
  std::vector<ClassSamples> groups;
  for (const int64_t i : order) {
    const int32_t label = labels[static_cast<size_t>(i)];
    if (groups.empty() || groups.back().label != label) groups.push_back({label, {}});
    groups.back().samples.push_back(i);
  }
  return groups;
}

// Deals `samples` to `to.size()` receivers in pieces of sizes differing by at most one, the
// first samples.size() % to.size() receivers getting the longer ones.
void deal_evenly(const std::vector<int64_t>& samples, const std::vector<int>& to,
                 std::vector<std::vector<int64_t>>& out) {
  const auto n = static_cast<int64_t>(samples.size()), parts = static_cast<int64_t>(to.size());
  const int64_t base = n / parts, extra = n % parts;
  auto start = [&](int64_t p) { return p * base + std::min(p, extra); };
  for (int64_t p = 0; p < parts; ++p) {
    auto& list = out[static_cast<size_t>(to[static_cast<size_t>(p)])];
    list.insert(list.end(), samples.begin() + start(p), samples.begin() + start(p + 1));
  }
}

std::vector<std::vector<int64_t>> sorted(std::vector<std::vector<int64_t>> lists) {
  for (auto& list : lists) std::sort(list.begin(), list.end());
  return lists;
}

// Draws: one Fisher-Yates shuffle of [0, N).
std::vector<std::vector<int64_t>> iid_split(int64_t n, int clients, Rng& rng) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  seeded_shuffle(order, rng);
  std::vector<int> everyone(static_cast<size_t>(clients));
  std::iota(everyone.begin(), everyone.end(), 0);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(clients));
  deal_evenly(order, everyone, out);
  return sorted(std::move(out));
}

// Draws: a shuffle of each label's samples (labels ascending), then per attempt one
// Dirichlet per label (labels ascending).
std::vector<std::vector<int64_t>> dirichlet_split(std::span<const int32_t> labels, int clients,
                                                  double alpha, Rng& rng) {
  std::vector<ClassSamples> groups = group_by_label(labels);
  for (auto& g : groups) seeded_shuffle(g.samples, rng);
  for (int attempt = 0; attempt < kDirichletAttempts; ++attempt) {
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(clients));
    for (const ClassSamples& g : groups) {
      const std::vector<double> p = sample_dirichlet(rng, alpha, clients);
      const auto count = static_cast<int64_t>(g.samples.size());
      // Client c gets [round(count * P(c - 1)), round(count * P(c))) of the cumulative
      // proportions P; the last boundary is count itself, whatever the sum's rounding.
      double cumulative = 0.0;
      int64_t begin = 0;
      for (int c = 0; c < clients; ++c) {
        cumulative += p[static_cast<size_t>(c)];
        const int64_t end =
            c + 1 == clients
                ? count
                : std::clamp<int64_t>(std::llround(static_cast<double>(count) * cumulative), begin,
                                      count);
        auto& list = out[static_cast<size_t>(c)];
        list.insert(list.end(), g.samples.begin() + begin, g.samples.begin() + end);
        begin = end;
      }
    }
    if (std::none_of(out.begin(), out.end(), [](const auto& list) { return list.empty(); }))
      return sorted(std::move(out));
  }
  BRAID_THROW(Error, "fedavg.alpha is ", alpha, ": ", kDirichletAttempts,
              " Dirichlet draws in a row each left one of the ", clients,
              " clients without any of the ", labels.size(),
              " samples; raise fedavg.alpha (0.1 or more) or lower fedavg.clients");
}

// Draws: one shuffle of the labels that occur, then a shuffle of each label's samples (labels
// ascending).
std::vector<std::vector<int64_t>> labels_per_client_split(std::span<const int32_t> labels,
                                                          int num_classes, int clients, int k,
                                                          Rng& rng) {
  BRAID_CHECK(k <= num_classes, "fedavg.labels_per_client is ", k, " but there are only ",
              num_classes, " classes; lower it to at most ", num_classes);
  std::vector<ClassSamples> groups = group_by_label(labels);
  const auto present = static_cast<int64_t>(groups.size());
  BRAID_CHECK(k <= present, "fedavg.labels_per_client is ", k, " but only ", present, " of the ",
              num_classes, " labels occur in the data; lower it to at most ", present);
  const int64_t slots = static_cast<int64_t>(clients) * k;
  BRAID_CHECK(slots >= present, "fedavg.labels_per_client is ", k, ": ", clients, " clients of ", k,
              " labels each hold ", slots, " labels, too few to cover the ", present,
              " labels in the data, and a partition places every sample; raise "
              "fedavg.labels_per_client to at least ",
              (present + clients - 1) / clients, " or use more clients");
  // Slot m of the label cycle is label group perm[m]; client c holds slots c*k .. c*k + k-1
  // (mod present): k consecutive slots, so k distinct labels since k <= present.
  std::vector<int64_t> perm(static_cast<size_t>(present));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  seeded_shuffle(perm, rng);
  std::vector<std::vector<int>> holders(static_cast<size_t>(present));
  for (int c = 0; c < clients; ++c)
    for (int j = 0; j < k; ++j)
      holders[static_cast<size_t>(perm[static_cast<size_t>((int64_t{c} * k + j) % present)])]
          .push_back(c);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(clients));
  for (size_t g = 0; g < groups.size(); ++g) {
    ClassSamples& group = groups[g];
    BRAID_CHECK(group.samples.size() >= holders[g].size(), "fedavg.labels_per_client is ", k,
                ": label ", group.label, " is held by ", holders[g].size(), " of the ", clients,
                " clients but has only ", group.samples.size(),
                " samples, so some would hold fewer than ", k,
                " labels; lower fedavg.labels_per_client or fedavg.clients");
    seeded_shuffle(group.samples, rng);
    deal_evenly(group.samples, holders[g], out);
  }
  return sorted(std::move(out));
}

}  // namespace

std::string_view client_split_kind_name(ClientSplitKind k) {
  switch (k) {
    case ClientSplitKind::iid:
      return "iid";
    case ClientSplitKind::dirichlet:
      return "dirichlet";
    case ClientSplitKind::labels_per_client:
      return "labels_per_client";
  }
  return "?";
}

ClientSplitKind parse_client_split_kind(std::string_view text) {
  for (const ClientSplitKind k :
       {ClientSplitKind::iid, ClientSplitKind::dirichlet, ClientSplitKind::labels_per_client})
    if (text == client_split_kind_name(k)) return k;
  BRAID_THROW(Error, "fedavg.split is '", text,
              "'; use 'iid', 'dirichlet' (label skew set by fedavg.alpha) or "
              "'labels_per_client' (each client holds fedavg.labels_per_client labels)");
}

void validate(const ClientSplitSpec& spec) {
  switch (spec.kind) {
    case ClientSplitKind::iid:
      return;
    case ClientSplitKind::dirichlet:
      return check_alpha(spec.alpha);
    case ClientSplitKind::labels_per_client:
      BRAID_CHECK(spec.labels_per_client >= 1, "fedavg.labels_per_client is ",
                  spec.labels_per_client, "; every client holds at least one label (2 is usual)");
      return;
  }
  BRAID_THROW(Error, "fedavg.split has no kind numbered ", static_cast<int>(spec.kind));
}

std::vector<std::vector<int64_t>> split_clients(std::span<const int32_t> labels, int num_classes,
                                                int clients, const ClientSplitSpec& spec) {
  validate(spec);
  check_inputs(labels, num_classes, clients);
  Rng rng(spec.seed, kClientSplitStream);
  switch (spec.kind) {
    case ClientSplitKind::iid:
      return iid_split(static_cast<int64_t>(labels.size()), clients, rng);
    case ClientSplitKind::dirichlet:
      return dirichlet_split(labels, clients, spec.alpha, rng);
    case ClientSplitKind::labels_per_client:
      return labels_per_client_split(labels, num_classes, clients, spec.labels_per_client, rng);
  }
  return {};
}

double sample_gamma(Rng& rng, double shape) {
  BRAID_CHECK(std::isfinite(shape) && shape > 0.0, "Gamma shape is ", shape,
              "; it must be finite and > 0");
  return std::exp(log_gamma_variate(rng, shape));
}

std::vector<double> sample_dirichlet(Rng& rng, double alpha, int n) {
  check_alpha(alpha);
  BRAID_CHECK(n >= 1, "a Dirichlet over ", n, " parts; it needs at least one");
  // Gamma(alpha) variates normalised to sum 1, from their logs shifted by the largest: the
  // largest part's weight is exactly 1, so the sum is >= 1 even when the others underflow.
  std::vector<double> p(static_cast<size_t>(n));
  for (double& x : p) x = log_gamma_variate(rng, alpha);
  const double top = *std::max_element(p.begin(), p.end());
  double sum = 0.0;
  for (double& x : p) {
    x = std::exp(x - top);
    sum += x;
  }
  for (double& x : p) x /= sum;
  return p;
}

}  // namespace braid::data
