// main() for the tests under mpirun: every rank runs the whole gtest suite; rank 0 prints
// gtest's usual report and every other rank prints its own failures prefixed with its
// rank, so a failure on any rank is visible. The exit code is non-zero on every rank when
// any rank failed (an MPI_Allreduce of the failure flags before MPI_Finalize).
//
// Tests must stay in step across ranks: check values with EXPECT (never return early
// between collective calls), and catch a collective's exception rather than skip the
// collectives after it, or the other ranks wait for a rank that has moved on.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/mpi/mpi_c.h"

namespace braid::mpi_test {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // The test's name is kept here: gtest holds its lock while reporting a result.
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_ = "(outside a test)";
};

}  // namespace braid::mpi_test

// ThreadSanitizer (BRAID_SANITIZE=thread) reads these. Open MPI's byte transfer layers
// take their own mutexes in orders TSan calls inversions (one thread, inside
// mca_btl_vader_send and mca_btl_tcp_add_procs); that is Open MPI's locking, not braid's,
// whose MPI code runs on one thread.
extern "C" __attribute__((used)) const char* __tsan_default_suppressions() {
  return "deadlock:mca_btl_vader.so\n"
         "deadlock:mca_btl_tcp.so\n";
}

int main(int argc, char** argv) {
  // mpirun's --oversubscribe yields an idle rank's core only when it sees more ranks than
  // slots; on a small shared machine ask for it always, so a rank spinning in MPI does not
  // starve the peer it waits for.
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const int rank = braid::mpi_test::world_rank();
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new braid::mpi_test::RankFailurePrinter(rank));
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed)
    std::fprintf(stderr, "[rank 0] other ranks failed; see their [rank N] lines above\n");
  MPI_Finalize();
  return any_failed ? 1 : 0;
}
