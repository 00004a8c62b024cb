// MPI's C API only. Open MPI's (and MPICH's) mpi.h pulls in the deprecated C++ bindings
// when compiled as C++, which need libmpi_cxx at link time; braid uses the C API, so every
// braid file includes MPI through this header.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
