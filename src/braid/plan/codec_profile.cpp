#include "plan/codec_profile.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "comm/group.h"
#include "comm/inproc_transport.h"
#include "core/rng.h"
#include "core/timer.h"
#include "parallel/codec.h"

namespace braid::plan {
namespace {

struct Run {
  double seconds = 0;  // median call, the slower rank's
  double wire_bytes = 0, dense_bytes = 0;
};

// Both ranks call `name`'s allreduce on the same layout; step numbers past any warm-up.
Run run_codec(const std::string& name, int64_t floats, int repeats) {
  const int64_t side = static_cast<int64_t>(std::sqrt(static_cast<double>(floats)));
  const int64_t count = side * side;
  parallel::BucketLayout bucket;
  bucket.begin = 0;
  bucket.end = count;
  bucket.tensors = {{0, side, side}};
  auto transports = comm::make_inproc_transports(2);
  std::vector<std::vector<double>> times(2);
  std::vector<parallel::CodecReport> reports(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      const auto group = comm::Group::world(transports[static_cast<size_t>(r)]);
      parallel::CodecConfig config;
      config.name = name;
      config.start_iter = 0;
      const std::unique_ptr<parallel::GradientCodec> codec = parallel::make_codec(config);
      std::vector<std::unique_ptr<float[]>> wire;
      codec->prepare({bucket}, 2, [&wire](size_t bytes) -> void* {
        wire.emplace_back(new float[(bytes + 3) / 4]());
        return wire.back().get();
      });
      std::vector<float> grad(static_cast<size_t>(count));
      Rng rng(static_cast<uint64_t>(7 + r));
      for (int i = 0; i <= repeats; ++i) {  // the first call sizes and touches; untimed
        for (float& g : grad) g = rng.uniform(-1.0f, 1.0f);
        const Stopwatch t;
        codec->allreduce(*group, 0, grad.data(), count, 100 + i);
        if (i > 0) times[static_cast<size_t>(r)].push_back(t.elapsed());
        if (i == 0) (void)codec->take_report();
      }
      reports[static_cast<size_t>(r)] = codec->take_report();
    });
  }
  for (auto& t : ranks) t.join();
  Run out;
  std::vector<double> slower;
  for (int i = 0; i < repeats; ++i) slower.push_back(std::max(times[0][i], times[1][i]));
  std::sort(slower.begin(), slower.end());
  out.seconds = slower[slower.size() / 2];
  out.wire_bytes = reports[0].wire_bytes;
  out.dense_bytes = reports[0].dense_bytes;
  return out;
}

}  // namespace

std::vector<CodecProfile> measure_codecs(int64_t floats, int repeats) {
  const Run plain = run_codec("none", floats, repeats);
  const double count = std::pow(std::floor(std::sqrt(static_cast<double>(floats))), 2);
  std::vector<CodecProfile> out;
  for (const char* name : {"int8", "powersgd"}) {
    const Run r = run_codec(name, floats, repeats);
    CodecProfile c;
    c.name = name;
    c.wire_ratio = r.dense_bytes > 0 ? r.wire_bytes / r.dense_bytes : 1;
    c.seconds_per_float = std::max(0.0, r.seconds - plain.seconds) / count;
    out.push_back(c);
  }
  return out;
}

}  // namespace braid::plan
