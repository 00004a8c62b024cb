/* Open MPI reference for `braid bench allreduce`: float32 sum MPI_Allreduce, median time per
 * call for each size, in the nccl-tests convention (algbw = bytes / time, busbw = algbw x
 * 2(n-1)/n). Buffers are allocated and touched once and reused for every call, as braid's
 * benchmark does; whatever MPI does inside each call is what is measured.
 *
 *   mpicc -O2 -o build/mpi_allreduce_bench bench/mpi/mpi_allreduce_bench.c
 *   mpirun --bind-to none -n 2 build/mpi_allreduce_bench [--min 4096] [--max 268435456] [--json]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t min_bytes = 4096, max_bytes = (size_t)256 << 20;
  int json = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--min") && i + 1 < argc) min_bytes = strtoull(argv[++i], 0, 10);
    else if (!strcmp(argv[i], "--max") && i + 1 < argc) max_bytes = strtoull(argv[++i], 0, 10);
    else if (!strcmp(argv[i], "--json")) json = 1;
  }
  float* buf = aligned_alloc(64, max_bytes);
  for (size_t i = 0; i < max_bytes / 4; ++i) buf[i] = (float)(rank + 1);
  if (rank == 0 && !json)
    printf("# Open MPI MPI_Allreduce, float32 sum, %d ranks\n%12s %12s %10s %10s\n", size,
           "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    int count = (int)(bytes / 4);
    /* About 0.3 s of calls per size, at least 5 and at most 1000. */
    double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double first = MPI_Wtime() - t0;
    MPI_Bcast(&first, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int iters = (int)(0.3 / (first > 1e-7 ? first : 1e-7));
    iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
    double* times = malloc(sizeof(double) * iters);
    for (int w = 0; w < 3; ++w)
      MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int it = 0; it < iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      double s = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double e = MPI_Wtime() - s;
      /* The call's time is the slowest rank's. */
      MPI_Allreduce(&e, &times[it], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      /* Keep values bounded so they never overflow to inf over many calls. */
      if (it % 16 == 15)
        for (int i = 0; i < count; ++i) buf[i] = (float)(rank + 1);
    }
    qsort(times, iters, sizeof(double), cmp_double);
    double med = times[iters / 2];
    double algbw = bytes / med / 1e9, busbw = algbw * 2.0 * (size - 1) / size;
    if (rank == 0) {
      if (json)
        printf("{\"impl\":\"openmpi\",\"ranks\":%d,\"bytes\":%zu,\"algorithm\":\"mpi\",\"time_us\":%.3f,"
               "\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,\"iters\":%d}\n",
               size, bytes, med * 1e6, algbw, busbw, iters);
      else
        printf("%12zu %12.2f %10.3f %10.3f\n", bytes, med * 1e6, algbw, busbw);
      fflush(stdout);
    }
    free(times);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
