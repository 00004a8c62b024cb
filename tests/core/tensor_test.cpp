#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "core/memory.h"
#include "core/rng.h"

namespace braid {
namespace {

TEST(Tensor, EnsureReusesMemoryWhenLargeEnough) {
  Tensor t = Tensor::empty({4, 8});
  void* before = t.raw();
  const int64_t allocations = MemoryTracker::process().allocations();
  t.ensure({2, 8});
  t.ensure({4, 8});
  EXPECT_EQ(t.raw(), before);
  EXPECT_EQ(MemoryTracker::process().allocations(), allocations);
  t.ensure({5, 8});
  EXPECT_EQ(MemoryTracker::process().allocations(), allocations + 1);
  EXPECT_EQ(t.shape(), Shape({5, 8}));
}

TEST(Tensor, MemoryIsAlignedAndAccounted) {
  const auto before = MemoryTracker::process().snapshot();
  {
    Tensor t = Tensor::empty({3, 5}, DType::f32, MemCategory::workspace);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kAlignment, 0u);
    const auto during = MemoryTracker::process().snapshot();
    const auto ws = static_cast<size_t>(MemCategory::workspace);
    EXPECT_EQ(during.current[ws] - before.current[ws], 60);
  }
  const auto after = MemoryTracker::process().snapshot();
  EXPECT_EQ(after.current, before.current);
}

TEST(Tensor, WrongDtypeAccessIsAnError) {
  Tensor t = Tensor::empty({2}, DType::i32);
  EXPECT_THROW(t.f32(), Error);
  EXPECT_NO_THROW(t.data<int32_t>());
}

TEST(Tensor, ReshapeChecksElementCount) {
  Tensor t = Tensor::empty({2, 6});
  EXPECT_EQ(t.reshape({3, 4}).shape(), Shape({3, 4}));
  EXPECT_THROW(t.reshape({5}), Error);
}

TEST(Rng, CounterBasedStreamIsReproducibleAndSeekable) {
  Rng a(42), b(42);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
  Rng c(42, 0, 5);
  Rng d(42);
  for (int i = 0; i < 5; ++i) d.next_u32();
  EXPECT_EQ(c.next_u32(), d.next_u32());
  EXPECT_NE(Rng(1).next_u32(), Rng(2).next_u32());
}

TEST(Rng, UniformMomentsAreRight) {
  Rng r(7);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    s += u;
    s2 += u * u;
  }
  EXPECT_NEAR(s / n, 0.5, 0.005);
  EXPECT_NEAR(s2 / n - (s / n) * (s / n), 1.0 / 12, 0.002);
}

}  // namespace
}  // namespace braid
