// Requests per client, bounded: a token bucket per key (a user's token hash, or the peer's
// address before it authenticates), refilled at `per_second` up to `burst`. A request that
// finds the bucket empty is refused (HTTP 429) and costs nothing. Thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>

namespace braid::serve {

class RateLimiter {
 public:
  RateLimiter(double per_second, double burst);

  // Takes one request from `key`'s bucket at time `now` (seconds, any fixed origin).
  bool allow(const std::string& key, double now);

 private:
  struct Bucket {
    double tokens = 0;
    double last = 0;
  };
  double per_second_, burst_;
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace braid::serve
