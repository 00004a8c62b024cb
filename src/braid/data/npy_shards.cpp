// Shard lists: glob expansion, pairing, and the round-robin plan.
#include "data/npy_shards.h"

#include <glob.h>

#include <algorithm>

#include "core/error.h"

namespace braid::data {

std::vector<std::string> expand_npy_shards(const std::vector<std::string>& patterns,
                                           std::string_view key) {
  std::vector<std::string> out;
  for (const std::string& p : patterns) {
    if (p.find_first_of("*?[") == std::string::npos) {
      out.push_back(p);  // a plain path: a missing file is named when it is opened
      continue;
    }
    glob_t g{};
    const int rc = ::glob(p.c_str(), GLOB_ERR, nullptr, &g);  // sorted by name
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (rc == GLOB_NOMATCH)
      BRAID_THROW(IoError, "'", key, "': the pattern '", p, "' matches no file");
    if (rc != 0) BRAID_THROW(IoError, "'", key, "': cannot expand the pattern '", p, "'");
  }
  return out;
}

int64_t ShardPlan::repeats() const {
  int64_t r = 0;
  for (const int64_t n : samples) r += epoch_samples - n;
  return r;
}

ShardPlan assign_npy_shards(const std::vector<int64_t>& counts, int world) {
  BRAID_CHECK(world >= 1, "world size must be >= 1, got ", world);
  BRAID_CHECK(counts.size() >= static_cast<size_t>(world), "a sharded dataset of ", counts.size(),
              " file", counts.size() == 1 ? "" : "s", " cannot give each of ", world,
              " ranks a file; split it into at least ", world, " files (a multiple of ", world,
              " of equal size balances the ranks)");
  ShardPlan plan;
  plan.files.resize(static_cast<size_t>(world));
  plan.samples.assign(static_cast<size_t>(world), 0);
  for (size_t f = 0; f < counts.size(); ++f) {
    const size_t r = f % static_cast<size_t>(world);
    plan.files[r].push_back(f);
    plan.samples[r] += counts[f];
  }
  plan.epoch_samples = *std::max_element(plan.samples.begin(), plan.samples.end());
  return plan;
}

std::shared_ptr<const MappedNpySource> open_npy_shards(const std::vector<std::string>& features,
                                                       const std::vector<std::string>& labels,
                                                       int rank, int world,
                                                       MappedNpyOptions options,
                                                       ShardPlan* plan_out) {
  BRAID_CHECK(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " is not in a world of ",
              world);
  const std::vector<std::string> x = expand_npy_shards(features, "npy_shards");
  const std::vector<std::string> y = expand_npy_shards(labels, "npy_shard_labels");
  BRAID_CHECK(!x.empty(), "'npy_shards' lists no files");
  if (x.size() != y.size())
    BRAID_THROW(IoError, "'npy_shards' gives ", x.size(), " features files but 'npy_shard_labels' ",
                y.size(), " labels files (", x.front(), " ... and ", y.empty() ? "none" : y.front(),
                " ...); they pair up in order, one labels file per features file");
  // Every header, so every rank computes the same plan; only the rank's files are opened.
  // They must agree on the sample (each rank's source checks only its own files).
  std::vector<int64_t> counts;
  NpyHeader first;
  for (size_t f = 0; f < x.size(); ++f) {
    const NpyFileLayout layout = read_npy_layout(x[f]);
    check_npy_features(x[f], layout.header);
    const NpyHeader& h = layout.header;
    if (f == 0) first = h;
    if (!(h.type == first.type) ||
        !std::equal(h.shape.begin() + 1, h.shape.end(), first.shape.begin() + 1, first.shape.end()))
      BRAID_THROW(IoError, x[f], ": its samples (dtype ", npy_type_descr(h.type), ", ",
                  h.shape.size() - 1, "-d, shape[1:] of ",
                  h.numel() / std::max<int64_t>(1, h.shape[0]), " elements) differ from those of ",
                  x[0], " (dtype ", npy_type_descr(first.type),
                  "); every shard must hold the same kind of sample");
    counts.push_back(h.shape[0]);
  }
  ShardPlan plan = assign_npy_shards(counts, world);
  std::vector<NpyFilePair> mine;
  for (const size_t f : plan.files[static_cast<size_t>(rank)]) mine.push_back({x[f], y[f]});
  options.epoch_size = plan.epoch_samples;
  auto source = std::make_shared<const MappedNpySource>(std::move(mine), options);
  if (plan_out) *plan_out = std::move(plan);
  return source;
}

}  // namespace braid::data
