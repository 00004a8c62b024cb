// join_job: env -> secret -> store (hosted or connected, viewed under the job's key
// prefix) -> transport -> world group, all under one deadline. Every variable is read
// here, through options.getenv, and passed to comm/ as options.
#include "launch/job.h"

#include <unistd.h>

#include <string>

#include "comm/memory_store.h"
#include "comm/tcp_store.h"
#include "comm/tcp_transport.h"
#include "core/error.h"
#include "core/log.h"
#include "launch/comm_env.h"
#include "launch/secret_env.h"
#ifdef BRAID_HAVE_MPI
#include "comm/mpi/mpi_world.h"
#endif

namespace braid::launch {
namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Rank 0 listens on the store's address. A loopback address is bound as given; any other
// (a hostname, a service address in front of this pod) is bound on every interface, as
// torch's TCPStore does, because the name others use need not be an address of this
// host. The secret keeps strangers out either way.
std::string bind_host(const std::string& store_host) {
  if (is_loopback(store_host)) return store_host == "localhost" ? "127.0.0.1" : store_host;
  return store_host.find(':') != std::string::npos ? "::" : "0.0.0.0";
}

std::string connect_host(const std::string& store_host) {
  const std::string bound = bind_host(store_host);
  if (bound == "0.0.0.0") return "127.0.0.1";
  if (bound == "::") return "::1";
  return bound;
}

// Where this job's keys live in the store. A store rank 0 hosts belongs to this job
// alone; a store hosted elsewhere (`braid store`, BRAID_STORE_HOSTED=1) may serve other
// jobs before, after and beside this one, and only a job id tells their keys apart:
// without one, a later job would read an earlier one's addresses and shm names.
std::string job_key_prefix(const RankEnv& env) {
  if (!env.job_id.empty()) return "job/" + env.job_id;
  if (env.world_size == 1 || !env.store_hosted) return "job/private";
  BRAID_THROW(Error, "rank ", env.rank, " of ", env.world_size, ": the store at ", env.store_host,
              ":", env.store_port,
              " is shared (BRAID_STORE_HOSTED=1), so this job needs an id that keeps its keys "
              "apart from other jobs': set BRAID_JOB_ID to the same value on every rank and a new "
              "one for every job (e.g. BRAID_JOB_ID=$(date +%s)-$RANDOM), or start the ranks with "
              "a launcher that names the job (braid launch, torchrun --rdzv-id, mpirun, srun)");
}

// Every rank checks in under its own key: a second check-in for the same rank means an
// earlier job used this id on this store, and its stale keys would mislead this one.
void claim_rank(comm::Store& store, const RankEnv& env) {
  const int64_t joins = store.add("joined/rank" + std::to_string(env.rank), 1);
  if (joins == 1) return;
  BRAID_THROW(Error, "rank ", env.rank, " of ", env.world_size, ": job id '", env.job_id,
              "' (from ",
              env.job_id_source.empty() ? "nothing: a private store" : env.job_id_source,
              ") was already used on the store at ", env.store_host, ":", env.store_port,
              " by an earlier job (rank ", env.rank, " joined it ", joins - 1,
              " time(s) before); give every job its own id");
}

}  // namespace

std::optional<std::string> mpi_backend(const GetEnv& getenv) {
  const char* b = getenv("BRAID_BACKEND");
  if (b == nullptr || *b == '\0' || std::string(b) == "braid") return std::nullopt;
  const std::string v = b;
  if (v != "mpi" && v != "mpi-p2p")
    BRAID_THROW(Error, "BRAID_BACKEND='", v, "': expected braid, mpi or mpi-p2p");
  return v;
}

namespace {

// join_job up to the store: `elastic` leaves out what fixes the world (the rank's check-in,
// the transport), which an elastic job makes anew for every membership round.
Job join(const JoinOptions& options, bool elastic, comm::GroupOptions& group_options) {
  Job job;
  group_options.timeout = options.timeout ? *options.timeout : read_timeout(options.getenv);
  group_options.algorithm_table =
      options.algorithm_table ? options.algorithm_table : read_algorithm_table(options.getenv);
  const std::chrono::milliseconds timeout = group_options.timeout;
  if (const auto backend = mpi_backend(options.getenv)) {
#ifdef BRAID_HAVE_MPI
    // mpirun already placed and connected the ranks: no store, no secret, no transport.
    job.world = comm::mpi_world(
        group_options, *backend == "mpi" ? comm::MpiCollectives::mpi : comm::MpiCollectives::braid);
    job.env.rank = job.world->rank();
    job.env.world_size = job.world->size();
    job.env.source = "mpi";
    return job;
#else
    BRAID_THROW(Error, "BRAID_BACKEND=", *backend,
                ": this braid was built without MPI; rebuild with cmake -DBRAID_MPI=ON (needs "
                "Debian's libopenmpi-dev) or unset BRAID_BACKEND to use braid's transports");
#endif
  }

  job.env = read_rank_env(options.getenv);
  const RankEnv& env = job.env;
  const comm::Deadline deadline = comm::Deadline::after(timeout);
  if (options.transport) {
    job.transport_kind = *options.transport;
  } else if (const char* t = options.getenv("BRAID_TRANSPORT"); t != nullptr && *t != '\0') {
    try {
      job.transport_kind = comm::parse_transport_kind(t);
    } catch (const Error& e) {
      BRAID_THROW(Error, "BRAID_TRANSPORT: ", e.what());
    }
  }

  job.secret = read_secret(options.getenv);
  if (env.world_size == 1) {
    // Nobody else connects, so a local store and a throwaway secret do.
    if (job.secret.empty()) job.secret = comm::Secret::generate();
    job.store = std::make_shared<comm::MemoryStore>();
  } else {
    if (job.secret.empty())
      BRAID_THROW(Error, "rank ", env.rank, " of ", env.world_size,
                  ": a job of several ranks needs a shared secret to authenticate its "
                  "connections: set BRAID_SECRET (e.g. BRAID_SECRET=$(openssl rand -hex 32), the "
                  "same on every rank) or BRAID_SECRET_FILE, or start the job with `braid launch`");
    if (env.rank == 0 && !env.store_hosted) {
      comm::StoreServerOptions server;
      server.host = bind_host(env.store_host);
      server.port = env.store_port;
      server.secret = job.secret;
      job.hosted_store = std::make_unique<comm::StoreServer>(std::move(server));
      log_debug("rank 0 hosts the store on ", job.hosted_store->address());
    }
    // Rank 0 reaches its own store over loopback: the name others use may not route back.
    const std::string host = job.hosted_store ? connect_host(env.store_host) : env.store_host;
    try {
      job.store = comm::connect_store(host, env.store_port, job.secret, deadline);
    } catch (const TimeoutError& e) {
      BRAID_THROW(TimeoutError, "rank ", env.rank, " of ", env.world_size,
                  ": cannot reach the job's store (", env.source, "'s variables): ", e.what());
    } catch (const IoError& e) {
      BRAID_THROW(IoError, "rank ", env.rank, " of ", env.world_size,
                  ": cannot reach the job's store (", env.source, "'s variables): ", e.what());
    }
  }

  job.store = comm::prefixed(std::move(job.store), job_key_prefix(env));
  if (env.world_size > 1 && !elastic) claim_rank(*job.store, env);
  job.transport_options = read_transport_options(options.getenv, options.transport_options);
  if (job.transport_options.route_probe_host.empty())
    job.transport_options.route_probe_host = env.store_host;
  // tcp listens where it tells the others to connect: on loopback when the store is (a job
  // on this host, as braid launch starts), else on the address of the route to the store,
  // not on every interface. An address given by hand (BRAID_IFACE_ADDR: maybe a name, or a
  // NAT's address) keeps the listener on every interface.
  comm::TransportOptions& t = job.transport_options;
  const bool every_interface =
      t.listen_host.empty() || t.listen_host == "0.0.0.0" || t.listen_host == "::";
  if (env.world_size > 1 && every_interface && t.advertise_host.empty())
    t.listen_host = comm::tcp_advertise_host(t);
  return job;
}

}  // namespace

Job join_job(const JoinOptions& options) {
  comm::GroupOptions group_options;
  Job job = join(options, false, group_options);
  if (job.world) return job;  // MPI placed the ranks
  const RankEnv& env = job.env;
  const comm::Deadline deadline = comm::Deadline::after(group_options.timeout);
  auto transport =
      comm::connect_transport(job.transport_kind, *transport_store(job), env.rank, env.world_size,
                              job.secret, deadline, job.transport_options);
  job.world = comm::Group::world(std::move(transport), std::move(group_options));
  return job;
}

std::shared_ptr<comm::Store> transport_store(const Job& job) {
  return comm::prefixed(job.store, "transport/0");
}

PsRestartEnv read_ps_restart_env(const GetEnv& getenv) {
  const auto count = [&](const char* name) {
    const char* v = getenv(name);
    if (v == nullptr || *v == '\0') return 0;
    try {
      size_t used = 0;
      const int n = std::stoi(v, &used);
      if (used == std::string(v).size() && n >= 0) return n;
    } catch (const std::exception&) {
    }
    BRAID_THROW(Error, name, "='", v, "' is not a count (a whole number >= 0)");
  };
  return {count("BRAID_PS_RESTARTS"), count("BRAID_RESTART_COUNT")};
}

Job rejoin_ps_job(const JoinOptions& options, int incarnation) {
  comm::GroupOptions group_options;
  Job job = join(options, true, group_options);
  BRAID_CHECK(!job.world,
              "a restarted process runs on braid's transports, not under BRAID_BACKEND");
  const RankEnv& env = job.env;
  auto transport = comm::connect_rejoining_transport(
      job.transport_kind, transport_store(job), env.rank, env.world_size, incarnation, job.secret,
      comm::Deadline::after(group_options.timeout), job.transport_options);
  job.world = comm::Group::world(std::move(transport), std::move(group_options));
  return job;
}

bool elastic_requested(const GetEnv& getenv) {
  const char* e = getenv("BRAID_ELASTIC");
  return e != nullptr && std::string(e) == "1";
}

ElasticJob join_elastic_job(const JoinOptions& options) {
  ElasticJob e;
  e.job = join(options, true, e.group_options);
  BRAID_CHECK(!e.job.world, "an elastic job runs on braid's transports, not under BRAID_BACKEND");
  const char* member = options.getenv("BRAID_ELASTIC_MEMBER");
  // A process the launcher did not start (a user adding a worker) names itself.
  e.member = member != nullptr && *member != '\0' ? std::string(member)
                                                  : "guest-" + std::to_string(::getpid()) + "-" +
                                                        comm::Secret::generate().hex().substr(0, 8);
  if (const char* r = options.getenv("BRAID_RESTART_COUNT"); r != nullptr && *r != '\0')
    e.restart_count = std::stoi(r);
  return e;
}

std::shared_ptr<comm::Group> connect_round(ElasticJob& e, const comm::Round& round,
                                           comm::Deadline deadline) {
  // Every round's connections under keys of their own: no round reads another's addresses.
  auto transport_store = comm::prefixed(e.job.store, "transport/r" + std::to_string(round.number));
  auto transport =
      comm::connect_transport(e.job.transport_kind, *transport_store, round.rank, round.world(),
                              e.job.secret, deadline, e.job.transport_options);
  return comm::Group::world(std::move(transport), e.group_options);
}

}  // namespace braid::launch
