#include "train/ps_serve.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "comm/group.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/ps_server.h"
#include "parallel/single_process.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"
#include "train/job_kernels.h"
#include "train/model_spec.h"
#include "train/safetensors.h"
#include "train/strategy_setup.h"

namespace braid::train {
namespace {

std::string shard_file(const std::string& dir, int server) {
  return dir + "/ps-server-" + std::to_string(server) + ".safetensors";
}

Tensor int64s(const std::vector<int64_t>& values, bool scalar = false) {
  Tensor t = Tensor::empty(scalar ? Shape{} : Shape{static_cast<int64_t>(values.size())},
                           DType::i64, MemCategory::optimizer);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

void save_shard(const std::string& dir, int server, const parallel::PsShardSnapshot& s) {
  Tensor params = Tensor::empty(Shape{static_cast<int64_t>(s.params.size())}, DType::f32,
                                MemCategory::parameters);
  std::copy(s.params.begin(), s.params.end(), params.f32());
  std::vector<NamedTensor> tensors = {
      {"params", params}, {"version", int64s({s.version}, true)}, {"clocks", int64s(s.clocks)}};
  for (const auto& [name, tensor] : s.optimizer) tensors.push_back({"optimizer." + name, tensor});
  write_safetensors(shard_file(dir, server), tensors);
}

parallel::PsShardSnapshot load_shard(const std::string& dir, int server) {
  const std::string path = shard_file(dir, server);
  BRAID_CHECK(std::filesystem::exists(path), "checkpoint '", dir, "' holds no state of ps server ",
              server, " (", path,
              "); resume a parameter-server run with the servers it was saved with");
  const SafetensorsFile f = read_safetensors(path);
  const auto need = [&](const char* name, DType dtype) -> const Tensor& {
    const Tensor* t = f.find(name);
    BRAID_CHECK(t && t->dtype() == dtype, path, ": no tensor '", name, "' of the right type");
    return *t;
  };
  parallel::PsShardSnapshot s;
  const Tensor& params = need("params", DType::f32);
  s.params.assign(params.f32(), params.f32() + params.numel());
  s.version = *need("version", DType::i64).data<int64_t>();
  const Tensor& clocks = need("clocks", DType::i64);
  s.clocks.assign(clocks.data<int64_t>(), clocks.data<int64_t>() + clocks.numel());
  for (const NamedTensor& t : f.tensors)
    if (t.name.starts_with("optimizer.")) s.optimizer.emplace_back(t.name.substr(10), t.tensor);
  return s;
}

// A restarted server's starting point: the run's last complete checkpoint.
std::string restart_checkpoint(const TrainConfig& config, int server, int incarnation) {
  const std::string none = detail::concat(
      "ps server ", server, " was restarted (restart ", incarnation,
      "), but the run has no checkpoint in '", config.out,
      "' to reload its range from; a server can be restarted only after the chief's first "
      "checkpoint (set checkpoint_every)");
  BRAID_CHECK(!config.out.empty(), none);
  try {
    return find_checkpoint_dir(config.out);
  } catch (const Error& e) {
    BRAID_THROW(Error, none, " (", e.what(), ")");
  }
}

}  // namespace

void serve_parameters(const TrainConfig& config, std::shared_ptr<comm::Group> world,
                      parallel::PsLayout layout, int server, const std::string& resume_dir,
                      std::shared_ptr<parallel::PsRestarts> restarts) {
  // The workers' start is collective (job_kernels.h); a restarted server joins a running job.
  start_job_kernels(config, layout.incarnation > 0 ? nullptr : world.get());
  // The workers' own model, built the same way: its optimizer's segments are the tensors
  // the key ranges are cut along.
  parallel::SingleProcess model(build_model(config.model, config.seq_len).module,
                                step_options(config));
  parallel::PsServerOptions o;
  o.layout = layout;
  o.server = server;
  o.segments = model.optimizer().segments();
  o.buffer_size = model.params().size();
  o.optimizer = config.optimizer;
  o.rules = ps_rules(config, layout.workers);
  o.push_codec = codec_config(config);
  // A silent worker is lost after ps.worker_timeout_s, by default half the job's deadline:
  // the server names a stalled worker before the workers waiting on it reach their own
  // deadline (and blame the server). A lost worker may still come back (async, ssp) until
  // the job's deadline; sync mode without a backup fails at once, naming it.
  const auto deadline = std::chrono::duration_cast<std::chrono::milliseconds>(world->timeout());
  o.worker_timeout =
      config.ps.worker_timeout_s > 0
          ? std::chrono::milliseconds(std::max<int64_t>(
                1, static_cast<int64_t>(std::llround(config.ps.worker_timeout_s * 1e3))))
          : std::max(std::chrono::milliseconds(1), deadline / 2);
  o.worker_deadline = deadline;
  o.save = [server](const std::string& dir, const parallel::PsShardSnapshot& snapshot) {
    save_shard(dir, server, snapshot);
  };
  o.restarts = std::move(restarts);
  if (layout.incarnation > 0) {
    const std::string dir = restart_checkpoint(config, server, layout.incarnation);
    o.resume_from = load_shard(dir, server);
    const nlohmann::json state = read_train_state(dir);
    log_warn("ps server ", server, ": restarted (restart ", layout.incarnation,
             "); reloaded its range and optimizer state from ", dir, ", saved at step ",
             state.value("step", int64_t{-1}), " (version ", o.resume_from->version,
             "): the updates it applied after that checkpoint are lost");
  } else if (!resume_dir.empty()) {
    o.resume_from = load_shard(resume_dir, server);
  }
  parallel::PsServer ps(std::move(world), std::move(o));
  log_info("ps server ", server, ": floats [", ps.range().begin, ", ", ps.range().end, ") of ",
           model.params().size(), "; mode ", config.ps.mode, ", ", layout.workers, " workers");
  Stopwatch watch;
  ps.run();
  const parallel::PsServerStats s = ps.stats();
  log_info("ps server ", server, ": done after ", s.version, " updates (", s.pushes, " pushes, ",
           s.pulls, " pulls, ", s.dropped, " late gradients dropped) in ", watch.elapsed(), " s");
  if (config.out.empty()) return;
  nlohmann::json record = {{"server", server},
                           {"mode", config.ps.mode},
                           {"workers", layout.workers},
                           {"range", {ps.range().begin, ps.range().end}},
                           {"updates", s.version},
                           {"pushes", s.pushes},
                           {"pulls", s.pulls},
                           {"dropped", s.dropped},
                           {"staleness_histogram", s.staleness_histogram},
                           {"lost_workers", s.lost},
                           {"worker_pushes", s.worker_pushes},
                           {"first_push_seconds", s.first_push_s},
                           {"last_push_seconds", s.last_push_s},
                           {"restart", layout.incarnation},
                           {"seconds", watch.elapsed()}};
  nlohmann::json rejoined = nlohmann::json::array();
  for (const parallel::PsServerStats::Rejoin& r : s.rejoins)
    rejoined.push_back({{"worker", r.worker},
                        {"restart", r.incarnation},
                        {"step", r.step},
                        {"pushes_before", r.pushes_before}});
  record["rejoined_workers"] = rejoined;
  std::filesystem::create_directories(config.out);
  write_file_atomic(config.out + "/ps-server-" + std::to_string(server) + ".json",
                    record.dump(2) + "\n");
}

}  // namespace braid::train
