// The request limit per client (serve/rate_limiter.h), on a clock the test sets.
#include "serve/rate_limiter.h"

#include <gtest/gtest.h>

namespace braid::serve {
namespace {

TEST(RateLimiter, ABurstThenTheRefillRate) {
  RateLimiter limit(10, 3);
  EXPECT_TRUE(limit.allow("a", 0));
  EXPECT_TRUE(limit.allow("a", 0));
  EXPECT_TRUE(limit.allow("a", 0));
  EXPECT_FALSE(limit.allow("a", 0)) << "the burst is 3";
  EXPECT_TRUE(limit.allow("b", 0)) << "each key has its own bucket";
  EXPECT_FALSE(limit.allow("a", 0.05)) << "half a token refilled";
  EXPECT_TRUE(limit.allow("a", 0.1)) << "10/s: a token after 0.1 s";
  EXPECT_FALSE(limit.allow("a", 0.1));
  // A long pause refills to the burst, not beyond.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limit.allow("a", 100)) << i;
  EXPECT_FALSE(limit.allow("a", 100));
}

}  // namespace
}  // namespace braid::serve
