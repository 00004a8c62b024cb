// Which job this rank belongs to, so that one long-lived store (`braid store`) can serve
// many jobs, one after another or at once: every key a job writes lives under
// "job/<id>/" (launch/job.h), so a later job never reads an earlier one's addresses.
//
// The id comes from, in this order: BRAID_JOB_ID (set by `braid launch`, fresh per job,
// or by the user); torchrun's TORCHELASTIC_RUN_ID with its restart count (an elastic
// restart is a new rendezvous); Open MPI's job (PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid,
// OMPI_MCA_orte_ess_jobid); Slurm's job and step (SLURM_JOB_ID.SLURM_STEP_ID: two sruns
// of one allocation are two jobs). The innermost launcher comes first: torchrun under
// srun restarts without Slurm knowing. Pure: reads variables through `getenv`.
#pragma once

#include <optional>
#include <string>

#include "launch/env.h"

namespace braid::launch {

struct JobId {
  std::string id;      // safe as a store key component: [A-Za-z0-9._:@+-], others %XX
  std::string source;  // the variable(s) it came from, for messages
};

// Nullopt when no launcher or scheduler named the job (torchrun's default run id "none"
// counts as unnamed). Error naming the variable when the id is over 256 bytes.
std::optional<JobId> read_job_id(const GetEnv& getenv = ::getenv);

// `text` with every byte outside [A-Za-z0-9._:@+-] written as %XX: distinct ids stay
// distinct and none contains '/', so one job's keys can never look like another's.
std::string escape_job_id(const std::string& text);

}  // namespace braid::launch
