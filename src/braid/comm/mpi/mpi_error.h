// MPI return codes as braid errors. Every communicator braid uses is set to
// MPI_ERRORS_RETURN, so a failing MPI call returns here instead of aborting the job, and
// becomes an IoError naming the call, the rank and MPI's own words for the failure.
#pragma once

#include "comm/mpi/mpi_c.h"

namespace braid::comm {

// Throws IoError("MPI_Allreduce failed on rank 3: <MPI_Error_string>") unless rc is
// MPI_SUCCESS. `what` names the call; `rank` is the caller's rank (-1 when unknown).
void mpi_check(int rc, const char* what, int rank);

// Initialises MPI (MPI_THREAD_SERIALIZED requested; FUNNELED is the least braid accepts)
// unless the program already did; when braid initialised it, MPI is finalised at exit.
// Throws Error if MPI was already finalised.
void ensure_mpi_initialized();

}  // namespace braid::comm
