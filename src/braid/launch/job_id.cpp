// read_job_id: the first launcher or scheduler variable that names the job, escaped.
#include "launch/job_id.h"

#include <cstdio>

#include "core/error.h"

namespace braid::launch {
namespace {

// Long enough for any scheduler's id (PMIx namespaces run to 255 bytes), short enough to
// keep keys small.
constexpr size_t kMaxJobIdBytes = 256;

std::optional<std::string> var(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

JobId make(const std::string& raw, std::string source) {
  if (raw.size() > kMaxJobIdBytes)
    BRAID_THROW(Error, source, " is ", raw.size(), " bytes long; a job id may have at most ",
                kMaxJobIdBytes, " (set BRAID_JOB_ID to a shorter one, the same on every rank)");
  return JobId{escape_job_id(raw), std::move(source)};
}

}  // namespace

std::string escape_job_id(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == ':' || c == '@' || c == '+' || c == '-';
    if (plain) {
      out += c;
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  return out;
}

std::optional<JobId> read_job_id(const GetEnv& getenv) {
  if (const auto id = var(getenv, "BRAID_JOB_ID")) return make(*id, "BRAID_JOB_ID");
  // torchrun's --rdzv-id defaults to "none": every such job would share it.
  if (const auto run = var(getenv, "TORCHELASTIC_RUN_ID"); run && *run != "none") {
    const auto restart = var(getenv, "TORCHELASTIC_RESTART_COUNT");
    return make("torchelastic-" + *run + "-restart" + restart.value_or("0"),
                "TORCHELASTIC_RUN_ID and TORCHELASTIC_RESTART_COUNT");
  }
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"})
    if (const auto id = var(getenv, name)) return make(std::string("ompi-") + *id, name);
  if (const auto job = var(getenv, "SLURM_JOB_ID")) {
    const auto step = var(getenv, "SLURM_STEP_ID");
    return make("slurm-" + *job + (step ? "." + *step : ""),
                step ? "SLURM_JOB_ID and SLURM_STEP_ID" : "SLURM_JOB_ID");
  }
  return std::nullopt;
}

}  // namespace braid::launch
