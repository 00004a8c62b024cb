// The comm settings a rank reads from its environment. comm/ reads no environment and
// keeps no process-wide state, so join_job reads these here and passes them in as
// options. Pure: reads variables through `getenv`, so tests pass their own.
//
//   BRAID_IFACE_ADDR       the address peers use to reach this rank over tcp
//                          (TransportOptions::advertise_host)
//   BRAID_SHM_SPIN_US      microseconds an idle shm wait spins, then
//   BRAID_SHM_YIELD_US     yields the core, before it sleeps (benchmark tuning)
//   BRAID_ALGORITHM_TABLE  a selection table file (`braid bench allreduce --write-table`)
//                          for the world group and every group split from it
//   BRAID_PS_RESTARTS      nonzero: the launcher restarts dead processes of this
//                          parameter-server job (TransportOptions::accept_rejoins)
//
// An empty value counts as unset. A malformed value is braid::Error naming the variable,
// its value and what is accepted.
#pragma once

#include <memory>

#include "comm/algorithm.h"
#include "comm/transport_factory.h"
#include "launch/env.h"

namespace braid::launch {

// `given` with every field the caller left unset filled from the environment: set fields
// win over the variables.
comm::TransportOptions read_transport_options(const GetEnv& getenv = ::getenv,
                                              comm::TransportOptions given = {});

// The table BRAID_ALGORITHM_TABLE names, or null (the built-in table) when unset. Errors
// (IoError for a file that cannot be read) name the variable and the file.
std::shared_ptr<const comm::SelectionTable> read_algorithm_table(const GetEnv& getenv = ::getenv);

}  // namespace braid::launch
