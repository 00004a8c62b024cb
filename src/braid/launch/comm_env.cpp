// read_transport_options and read_algorithm_table: the environment's comm settings.
#include "launch/comm_env.h"

#include <charconv>
#include <string>

#include "core/error.h"

namespace braid::launch {
namespace {

const char* value_of(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Whole microseconds up to 10 s: longer idle spinning only burns a core.
std::chrono::microseconds microseconds_var(const char* name, const std::string& value) {
  constexpr int64_t kMax = 10'000'000;
  int64_t us = -1;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), us);
  if (ec != std::errc() || end != value.data() + value.size() || us < 0 || us > kMax)
    BRAID_THROW(Error, name, "='", value, "' is not valid: expected whole microseconds in [0, ",
                kMax, "], e.g. 50");
  return std::chrono::microseconds(us);
}

}  // namespace

comm::TransportOptions read_transport_options(const GetEnv& getenv, comm::TransportOptions given) {
  if (given.advertise_host.empty())
    if (const char* v = value_of(getenv, "BRAID_IFACE_ADDR")) given.advertise_host = v;
  if (!given.shm_spin)
    if (const char* v = value_of(getenv, "BRAID_SHM_SPIN_US"))
      given.shm_spin = microseconds_var("BRAID_SHM_SPIN_US", v);
  if (!given.shm_yield)
    if (const char* v = value_of(getenv, "BRAID_SHM_YIELD_US"))
      given.shm_yield = microseconds_var("BRAID_SHM_YIELD_US", v);
  // A job whose launcher restarts dead processes (a parameter-server job with
  // --max-restarts): every rank may have to take a restarted peer.
  if (const char* v = value_of(getenv, "BRAID_PS_RESTARTS"); v != nullptr && std::string(v) != "0")
    given.accept_rejoins = true;
  return given;
}

std::shared_ptr<const comm::SelectionTable> read_algorithm_table(const GetEnv& getenv) {
  const char* path = value_of(getenv, "BRAID_ALGORITHM_TABLE");
  if (path == nullptr) return nullptr;
  constexpr char kHint[] = " (unset BRAID_ALGORITHM_TABLE to use the built-in table)";
  try {
    return std::make_shared<const comm::SelectionTable>(comm::SelectionTable::from_json_file(path));
  } catch (const IoError& e) {
    BRAID_THROW(IoError, "BRAID_ALGORITHM_TABLE: ", e.what(), kHint);
  } catch (const Error& e) {
    BRAID_THROW(Error, "BRAID_ALGORITHM_TABLE: ", e.what(), kHint);
  }
}

}  // namespace braid::launch
