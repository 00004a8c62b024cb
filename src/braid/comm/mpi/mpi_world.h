// Groups for a job that mpirun (or srun with PMI) started: the world of MPI_COMM_WORLD
// over an MpiTransport, with its collectives handed to the cluster's MPI (MpiBackend) or
// run by braid's own algorithms over MPI point-to-point.
#pragma once

#include <memory>

#include "comm/group.h"
#include "comm/mpi/mpi_backend.h"

namespace braid::comm {

enum class MpiCollectives {
  mpi,    // collectives call MPI's (MpiBackend)
  braid,  // braid's algorithms over MpiTransport; only point-to-point goes through MPI
};

// Every rank of MPI_COMM_WORLD, in MPI rank order. Initialises MPI if the program has not
// (and then finalises it at exit). Every rank must call it, in the same order relative to
// its other MPI calls.
std::shared_ptr<Group> mpi_world(GroupOptions options = {},
                                 MpiCollectives collectives = MpiCollectives::mpi);

// Hands `group`'s collectives to a new MpiBackend over a communicator of exactly its
// members, in group order (sub-groups from split() too). `group`'s transport must be an
// MpiTransport. Collective over the group's members: each calls it, in the same order.
void use_mpi_backend(Group& group, MpiBackendOptions options = {});

}  // namespace braid::comm
