#include "serve/rate_limiter.h"

#include <algorithm>

#include "core/error.h"

namespace braid::serve {

RateLimiter::RateLimiter(double per_second, double burst) : per_second_(per_second), burst_(burst) {
  BRAID_CHECK(per_second > 0 && burst >= 1, "rate limit: ", per_second,
              " requests/s and a burst of ", burst,
              "; both must be positive, the burst at least 1");
}

bool RateLimiter::allow(const std::string& key, double now) {
  const std::lock_guard lock(mu_);
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{burst_, now});
  Bucket& b = it->second;
  if (!fresh) b.tokens = std::min(burst_, b.tokens + (now - b.last) * per_second_);
  b.last = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

}  // namespace braid::serve
