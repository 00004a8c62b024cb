#include "comm/mpi/mpi_error.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"

namespace braid::comm {

void mpi_check(int rc, const char* what, int rank) {
  if (rc == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  const std::string reason = length > 0 ? std::string(text, static_cast<size_t>(length))
                                        : "MPI error code " + std::to_string(rc);
  BRAID_THROW(IoError, what, " failed on rank ", rank, ": ", reason,
              " (check the job's MPI setup; mpirun's output may name the failing host)");
}

namespace {
// Registered with atexit only when braid called MPI_Init_thread, so a program that owns
// MPI keeps owning its shutdown.
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
}  // namespace

void ensure_mpi_initialized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  BRAID_CHECK(!finalized,
              "MPI was already finalised; build braid's MPI groups before MPI_Finalize");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_FUNNELED)
      log_warn("MPI was initialised with thread level ", provided,
               "; braid calls MPI only from the thread that drives a group, which needs at "
               "least MPI_THREAD_FUNNELED (use MPI_Init_thread)");
    return;
  }
  // SERIALIZED because a rank's communication thread (not always the main thread) may drive
  // a group; braid never calls MPI from two threads at once.
  int provided = MPI_THREAD_SINGLE;
  mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread",
            -1);
  if (provided < MPI_THREAD_FUNNELED)
    log_warn("MPI provides thread level ", provided,
             " only; drive braid's MPI groups from the main thread");
  std::atexit(finalize_at_exit);
}

}  // namespace braid::comm
