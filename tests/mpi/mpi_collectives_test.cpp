// The collective suite under mpirun, for whatever number of ranks the job has: every
// collective through the MPI backend (MpiBackend, also with counts split into pieces) and
// through braid's own algorithms over MpiTransport (every allreduce algorithm forced),
// counts 0, 1, 7, 1000, 4099, dtypes f32/f64/bf16/f16/i32/i64 and ops sum/avg/min/max/prod,
// against a dense reference that every rank computes from every rank's inputs.
//
// Tolerances: integers are exact. A float result is a combination of n inputs in some
// order, each step rounded to the dtype (unit roundoff u = 2^-24 f32, 2^-53 f64, 2^-8 bf16,
// 2^-11 f16), so a sum is within (n-1) u sum|x| of the exact sum, and the f64 reference is
// within as much again; 2 (n+1) u sum|x| covers both plus avg's division (with /n for avg),
// 2 (n+1) u |prod| does the same for products, and min/max select an input exactly.
// Results that every rank holds (allreduce, allgather, broadcast) must also be bitwise
// equal across ranks: each rank hashes them and rank 0 compares the hashes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/mpi/mpi_world.h"
#include "core/convert.h"
#include "mpi/mpi_test_main.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;
using mpi_test::world_rank;
using mpi_test::world_size;

constexpr std::array<size_t, 5> kCounts = {0, 1, 7, 1000, 4099};
constexpr std::array<DType, 6> kDTypes = {DType::f32, DType::f64, DType::bf16,
                                          DType::f16, DType::i32, DType::i64};
constexpr std::array<ReduceOp, 5> kOps = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min,
                                          ReduceOp::max, ReduceOp::prod};
constexpr std::array<Algorithm, 5> kAllreduceAlgorithms = {
    Algorithm::ring, Algorithm::halving_doubling, Algorithm::binary_blocks, Algorithm::tree,
    Algorithm::direct};
// Bounds a broken peer's hang; far above what any call here needs.
constexpr std::chrono::milliseconds kTimeout = 60s;
// MpiBackend's piece size for the "mpi-pieces" path: a prime, so 1000 and 4099 split
// into uneven pieces.
constexpr size_t kPiece = 97;
constexpr int kMaxReports = 8;  // failures reported per test and rank, to keep logs readable

// ---- the groups, built once for the whole binary ----

struct Path {
  std::string name;
  std::shared_ptr<Group> group;
  Algorithm algorithm = Algorithm::automatic;
  bool mpi = false;
};

class Groups : public ::testing::Environment {
 public:
  void SetUp() override {
    mpi = mpi_world(GroupOptions{kTimeout});
    braid = mpi_world(GroupOptions{kTimeout}, MpiCollectives::braid);
    pieces = mpi_world(GroupOptions{kTimeout}, MpiCollectives::braid);
    use_mpi_backend(*pieces, MpiBackendOptions{.max_piece_elements = kPiece});
  }
  void TearDown() override { mpi = braid = pieces = nullptr; }
  std::shared_ptr<Group> mpi, braid, pieces;
};
Groups* groups = nullptr;

// The MPI backend (whole and in pieces) and braid's algorithms; with every allreduce
// algorithm forced when `algorithms`.
std::vector<Path> paths(bool algorithms) {
  std::vector<Path> p = {{"mpi", groups->mpi, Algorithm::automatic, true},
                         {"mpi-pieces", groups->pieces, Algorithm::automatic, true},
                         {"braid", groups->braid, Algorithm::automatic, false}};
  if (algorithms)
    for (Algorithm a : kAllreduceAlgorithms)
      p.push_back({"braid/" + std::string(algorithm_name(a)), groups->braid, a, false});
  return p;
}

// ---- inputs: deterministic in (seed, rank, index), so every rank knows every input ----

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t key(uint64_t seed, int rank, size_t i) {
  return mix(mix(seed * 1000003 + static_cast<uint64_t>(rank)) + i);
}

bool is_float(DType d) { return d != DType::i32 && d != DType::i64; }

double unit_roundoff(DType d) {
  switch (d) {
    case DType::f32:
      return 0x1p-24;
    case DType::f64:
      return 0x1p-53;
    case DType::bf16:
      return 0x1p-8;
    case DType::f16:
      return 0x1p-11;
    default:
      return 0;
  }
}

double load_float(DType d, const void* p, size_t i) {
  switch (d) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::f64:
      return static_cast<const double*>(p)[i];
    case DType::bf16:
      return bf16_to_float(static_cast<const BFloat16*>(p)[i]);
    case DType::f16:
      return half_to_float(static_cast<const Half*>(p)[i]);
    default:
      return NAN;
  }
}
int64_t load_int(DType d, const void* p, size_t i) {
  return d == DType::i32 ? static_cast<const int32_t*>(p)[i] : static_cast<const int64_t*>(p)[i];
}

// The value a rank contributes at element i: floats of magnitude [0.25, 2) with random
// sign (products of up to 4 stay normal even in f16), small integers (i64 scaled past 32
// bits where no product is taken).
void store_input(DType d, ReduceOp op, uint64_t k, void* p, size_t i) {
  if (is_float(d)) {
    const double magnitude = 0.25 + 1.75 * static_cast<double>(k >> 11) * 0x1p-53;
    const float v = static_cast<float>((k & 1) ? -magnitude : magnitude);
    switch (d) {
      case DType::f32:
        static_cast<float*>(p)[i] = v;
        break;
      case DType::f64:
        static_cast<double*>(p)[i] = (k & 1) ? -magnitude : magnitude;
        break;
      case DType::bf16:
        static_cast<BFloat16*>(p)[i] = float_to_bf16(v);
        break;
      case DType::f16:
        static_cast<Half*>(p)[i] = float_to_half(v);
        break;
      default:
        break;
    }
    return;
  }
  int64_t v = static_cast<int64_t>(k % 19) - 9;
  if (d == DType::i64 && op != ReduceOp::prod)
    v = v * (int64_t{1} << 33) + static_cast<int64_t>((k >> 8) % 7);
  if (d == DType::i32)
    static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
  else
    static_cast<int64_t*>(p)[i] = v;
}

// `count` inputs of `rank` for elements [first, first + count) of the call's index space.
std::vector<uint8_t> inputs(DType d, ReduceOp op, uint64_t seed, int rank, size_t first,
                            size_t count) {
  std::vector<uint8_t> buf(count * dtype_size(d));
  for (size_t i = 0; i < count; ++i) store_input(d, op, key(seed, rank, first + i), buf.data(), i);
  return buf;
}

// Random bytes for the collectives that only move data.
std::vector<uint8_t> bytes_of(uint64_t seed, int rank, size_t first, size_t bytes) {
  std::vector<uint8_t> buf(bytes);
  for (size_t i = 0; i < bytes; ++i)
    buf[i] = static_cast<uint8_t>(key(seed, rank, first + i) >> 56);
  return buf;
}

// Checks out[0, count) against op over `ranks` of their inputs at [first, first + count);
// "" when every element is right, else the first wrong element.
std::string check_reduced(DType d, ReduceOp op, uint64_t seed, const std::vector<int>& ranks,
                          size_t first, const void* out, size_t count) {
  const int n = static_cast<int>(ranks.size());
  std::vector<uint8_t> one(dtype_size(d));
  for (size_t i = 0; i < count; ++i) {
    if (is_float(d)) {
      double acc = 0, abs_sum = 0;
      for (int j = 0; j < n; ++j) {
        store_input(d, op, key(seed, ranks[j], first + i), one.data(), 0);
        const double x = load_float(d, one.data(), 0);
        abs_sum += std::fabs(x);
        if (j == 0)
          acc = x;
        else if (op == ReduceOp::sum || op == ReduceOp::avg)
          acc += x;
        else if (op == ReduceOp::prod)
          acc *= x;
        else if (op == ReduceOp::min)
          acc = std::min(acc, x);
        else
          acc = std::max(acc, x);
      }
      const double u = unit_roundoff(d);
      double tol = 0;
      if (op == ReduceOp::sum) tol = 2 * (n + 1) * u * abs_sum;
      if (op == ReduceOp::avg) acc /= n, tol = 2 * (n + 1) * u * abs_sum / n;
      if (op == ReduceOp::prod) tol = 2 * (n + 1) * u * std::fabs(acc);
      const double got = load_float(d, out, i);
      if (!(std::fabs(got - acc) <= tol))
        return detail::concat("element ", i, " is ", got, ", want ", acc, " +- ", tol);
    } else {
      int64_t acc = 0;
      for (int j = 0; j < n; ++j) {
        store_input(d, op, key(seed, ranks[j], first + i), one.data(), 0);
        const int64_t x = load_int(d, one.data(), 0);
        if (j == 0)
          acc = x;
        else if (op == ReduceOp::sum || op == ReduceOp::avg)
          acc += x;
        else if (op == ReduceOp::prod)
          acc *= x;
        else if (op == ReduceOp::min)
          acc = std::min(acc, x);
        else
          acc = std::max(acc, x);
      }
      if (op == ReduceOp::avg) acc /= n;  // truncates toward zero, like divide_by
      const int64_t got = load_int(d, out, i);
      if (got != acc) return detail::concat("element ", i, " is ", got, ", want ", acc);
    }
  }
  return "";
}

std::vector<int> all_ranks(int n) {
  std::vector<int> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

// ---- reporting ----

// Collects the hash of every result that all ranks must hold bitwise equal; expect_equal()
// (a collective over MPI_COMM_WORLD) has rank 0 compare every rank's hashes with its own.
class CrossRank {
 public:
  void add(std::string name, const void* data, size_t bytes) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < bytes; ++i)
      h = (h ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
    names_.push_back(std::move(name));
    hashes_.push_back(h);
  }
  void expect_equal() {
    const int n = world_size();
    int k = static_cast<int>(hashes_.size()), k_min = 0, k_max = 0;
    MPI_Allreduce(&k, &k_min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&k, &k_max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (k_min != k_max) {
      ADD_FAILURE() << "ranks ran different numbers of cases (" << k_min << " to " << k_max << ")";
      return;
    }
    std::vector<uint64_t> all(world_rank() == 0 ? static_cast<size_t>(n) * hashes_.size() : 1);
    MPI_Gather(hashes_.data(), k, MPI_UINT64_T, all.data(), k, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (world_rank() != 0) return;
    int reports = 0;
    for (int r = 1; r < n; ++r)
      for (size_t i = 0; i < hashes_.size(); ++i)
        if (all[static_cast<size_t>(r) * hashes_.size() + i] != all[i] && reports++ < kMaxReports)
          ADD_FAILURE() << names_[i] << ": rank " << r
                        << "'s result is not bitwise equal to rank 0's";
  }

 private:
  std::vector<std::string> names_;
  std::vector<uint64_t> hashes_;
};

// Runs one collective call per case, turning an exception into a failure, and then has
// every rank agree (an MPI_Allreduce on MPI_COMM_WORLD) whether all calls succeeded: after
// one rank's call fails, every rank stops the test at the same case instead of waiting,
// one timeout per call, for a rank that has moved on.
class Cases {
 public:
  bool run(const std::string& name, const std::function<void()>& call) {
    int ok = 1;
    try {
      call();
    } catch (const std::exception& e) {
      fail(name, e.what());
      ok = 0;
    }
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) stopped_ = true;
    return ok != 0;
  }
  // True (on every rank alike) once a call failed on some rank: end the test.
  bool stopped() const { return stopped_; }
  void fail(const std::string& name, const std::string& why) {
    if (failures_++ < kMaxReports) ADD_FAILURE() << name << ": " << why;
  }
  void expect(const std::string& name, const std::string& problem) {
    if (!problem.empty()) fail(name, problem);
  }

 private:
  int failures_ = 0;
  bool stopped_ = false;
};

CollectiveOptions options(Algorithm algorithm) {
  CollectiveOptions o;
  o.algorithm = algorithm;
  return o;
}

std::string case_name(const Path& p, const char* call, DType d, size_t count, int extra = -1,
                      const char* extra_name = "") {
  std::string s = detail::concat(p.name, " ", call, " ", dtype_name(d), " count ", count);
  if (extra >= 0) s += detail::concat(" ", extra_name, " ", extra);
  return s;
}

// ---- the suite ----

TEST(MpiCollectives, WorldGroupsMatchMpi) {
  for (const auto& g : {groups->mpi, groups->braid, groups->pieces}) {
    EXPECT_EQ(g->rank(), world_rank());
    EXPECT_EQ(g->size(), world_size());
    EXPECT_EQ(g->transport().name(), "mpi");
  }
  EXPECT_NE(groups->mpi->backend(), nullptr);
  EXPECT_NE(groups->pieces->backend(), nullptr);
  EXPECT_EQ(groups->braid->backend(), nullptr);
}

TEST(MpiCollectives, Allreduce) {
  const int n = world_size();
  Cases cases;
  CrossRank cross;
  uint64_t seed = 100;
  for (const Path& p : paths(/*algorithms=*/true))
    for (DType d : kDTypes)
      for (ReduceOp op : kOps)
        for (size_t count : kCounts) {
          if (cases.stopped()) return;
          ++seed;
          const std::string name =
              case_name(p, "allreduce", d, count) + " " + std::string(reduce_op_name(op));
          auto buf = inputs(d, op, seed, world_rank(), 0, count);
          if (cases.run(name, [&] {
                allreduce(*p.group, buf.data(), count, d, op, options(p.algorithm));
              }))
            cases.expect(name, check_reduced(d, op, seed, all_ranks(n), 0, buf.data(), count));
          cross.add(name, buf.data(), buf.size());
        }
  cross.expect_equal();
}

TEST(MpiCollectives, ReduceScatter) {
  const int n = world_size(), me = world_rank();
  Cases cases;
  uint64_t seed = 200'000;
  for (const Path& p : paths(false))
    for (DType d : kDTypes)
      for (ReduceOp op : kOps)
        for (size_t count : kCounts) {
          if (cases.stopped()) return;
          ++seed;
          const std::string name =
              case_name(p, "reduce_scatter", d, count) + " " + std::string(reduce_op_name(op));
          const auto send = inputs(d, op, seed, me, 0, count * static_cast<size_t>(n));
          std::vector<uint8_t> recv(count * dtype_size(d), 0xEE);
          if (cases.run(name, [&] {
                reduce_scatter(*p.group, send.data(), recv.data(), count, d, op,
                               options(p.algorithm));
              }))
            cases.expect(name, check_reduced(d, op, seed, all_ranks(n),
                                             static_cast<size_t>(me) * count, recv.data(), count));
        }
}

TEST(MpiCollectives, Reduce) {
  const int n = world_size(), me = world_rank();
  Cases cases;
  uint64_t seed = 300'000;
  for (const Path& p : paths(false))
    for (DType d : kDTypes)
      for (ReduceOp op : kOps)
        for (size_t count : kCounts) {
          if (cases.stopped()) return;
          ++seed;
          const int root = static_cast<int>(seed % static_cast<uint64_t>(n));
          const std::string name = case_name(p, "reduce", d, count, root, "root") + " " +
                                   std::string(reduce_op_name(op));
          auto buf = inputs(d, op, seed, me, 0, count);
          if (cases.run(name,
                        [&] {
                          reduce(*p.group, buf.data(), count, d, op, root, options(p.algorithm));
                        }) &&
              me == root)
            cases.expect(name, check_reduced(d, op, seed, all_ranks(n), 0, buf.data(), count));
        }
}

TEST(MpiCollectives, Allgather) {
  const int n = world_size(), me = world_rank();
  Cases cases;
  CrossRank cross;
  uint64_t seed = 400'000;
  for (const Path& p : paths(false))
    for (DType d : kDTypes)
      for (size_t count : kCounts)
        for (bool in_place : {false, true}) {
          if (cases.stopped()) return;
          ++seed;
          const std::string name =
              case_name(p, "allgather", d, count) + (in_place ? " in place" : "");
          const size_t block = count * dtype_size(d);
          const auto mine = bytes_of(seed, me, 0, block);
          std::vector<uint8_t> recv(block * static_cast<size_t>(n), 0xEE);
          const uint8_t* send = mine.data();
          if (in_place) {
            std::copy(mine.begin(), mine.end(), recv.begin() + static_cast<ptrdiff_t>(me * block));
            send = recv.data() + me * block;
          }
          if (cases.run(name, [&] {
                allgather(*p.group, send, recv.data(), count, d, options(p.algorithm));
              })) {
            for (int r = 0; r < n; ++r)
              if (!std::equal(recv.begin() + static_cast<ptrdiff_t>(r * block),
                              recv.begin() + static_cast<ptrdiff_t>((r + 1) * block),
                              bytes_of(seed, r, 0, block).begin()))
                cases.fail(name, detail::concat("block of rank ", r, " differs"));
          }
          cross.add(name, recv.data(), recv.size());
        }
  cross.expect_equal();
}

TEST(MpiCollectives, Broadcast) {
  const int n = world_size(), me = world_rank();
  Cases cases;
  CrossRank cross;
  uint64_t seed = 500'000;
  for (const Path& p : paths(false))
    for (DType d : kDTypes)
      for (size_t count : kCounts) {
        if (cases.stopped()) return;
        ++seed;
        const int root = static_cast<int>(seed % static_cast<uint64_t>(n));
        const std::string name = case_name(p, "broadcast", d, count, root, "root");
        const size_t bytes = count * dtype_size(d);
        auto buf = bytes_of(seed, me, 0, bytes);  // the root's is the one to arrive
        if (cases.run(
                name,
                [&] { broadcast(*p.group, buf.data(), count, d, root, options(p.algorithm)); }) &&
            buf != bytes_of(seed, root, 0, bytes))
          cases.fail(name, "data differs from the root's");
        cross.add(name, buf.data(), buf.size());
      }
  cross.expect_equal();
}

TEST(MpiCollectives, Gather) {
  const int n = world_size(), me = world_rank();
  Cases cases;
  uint64_t seed = 600'000;
  for (const Path& p : paths(false))
    for (DType d : kDTypes)
      for (size_t count : kCounts) {
        if (cases.stopped()) return;
        ++seed;
        const int root = static_cast<int>(seed % static_cast<uint64_t>(n));
        const std::string name = case_name(p, "gather", d, count, root, "root");
        const size_t block = count * dtype_size(d);
        const auto send = bytes_of(seed, me, 0, block);
        // Off the root recv is ignored: pass none.
        std::vector<uint8_t> recv(me == root ? block * static_cast<size_t>(n) : 0, 0xEE);
        if (cases.run(name,
                      [&] {
                        gather(*p.group, send.data(), me == root ? recv.data() : nullptr, count, d,
                               root, options(p.algorithm));
                      }) &&
            me == root)
          for (int r = 0; r < n; ++r)
            if (!std::equal(recv.begin() + static_cast<ptrdiff_t>(r * block),
                            recv.begin() + static_cast<ptrdiff_t>((r + 1) * block),
                            bytes_of(seed, r, 0, block).begin()))
              cases.fail(name, detail::concat("block of rank ", r, " differs"));
      }
}

TEST(MpiCollectives, Scatter) {
  const int n = world_size(), me = world_rank();
  Cases cases;
  uint64_t seed = 700'000;
  for (const Path& p : paths(false))
    for (DType d : kDTypes)
      for (size_t count : kCounts) {
        if (cases.stopped()) return;
        ++seed;
        const int root = static_cast<int>(seed % static_cast<uint64_t>(n));
        const std::string name = case_name(p, "scatter", d, count, root, "root");
        const size_t block = count * dtype_size(d);
        // Off the root send is ignored: pass none.
        const auto send = me == root ? bytes_of(seed, root, 0, block * static_cast<size_t>(n))
                                     : std::vector<uint8_t>();
        std::vector<uint8_t> recv(block, 0xEE);
        if (cases.run(name,
                      [&] {
                        scatter(*p.group, me == root ? send.data() : nullptr, recv.data(), count, d,
                                root, options(p.algorithm));
                      }) &&
            recv != bytes_of(seed, root, me * block, block))
          cases.fail(name, "this rank's block differs from the root's");
      }
}

TEST(MpiCollectives, Alltoall) {
  const int n = world_size(), me = world_rank();
  Cases cases;
  uint64_t seed = 800'000;
  for (const Path& p : paths(false))
    for (DType d : kDTypes)
      for (size_t count : kCounts)
        for (bool in_place : {false, true}) {
          // braid's contract has separate buffers; MpiBackend also takes send == recv.
          if (in_place && !p.mpi) continue;
          if (cases.stopped()) return;
          ++seed;
          const std::string name =
              case_name(p, "alltoall", d, count) + (in_place ? " in place" : "");
          const size_t block = count * dtype_size(d);
          const auto send = bytes_of(seed, me, 0, block * static_cast<size_t>(n));
          std::vector<uint8_t> recv = in_place ? send : std::vector<uint8_t>(send.size(), 0xEE);
          if (cases.run(name, [&] {
                alltoall(*p.group, in_place ? recv.data() : send.data(), recv.data(), count, d,
                         options(p.algorithm));
              }))
            for (int r = 0; r < n; ++r)
              if (!std::equal(recv.begin() + static_cast<ptrdiff_t>(r * block),
                              recv.begin() + static_cast<ptrdiff_t>((r + 1) * block),
                              bytes_of(seed, r, me * block, block).begin()))
                cases.fail(name, detail::concat("block from rank ", r, " differs"));
        }
}

// A barrier completes on every path and leaves the group in step for the next call.
TEST(MpiCollectives, Barrier) {
  const int n = world_size();
  Cases cases;
  for (const Path& p : paths(false)) {
    if (cases.stopped()) return;
    int64_t one = 1;
    cases.run(p.name + " barrier", [&] {
      for (int i = 0; i < 3; ++i) barrier(*p.group, options(p.algorithm));
      allreduce(*p.group, &one, 1, DType::i64, ReduceOp::sum);
    });
    EXPECT_EQ(one, n) << p.name;
  }
}

// Sub-groups from split() (odd and even ranks, in reverse order) run collectives with
// their own MPI communicator (use_mpi_backend) or braid's algorithms.
TEST(MpiCollectives, SplitSubGroups) {
  const int me = world_rank();
  Cases cases;
  const uint64_t seed = 900'000;
  for (const Path& p : paths(false)) {
    if (p.name == "mpi-pieces") continue;
    if (cases.stopped()) return;
    std::shared_ptr<Group> sub;
    if (!cases.run(p.name + " split",
                   [&] {
                     sub = p.group->split(me % 2, -me);
                     if (p.mpi) use_mpi_backend(*sub);
                   }) ||
        cases.stopped())
      return;
    const std::string name = p.name + " sub-group allreduce f32 sum count 1000";
    auto buf = inputs(DType::f32, ReduceOp::sum, seed, me, 0, 1000);
    if (cases.run(name, [&] { allreduce(*sub, buf.data(), 1000, DType::f32, ReduceOp::sum); }))
      cases.expect(name, check_reduced(DType::f32, ReduceOp::sum, seed, sub->members(), 0,
                                       buf.data(), 1000));
    if (cases.stopped()) return;
    int64_t first = me;  // sub-group rank 0 is the highest world rank of the colour
    if (cases.run(p.name + " sub-group broadcast",
                  [&] { broadcast(*sub, &first, 1, DType::i64, 0); })) {
      EXPECT_EQ(first, sub->members().front()) << p.name;
    }
    EXPECT_EQ(sub->members().front() % 2, me % 2);
  }
}

// Ranks that disagree about the call fail with CollectiveMismatch naming both calls, on
// every rank: with the direct algorithm each rank receives from each other, so each meets
// a message with the other signature. A fresh group keeps the leftovers away from the rest.
TEST(MpiCollectives, SignatureMismatchThroughBraidAlgorithms) {
  const int n = world_size(), me = world_rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks to disagree";
  auto g = mpi_world(GroupOptions{kTimeout}, MpiCollectives::braid);
  std::vector<uint8_t> buf(8 * 4, 0);
  const DType d = me == 0 ? DType::f32 : DType::i32;
  try {
    allreduce(*g, buf.data(), 8, d, ReduceOp::sum, options(Algorithm::direct));
    ADD_FAILURE() << "an f32 allreduce on rank 0 and i32 elsewhere completed";
  } catch (const CollectiveMismatch& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("(f32 sum"), std::string::npos) << what;
    EXPECT_NE(what.find("(i32 sum"), std::string::npos) << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected CollectiveMismatch, got: " << e.what();
  }
}

}  // namespace
}  // namespace braid::comm

namespace {
[[maybe_unused]] const auto* const kGroups =
    ::testing::AddGlobalTestEnvironment(braid::comm::groups = new braid::comm::Groups);
}  // namespace
