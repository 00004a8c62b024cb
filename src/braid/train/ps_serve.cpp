#include "train/ps_serve.h"

#include <chrono>
#include <filesystem>

#include "comm/group.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/ps_server.h"
#include "parallel/single_process.h"
#include "train/atomic_file.h"
#include "train/model_spec.h"
#include "train/strategy_setup.h"

namespace braid::train {

void serve_parameters(const TrainConfig& config, std::shared_ptr<comm::Group> world,
                      parallel::PsLayout layout, int server) {
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
  // Silence counts only where the server can go on without a worker; in sync mode a dead
  // worker is noticed by its process (or connection) and a stuck one by the group timeout.
  const double timeout_s = config.ps.worker_timeout_s > 0
                               ? config.ps.worker_timeout_s
                               : static_cast<double>(world->timeout().count()) / 1e3;
  if (o.rules.mode != parallel::PsMode::sync)
    o.worker_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  parallel::PsServer ps(std::move(world), std::move(o));
  log_info("ps server ", server, ": floats [", ps.range().begin, ", ", ps.range().end, ") of ",
           model.params().size(), "; mode ", config.ps.mode, ", ", layout.workers, " workers");
  Stopwatch watch;
  ps.run();
  const parallel::PsServerStats s = ps.stats();
  log_info("ps server ", server, ": done after ", s.version, " updates (", s.pushes, " pushes, ",
           s.pulls, " pulls, ", s.dropped, " late gradients dropped) in ", watch.elapsed(), " s");
  if (config.out.empty()) return;
  const nlohmann::json record = {{"server", server},
                                 {"mode", config.ps.mode},
                                 {"workers", layout.workers},
                                 {"range", {ps.range().begin, ps.range().end}},
                                 {"updates", s.version},
                                 {"pushes", s.pushes},
                                 {"pulls", s.pulls},
                                 {"dropped", s.dropped},
                                 {"staleness_histogram", s.staleness_histogram},
                                 {"lost_workers", s.lost},
                                 {"seconds", watch.elapsed()}};
  std::filesystem::create_directories(config.out);
  write_file_atomic(config.out + "/ps-server-" + std::to_string(server) + ".json",
                    record.dump(2) + "\n");
}

}  // namespace braid::train
