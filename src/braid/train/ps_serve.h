// The server side of a parameter-server job (`braid train` on a process whose role is ps):
// builds the model only to learn its tensors and size, cuts this server's key range from
// them, and serves it to the workers until they are done (parallel/ps_server.h). The
// optimizer and consistency rules come from the same config the workers read.
#pragma once

#include <memory>
#include <string>

#include "parallel/ps_protocol.h"
#include "train/config.h"

namespace braid::comm {
class Group;
}
namespace braid::parallel {
class PsRestarts;
}

namespace braid::train {

// Serves server `server` of `layout` over the job's world group. When config.out is set,
// writes what the server saw (updates, dropped gradients, staleness histogram, lost
// workers) to <out>/ps-server-<server>.json at the end, for the run's metrics. Throws
// what the server throws (a lost worker sync mode cannot do without, a protocol error).
// `resume_dir` (a checkpoint directory, or empty): start from the shard the server saved
// there (ps-server-<server>.safetensors: its range, optimizer state, version and the
// workers' step counts), written when the chief saved that checkpoint.
//
// `restarts` (a job whose launcher restarts dead processes, parallel/ps_restarts.h): the
// server waits for restarted workers and connects to them. A restarted server
// (layout.incarnation > 0) starts from the run's last checkpoint in config.out (its range,
// optimizer state, version and the workers' step counts), says which, and that the updates
// it applied after that checkpoint are lost; a run with no checkpoint yet cannot restart it.
void serve_parameters(const TrainConfig& config, std::shared_ptr<comm::Group> world,
                      parallel::PsLayout layout, int server, const std::string& resume_dir = "",
                      std::shared_ptr<parallel::PsRestarts> restarts = nullptr);

}  // namespace braid::train
